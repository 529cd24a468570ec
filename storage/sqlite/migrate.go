package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/storage"
)

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS hymical_schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at INTEGER NOT NULL
) STRICT`

func schemaVersion(ctx context.Context, q querier) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema
		WHERE type = 'table' AND name = 'hymical_schema_migrations'`).Scan(&n); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	var v int
	err := q.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM hymical_schema_migrations`).Scan(&v)
	return v, err
}

// SchemaVersion is the newest migration applied; 0 on a database nothing has
// migrated.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	v, err := schemaVersion(ctx, s.reader)
	if err != nil {
		return 0, s.mapErr("read schema version", err)
	}
	return v, nil
}

// Migrate applies the embedded SQLite migrations up to p.To (zero: the
// newest), each in its own writer transaction together with its version row.
// Each step re-reads the version inside its transaction, so two processes
// migrating at once apply every step exactly once. Last, it converts a
// small database made before incremental vacuum (convertAutoVacuum).
func (s *Store) Migrate(ctx context.Context, p storage.MigrateParams) (storage.MigrateResult, error) {
	const op = "migrate"
	all, err := migrations.SQLite()
	if err != nil {
		return storage.MigrateResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	latest := len(all)
	if p.To < 0 || p.To > latest {
		return storage.MigrateResult{}, fmt.Errorf("sqlite: %s: %w: target version %d is outside 1-%d, the versions this build has",
			op, storage.ErrInvalid, p.To, latest)
	}
	target := p.To
	if target == 0 {
		target = latest
	}

	var from int
	if err := s.write(ctx, op, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, createMigrationsTable); err != nil {
			return err
		}
		from, err = schemaVersion(ctx, tx)
		return err
	}); err != nil {
		return storage.MigrateResult{}, err
	}
	if from > latest {
		return storage.MigrateResult{}, fmt.Errorf("sqlite: %s: %w: the database is at version %d and this build knows up to %d: upgrade the hymical binary",
			op, storage.ErrSchemaUnknown, from, latest)
	}
	if from > target {
		return storage.MigrateResult{}, fmt.Errorf("sqlite: %s: %w: the database is already at version %d, past the target %d: migrations only go forward",
			op, storage.ErrInvalid, from, target)
	}

	res := storage.MigrateResult{From: from, To: from, Applied: []string{}}
	for _, m := range all[from:target] {
		name := fmt.Sprintf("%04d_%s", m.Version, m.Name)
		applied := false
		err := s.write(ctx, op+" "+name, func(tx *sql.Tx) error {
			current, err := schemaVersion(ctx, tx)
			if err != nil {
				return err
			}
			if current >= m.Version {
				return nil // another process got here first
			}
			if current != m.Version-1 {
				return fmt.Errorf("the database is at version %d, expected %d before applying %s", current, m.Version-1, name)
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO hymical_schema_migrations (version, name, applied_at)
				VALUES (?, ?, ?)`, m.Version, m.Name, micros(s.now(time.Time{}))); err != nil {
				return err
			}
			applied = true
			return nil
		})
		if err != nil {
			return res, err
		}
		if applied {
			res.Applied = append(res.Applied, name)
		}
		res.To = m.Version
	}
	s.convertAutoVacuum(ctx)
	return res, nil
}

// vacuumConvertMax is the most live data (64 MiB) that Migrate converts
// to incremental auto_vacuum by itself: a VACUUM that copies that much
// takes seconds at start-up. Beyond it the operator chooses the moment,
// since a VACUUM holds the write lock for its whole run and needs free
// disk of about twice the live data (a copy, then the WAL).
const vacuumConvertMax = 64 << 20

// convertAutoVacuum converts a database made before new files were
// created in incremental auto_vacuum mode, so that DeliveryPrune can give
// pages back to the file system. The mode of a file that has tables
// changes only with a VACUUM, which rewrites the whole file: it is run
// here when the live data is at most vacuumConvertMax, and otherwise a
// warning says how to run it. Failing to convert fails nothing: the file
// only keeps its free pages, as before.
func (s *Store) convertAutoVacuum(ctx context.Context) {
	const op = "convert to incremental auto_vacuum"
	var mode, pages, free, pageSize int64
	for _, p := range []struct {
		pragma string
		v      *int64
	}{{"auto_vacuum", &mode}, {"page_count", &pages}, {"freelist_count", &free}, {"page_size", &pageSize}} {
		if err := s.writer.QueryRowContext(ctx, "PRAGMA "+p.pragma).Scan(p.v); err != nil {
			s.log.Warn("sqlite: could not read the database's auto_vacuum mode; disk may not shrink after retention", "error", s.mapErr(op, err))
			return
		}
	}
	if mode == autoVacuumIncremental {
		return
	}
	live, size := (pages-free)*pageSize, pages*pageSize
	if live > s.vacuumConvertMax {
		s.log.Warn("sqlite: this database was made before incremental vacuum, so the file does not shrink when retention removes rows; "+
			"to convert it, stop hymical and run: sqlite3 "+s.path+" 'PRAGMA auto_vacuum=INCREMENTAL; VACUUM;' "+
			"(it holds the database for the whole run and needs free disk of about twice the live data)",
			"file_bytes", size, "live_bytes", live)
		return
	}
	start := time.Now()
	// The writer pool has one connection; Conn keeps the three statements
	// on it. VACUUM cannot run inside a transaction, hence not s.write.
	conn, err := s.writer.Conn(ctx)
	if err == nil {
		defer conn.Close()
		for _, q := range []string{"PRAGMA auto_vacuum=INCREMENTAL", "VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"} {
			if _, err = conn.ExecContext(ctx, q); err != nil {
				break
			}
		}
	}
	if err != nil {
		s.log.Warn("sqlite: could not convert the database to incremental vacuum; the file keeps its free pages and the next start tries again",
			"error", s.mapErr(op, err), "file_bytes", size, "live_bytes", live)
		return
	}
	s.log.Info("sqlite: converted the database to incremental vacuum, so the file shrinks when retention removes rows",
		"file_bytes_before", size, "live_bytes", live, "took", time.Since(start).Round(time.Millisecond))
}
