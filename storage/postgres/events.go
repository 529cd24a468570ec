package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// EventCreate inserts ev and one pending delivery, due at the event's
// created_at, for every endpoint that Matches it, in one transaction. An
// empty ID becomes a new "evt" id and a zero CreatedAt the database clock.
//
// With an IdempotencyKey already taken, it writes nothing and returns the
// event and deliveries created then, with Duplicate set. Concurrent creators
// with one key are safe: ON CONFLICT waits for the other transaction and
// then sees its row.
func (s *Store) EventCreate(ctx context.Context, ev storage.Event) (storage.EventCreateResult, error) {
	const op = "event create"
	if err := ev.Validate(); err != nil {
		return storage.EventCreateResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if ev.ID == "" {
		ev.ID = storage.NewID("evt")
	}
	var res storage.EventCreateResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The conflict target is only the idempotency key: a taken id is
		// still a unique violation, which mapErr reports as ErrConflict.
		row := tx.QueryRow(ctx, `
			INSERT INTO webhook_events AS e (id, type, form_id, submission_id, payload,
				idempotency_key, trace_parent, created_at, endpoint_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8::timestamptz, now()), $9)
			ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
			RETURNING `+eventColumns,
			ev.ID, ev.Type, ev.FormID, ev.SubmissionID, []byte(ev.Payload),
			nullText(ev.IdempotencyKey), ev.TraceParent, dbNow(ev.CreatedAt), ev.EndpointID)
		created, err := scanEvent(row)
		if errors.Is(err, pgx.ErrNoRows) {
			res, err = existingEvent(ctx, tx, ev.IdempotencyKey)
			return err
		}
		if err != nil {
			return err
		}
		res.Event = created
		res.Deliveries, err = fanOut(ctx, tx, created)
		return err
	})
	if err != nil {
		return storage.EventCreateResult{}, mapErr(op, err)
	}
	return res, nil
}

// existingEvent reads back the event that already holds key, with the
// deliveries it fanned out to.
func existingEvent(ctx context.Context, tx pgx.Tx, key string) (storage.EventCreateResult, error) {
	ev, err := scanEvent(tx.QueryRow(ctx,
		`SELECT `+eventColumns+` FROM webhook_events AS e WHERE e.idempotency_key = $1`, key))
	if err != nil {
		return storage.EventCreateResult{}, fmt.Errorf("read event with idempotency key: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries AS d
		WHERE d.event_id = $1 ORDER BY d.endpoint_id`, ev.ID)
	if err != nil {
		return storage.EventCreateResult{}, err
	}
	ds, err := collectDeliveries(rows)
	if err != nil {
		return storage.EventCreateResult{}, err
	}
	return storage.EventCreateResult{Event: ev, Deliveries: ds, Duplicate: true}, nil
}

// fanOut inserts one pending delivery of ev for every endpoint
// storage.FanOut picks, so both backends agree on it. A delivery to a
// disabled or ordered endpoint starts held; an ordered endpoint with
// nothing under way then lets its next one go.
func fanOut(ctx context.Context, tx pgx.Tx, ev storage.Event) ([]storage.Delivery, error) {
	rows, err := tx.Query(ctx, `SELECT id, event_types, form_ids, disabled_at, ordered FROM webhook_endpoints ORDER BY id`)
	if err != nil {
		return nil, err
	}
	var ep storage.Endpoint
	var all []storage.Endpoint
	_, err = pgx.ForEachRow(rows, []any{&ep.ID, &ep.EventTypes, &ep.FormIDs, &ep.DisabledAt, &ep.Ordered}, func() error {
		all = append(all, ep)
		ep = storage.Endpoint{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read endpoints to fan out to: %w", err)
	}
	targets, err := storage.FanOut(all, ev)
	if err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		return []storage.Delivery{}, nil
	}
	var ids, endpointIDs, ordered []string
	var held []bool
	for _, t := range targets {
		ids = append(ids, storage.NewID("dlv"))
		endpointIDs = append(endpointIDs, t.ID)
		held = append(held, t.DisabledAt != nil || t.Ordered)
		if t.Ordered {
			ordered = append(ordered, t.ID)
		}
	}
	rows, err = tx.Query(ctx, `
		INSERT INTO webhook_deliveries AS d (id, endpoint_id, event_id, state, attempts, cycle_attempts,
			next_attempt_at, created_at, held)
		SELECT x.id, x.endpoint_id, $3, 'pending', 0, 0, $4, $4, x.held
		FROM unnest($1::text[], $2::text[], $5::boolean[]) AS x (id, endpoint_id, held)
		RETURNING `+deliveryColumns,
		ids, endpointIDs, ev.ID, ev.CreatedAt, held)
	if err != nil {
		return nil, err
	}
	ds, err := collectDeliveries(rows)
	if err != nil {
		return nil, err
	}
	if len(ordered) > 0 {
		if _, err := tx.Exec(ctx, promoteSQL, ordered); err != nil {
			return nil, err
		}
		if rows, err = tx.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries AS d
			WHERE d.id = ANY($1::text[])`, ids); err != nil {
			return nil, err
		}
		if ds, err = collectDeliveries(rows); err != nil {
			return nil, err
		}
	}
	// RETURNING has no order; match the order a duplicate create reads back.
	sort.Slice(ds, func(i, j int) bool { return ds[i].EndpointID < ds[j].EndpointID })
	return ds, nil
}

// EventGet returns the event with this id, or storage.ErrNotFound.
func (s *Store) EventGet(ctx context.Context, id string) (storage.Event, error) {
	ev, err := scanEvent(s.pool.QueryRow(ctx, `SELECT `+eventColumns+` FROM webhook_events AS e WHERE e.id = $1`, id))
	if err != nil {
		return storage.Event{}, mapErr("event get "+id, err)
	}
	return ev, nil
}
