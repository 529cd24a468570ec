package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/hymical/hymical/storage"
)

// WorkerHeartbeat registers w or refreshes it. StartedAt and HeartbeatAt
// default to the Go clock; a refresh keeps the StartedAt first registered.
func (s *Store) WorkerHeartbeat(ctx context.Context, w storage.Worker) error {
	op := "worker heartbeat " + w.ID
	if strings.TrimSpace(w.ID) == "" {
		return fmt.Errorf("sqlite: worker heartbeat: %w: worker id is required", storage.ErrInvalid)
	}
	heartbeat := s.now(w.HeartbeatAt)
	started := heartbeat
	if !w.StartedAt.IsZero() {
		started = s.now(w.StartedAt)
	}
	return s.write(ctx, op, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO hymical_workers (id, build, schema_version, host, started_at, heartbeat_at)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET
				build = excluded.build,
				schema_version = excluded.schema_version,
				host = excluded.host,
				heartbeat_at = excluded.heartbeat_at`,
			w.ID, w.Build, w.SchemaVersion, w.Host, micros(started), micros(heartbeat))
		return err
	})
}

// WorkerList returns the workers whose heartbeat is at or after since,
// ordered by id.
func (s *Store) WorkerList(ctx context.Context, since time.Time) ([]storage.Worker, error) {
	const op = "list workers"
	rows, err := s.reader.QueryContext(ctx, `
		SELECT id, build, schema_version, host, started_at, heartbeat_at
		FROM hymical_workers WHERE heartbeat_at >= ? ORDER BY id`, micros(since))
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	defer rows.Close()
	out := []storage.Worker{}
	for rows.Next() {
		var (
			w                  storage.Worker
			started, heartbeat int64
		)
		if err := rows.Scan(&w.ID, &w.Build, &w.SchemaVersion, &w.Host, &started, &heartbeat); err != nil {
			return nil, s.mapErr(op, err)
		}
		w.StartedAt = fromMicros(started)
		w.HeartbeatAt = fromMicros(heartbeat)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, s.mapErr(op, err)
	}
	return out, nil
}

// WorkerDeregister removes the worker. Removing one that is not registered
// is not an error: a process shutting down after its row was swept is fine.
func (s *Store) WorkerDeregister(ctx context.Context, id string) error {
	return s.write(ctx, "deregister worker "+id, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM hymical_workers WHERE id = ?`, id)
		return err
	})
}
