package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// EndpointCreate inserts e. An empty ID becomes a new "ep" id; zero
// CreatedAt and UpdatedAt become the database clock.
func (s *Store) EndpointCreate(ctx context.Context, e storage.Endpoint) (storage.Endpoint, error) {
	const op = "endpoint create"
	if err := e.Validate(); err != nil {
		return storage.Endpoint{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if e.ID == "" {
		e.ID = storage.NewID("ep")
	}
	e = normalizeEndpoint(e)
	secrets, err := storage.EncodeSecrets(e.Secrets)
	if err != nil {
		return storage.Endpoint{}, fmt.Errorf("postgres: %s: encode secrets: %w", op, err)
	}
	row := s.pool.QueryRow(ctx, `
		INSERT INTO webhook_endpoints (id, transport, url, config, event_types, form_ids, secrets,
			description, disabled_at, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
			coalesce($10::timestamptz, now()), coalesce($11::timestamptz, $10::timestamptz, now()))
		RETURNING `+endpointColumns,
		e.ID, e.Transport, e.URL, e.Config, e.EventTypes, e.FormIDs, secrets,
		e.Description, e.DisabledAt, dbNow(e.CreatedAt), dbNow(e.UpdatedAt))
	out, err := scanEndpoint(row)
	if err != nil {
		return storage.Endpoint{}, mapErr(op, err)
	}
	return out, nil
}

// EndpointGet returns the endpoint with this id, or storage.ErrNotFound.
func (s *Store) EndpointGet(ctx context.Context, id string) (storage.Endpoint, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = $1`, id)
	e, err := scanEndpoint(row)
	if err != nil {
		return storage.Endpoint{}, mapErr("endpoint get "+id, err)
	}
	return e, nil
}

// EndpointList returns every endpoint, ordered by id.
func (s *Store) EndpointList(ctx context.Context) ([]storage.Endpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints ORDER BY id`)
	if err != nil {
		return nil, mapErr("endpoint list", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Endpoint, error) { return scanEndpoint(r) })
	if err != nil {
		return nil, mapErr("endpoint list", err)
	}
	if out == nil {
		out = []storage.Endpoint{}
	}
	return out, nil
}

// EndpointUpdate replaces every mutable field of the endpoint e.ID with e's
// and sets updated_at to the database clock. ID and CreatedAt are kept.
func (s *Store) EndpointUpdate(ctx context.Context, e storage.Endpoint) (storage.Endpoint, error) {
	op := "endpoint update " + e.ID
	if err := e.Validate(); err != nil {
		return storage.Endpoint{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	e = normalizeEndpoint(e)
	secrets, err := storage.EncodeSecrets(e.Secrets)
	if err != nil {
		return storage.Endpoint{}, fmt.Errorf("postgres: %s: encode secrets: %w", op, err)
	}
	var readAt *time.Time
	if !e.UpdatedAt.IsZero() {
		readAt = &e.UpdatedAt
	}
	// updated_at is the version the optimistic check compares, so every
	// update moves it forward, even two within one clock tick.
	row := s.pool.QueryRow(ctx, `
		UPDATE webhook_endpoints
		SET transport = $2, url = $3, config = $4, event_types = $5, form_ids = $6, secrets = $7,
			description = $8, disabled_at = $9,
			updated_at = greatest(now(), updated_at + interval '1 microsecond')
		WHERE id = $1 AND ($10::timestamptz IS NULL OR updated_at = $10)
		RETURNING `+endpointColumns,
		e.ID, e.Transport, e.URL, e.Config, e.EventTypes, e.FormIDs, secrets,
		e.Description, e.DisabledAt, readAt)
	out, err := scanEndpoint(row)
	if errors.Is(err, pgx.ErrNoRows) && readAt != nil {
		if _, gerr := s.EndpointGet(ctx, e.ID); gerr == nil {
			return storage.Endpoint{}, fmt.Errorf("postgres: %s: %w: it changed since it was read at %s; read it again and reapply the change",
				op, storage.ErrConflict, readAt.UTC().Format(time.RFC3339Nano))
		}
	}
	if err != nil {
		return storage.Endpoint{}, mapErr(op, err)
	}
	return out, nil
}
