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
	secrets, err := s.secrets.Encode(e.ID, e.Secrets)
	if err != nil {
		return storage.Endpoint{}, fmt.Errorf("postgres: %s: encode secrets: %w", op, err)
	}
	row := s.pool.QueryRow(ctx, `
		INSERT INTO webhook_endpoints (id, transport, url, config, event_types, form_ids, secrets,
			description, disabled_at, created_at, updated_at, disabled_reason, rate_limit, rate_burst,
			max_in_flight, ordered, retry_schedule)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
			coalesce($10::timestamptz, now()), coalesce($11::timestamptz, $10::timestamptz, now()),
			$12, $13, $14, $15, $16, $17)
		RETURNING `+endpointColumns,
		e.ID, e.Transport, e.URL, e.Config, e.EventTypes, e.FormIDs, secrets,
		e.Description, e.DisabledAt, dbNow(e.CreatedAt), dbNow(e.UpdatedAt), e.DisabledReason,
		e.RateLimit, e.RateBurst, e.MaxInFlight, e.Ordered, storage.EncodeRetrySchedule(e.RetrySchedule))
	out, err := scanEndpoint(row, s.secrets)
	if err != nil {
		return storage.Endpoint{}, mapErr(op, err)
	}
	return out, nil
}

// EndpointGet returns the endpoint with this id, or storage.ErrNotFound.
func (s *Store) EndpointGet(ctx context.Context, id string) (storage.Endpoint, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = $1`, id)
	e, err := scanEndpoint(row, s.secrets)
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
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Endpoint, error) { return scanEndpoint(r, s.secrets) })
	if err != nil {
		return nil, mapErr("endpoint list", err)
	}
	if out == nil {
		out = []storage.Endpoint{}
	}
	return out, nil
}

// EndpointUpdate replaces every mutable field of the endpoint e.ID with e's
// and sets updated_at to the database clock. ID, CreatedAt and FailingSince
// are kept, but enabling a disabled endpoint clears FailingSince. When the
// endpoint is disabled, enabled, or its ordering changes, its pending
// deliveries are held or released to match in the same transaction.
func (s *Store) EndpointUpdate(ctx context.Context, e storage.Endpoint) (storage.Endpoint, error) {
	op := "endpoint update " + e.ID
	if err := e.Validate(); err != nil {
		return storage.Endpoint{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	e = normalizeEndpoint(e)
	secrets, err := s.secrets.Encode(e.ID, e.Secrets)
	if err != nil {
		return storage.Endpoint{}, fmt.Errorf("postgres: %s: encode secrets: %w", op, err)
	}
	var readAt *time.Time
	if !e.UpdatedAt.IsZero() {
		readAt = &e.UpdatedAt
	}
	var out storage.Endpoint
	released := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var before control
		err := tx.QueryRow(ctx, `SELECT disabled_at IS NOT NULL, ordered FROM webhook_endpoints
			WHERE id = $1 FOR NO KEY UPDATE`, e.ID).Scan(&before.disabled, &before.ordered)
		if err != nil {
			return err
		}
		// updated_at is the version the optimistic check compares, so every
		// update moves it forward, even two within one clock tick.
		out, err = scanEndpoint(tx.QueryRow(ctx, `
			UPDATE webhook_endpoints
			SET transport = $2, url = $3, config = $4, event_types = $5, form_ids = $6, secrets = $7,
				description = $8, disabled_at = $9,
				updated_at = greatest(now(), updated_at + interval '1 microsecond'),
				disabled_reason = $11, rate_limit = $12, rate_burst = $13, max_in_flight = $14,
				ordered = $15, retry_schedule = $16
			WHERE id = $1 AND ($10::timestamptz IS NULL OR updated_at = $10)
			RETURNING `+endpointColumns,
			e.ID, e.Transport, e.URL, e.Config, e.EventTypes, e.FormIDs, secrets,
			e.Description, e.DisabledAt, readAt, e.DisabledReason, e.RateLimit, e.RateBurst,
			e.MaxInFlight, e.Ordered, storage.EncodeRetrySchedule(e.RetrySchedule)), s.secrets)
		if err != nil {
			return err
		}
		after := control{disabled: out.DisabledAt != nil, ordered: out.Ordered}
		if before.disabled && !after.disabled && out.FailingSince != nil {
			// Enabled again: its failures so far are what it was disabled
			// for, and must not disable it again at once.
			if _, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = NULL WHERE id = $1`, e.ID); err != nil {
				return err
			}
			out.FailingSince = nil
		}
		if after != before {
			released, err = refreshHolds(ctx, tx, e.ID, after, s.wake.id)
			return err
		}
		return nil
	})
	if errors.Is(err, pgx.ErrNoRows) && readAt != nil {
		if _, gerr := s.EndpointGet(ctx, e.ID); gerr == nil {
			return storage.Endpoint{}, fmt.Errorf("postgres: %s: %w: it changed since it was read at %s; read it again and reapply the change",
				op, storage.ErrConflict, readAt.UTC().Format(time.RFC3339Nano))
		}
	}
	if err != nil {
		return storage.Endpoint{}, mapErr(op, err)
	}
	if released {
		s.notified()
	}
	return out, nil
}
