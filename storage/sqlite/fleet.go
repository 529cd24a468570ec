package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/hymical/hymical/storage"
)

// DeliveryPrune removes delivered deliveries completed before the cutoff,
// oldest ids first, with everything that hangs off them, in one writer
// transaction.
func (s *Store) DeliveryPrune(ctx context.Context, p storage.DeliveryPruneParams) (int, error) {
	const op = "prune deliveries"
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	var n int
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		// The doomed rows go into a temporary table so that every delete
		// below names exactly the same set.
		if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS prune_ids (id TEXT PRIMARY KEY, event_id TEXT NOT NULL)`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM prune_ids`); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `
			INSERT INTO prune_ids (id, event_id)
			SELECT id, event_id FROM webhook_deliveries
			WHERE state = 'delivered' AND completed_at < ?
			ORDER BY state, id
			LIMIT ?`, micros(p.CompletedBefore), p.BatchSize())
		if err != nil {
			return err
		}
		affected, err := res.RowsAffected()
		if err != nil || affected == 0 {
			return err
		}
		n = int(affected)
		// Attempts and replay records reference the delivery, the
		// delivery references its event: remove them in that order, then
		// the events nothing references any more.
		for _, q := range []string{
			`DELETE FROM webhook_delivery_attempts WHERE delivery_id IN (SELECT id FROM prune_ids)`,
			`DELETE FROM webhook_delivery_replays WHERE delivery_id IN (SELECT id FROM prune_ids)`,
			`DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM prune_ids)`,
			`DELETE FROM webhook_events WHERE id IN (SELECT event_id FROM prune_ids)
				AND NOT EXISTS (SELECT 1 FROM webhook_deliveries AS d WHERE d.event_id = webhook_events.id)`,
			`DELETE FROM prune_ids`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		if err := s.vacuumFreed(ctx); err != nil {
			// The rows are gone; their pages stay on the free list, and
			// the next prune's pass takes them.
			return n, err
		}
	}
	return n, nil
}

// vacuumPassPages bounds the pages one pass gives back to the file
// system, so a pass holds the one writer for a bounded time (4096 pages
// are 16 MB at the default 4 KB page); other writes take their turn
// between passes.
const vacuumPassPages = 4096

// vacuumFreed gives back to the file system the pages that deletes left
// on the free list, in passes of vacuumPassPages, on a database made in
// incremental auto_vacuum mode; on any other it does nothing. Without it
// SQLite reuses free pages but never shrinks the file, so disk would not
// follow retention. In WAL mode the file is cut at the next checkpoint.
func (s *Store) vacuumFreed(ctx context.Context) error {
	// A pass that leaves no fewer free pages than the last (another
	// process deleting as fast) ends the loop: the next prune goes on.
	prev := int64(-1)
	for {
		var mode, left int64
		err := s.write(ctx, "return free pages after a prune", func(tx *sql.Tx) error {
			if err := tx.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != autoVacuumIncremental {
				return err
			}
			// The pragma yields a row per page it moves: drained as a query,
			// so it runs to the end whatever a driver's Exec does with rows.
			rows, err := tx.QueryContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", vacuumPassPages))
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			if err := rows.Err(); err != nil {
				rows.Close()
				return err
			}
			if err := rows.Close(); err != nil {
				return err
			}
			return tx.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&left)
		})
		if err != nil || mode != autoVacuumIncremental || left == 0 || (prev >= 0 && left >= prev) {
			return err
		}
		prev = left
	}
}

// autoVacuumIncremental is PRAGMA auto_vacuum's value for INCREMENTAL.
const autoVacuumIncremental = 2

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

// BackupInto writes a consistent copy of the whole database to path, with
// VACUUM INTO, while other connections and processes go on writing. path
// must not exist or be an empty file; the caller creates it (with the
// mode it wants) and makes it durable afterwards, since SQLite does not
// sync the file it writes.
//
// VACUUM INTO rather than the online backup API: it is one statement the
// store runs like any other, through database/sql, and it reads the
// database in one read transaction, so the copy is a snapshot of one
// instant that the WAL lets writers go on past. The backup API, copying a
// few pages per step, starts over whenever another connection writes
// between steps, and under a steady load may never finish; copying in one
// step is the same snapshot with a driver-specific call. The copy is
// compacted too (no free pages), so it can be smaller than the file.
//
// It runs on a connection of its own: the readers' query_only refuses
// VACUUM INTO, though it changes only the file it writes, and the one
// writer must stay free for the writes the copy does not hold up.
func (s *Store) BackupInto(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", fmt.Sprintf("%s?_pragma=busy_timeout(%d)", s.path, s.busyTimeout.Milliseconds()))
	if err != nil {
		return fmt.Errorf("sqlite: open a connection to copy %s: %w", s.path, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		return s.mapErr("copy the database into "+path, err)
	}
	return db.Close()
}
