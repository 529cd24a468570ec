package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// DeliveryPrune removes delivered deliveries completed before the cutoff,
// oldest ids first, with everything that hangs off them, in one
// transaction. Rows locked by anyone else are skipped, for the next run.
func (s *Store) DeliveryPrune(ctx context.Context, p storage.DeliveryPruneParams) (int, error) {
	const op = "delivery prune"
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT id FROM webhook_deliveries
			WHERE state = 'delivered' AND completed_at < $1
			ORDER BY state, id
			LIMIT $2
			FOR UPDATE SKIP LOCKED`, p.CompletedBefore, p.BatchSize())
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		n = len(ids)
		// Attempts and replay records reference the delivery, the
		// delivery references its event: remove them in that order, then
		// the events nothing references any more.
		_, err = tx.Exec(ctx, `
			WITH a AS (DELETE FROM webhook_delivery_attempts WHERE delivery_id = ANY($1::text[])),
			     r AS (DELETE FROM webhook_delivery_replays WHERE delivery_id = ANY($1::text[]))
			SELECT 1`, ids)
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `DELETE FROM webhook_deliveries WHERE id = ANY($1::text[]) RETURNING event_id`, ids)
		if err != nil {
			return err
		}
		events, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			DELETE FROM webhook_events AS e
			WHERE e.id = ANY($1::text[])
			  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries AS d WHERE d.event_id = e.id)`, events)
		return err
	})
	if err != nil {
		return 0, mapErr(op, err)
	}
	return n, nil
}

// WorkerHeartbeat registers w or refreshes it. Zero StartedAt and
// HeartbeatAt become the database clock; a refresh with a zero StartedAt
// keeps the one registered first.
func (s *Store) WorkerHeartbeat(ctx context.Context, w storage.Worker) error {
	const op = "worker heartbeat"
	if w.ID == "" {
		return fmt.Errorf("postgres: %s: %w: worker id is required", op, storage.ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO hymical_workers AS w (id, build, schema_version, host, started_at, heartbeat_at)
		VALUES ($1, $2, $3, $4, coalesce($5::timestamptz, now()), coalesce($6::timestamptz, now()))
		ON CONFLICT (id) DO UPDATE SET
			build = excluded.build,
			schema_version = excluded.schema_version,
			host = excluded.host,
			started_at = coalesce($5::timestamptz, w.started_at),
			heartbeat_at = excluded.heartbeat_at`,
		w.ID, w.Build, w.SchemaVersion, w.Host, dbNow(w.StartedAt), dbNow(w.HeartbeatAt))
	return mapErr(op, err)
}

// WorkerList returns the workers whose last heartbeat is at or after since,
// ordered by id. A zero since returns every worker.
func (s *Store) WorkerList(ctx context.Context, since time.Time) ([]storage.Worker, error) {
	const op = "worker list"
	rows, err := s.pool.Query(ctx, `
		SELECT id, build, schema_version, host, started_at, heartbeat_at FROM hymical_workers
		WHERE $1::timestamptz IS NULL OR heartbeat_at >= $1::timestamptz
		ORDER BY id`, dbNow(since))
	if err != nil {
		return nil, mapErr(op, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Worker, error) {
		var w storage.Worker
		err := r.Scan(&w.ID, &w.Build, &w.SchemaVersion, &w.Host, &w.StartedAt, &w.HeartbeatAt)
		return w, err
	})
	if err != nil {
		return nil, mapErr(op, err)
	}
	if out == nil {
		out = []storage.Worker{}
	}
	return out, nil
}

// WorkerDeregister removes the worker. Removing one that is not registered
// is not an error: a process shutting down after its row was swept is fine.
func (s *Store) WorkerDeregister(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM hymical_workers WHERE id = $1`, id)
	return mapErr("worker deregister "+id, err)
}
