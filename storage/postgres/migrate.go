package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/storage"
)

// migrateLockKey names the advisory lock migrators share. Advisory locks
// are per database, so this serialises migrators of one database only.
const migrateLockKey int64 = 0x68796d6963616c // "hymical"

// Migrate applies the pending migrations up to p.To (zero: the newest),
// each in its own transaction together with its version row. Every
// transaction first takes the migration advisory lock and re-reads the
// version, so any number of processes may migrate at once: each migration
// is applied exactly once and the others find nothing left to do.
func (s *Store) Migrate(ctx context.Context, p storage.MigrateParams) (storage.MigrateResult, error) {
	const op = "migrate"
	all, err := migrations.Postgres()
	if err != nil {
		return storage.MigrateResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	latest := len(all) // migrations.Postgres guarantees versions 1..len(all)
	target := p.To
	if target == 0 {
		target = latest
	}
	if target < 0 || target > latest {
		return storage.MigrateResult{}, fmt.Errorf("postgres: %s: %w: version %d does not exist, this build has versions 1 to %d",
			op, storage.ErrInvalid, p.To, latest)
	}

	res := storage.MigrateResult{From: -1, Applied: []string{}}
	for {
		var applied string
		var done bool
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey); err != nil {
				return fmt.Errorf("take the migration lock: %w", err)
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS hymical_schema_migrations (
				version    integer PRIMARY KEY,
				name       text NOT NULL,
				applied_at timestamptz NOT NULL)`); err != nil {
				return fmt.Errorf("create hymical_schema_migrations: %w", err)
			}
			var current int
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM hymical_schema_migrations`).Scan(&current); err != nil {
				return fmt.Errorf("read schema version: %w", err)
			}
			if res.From < 0 {
				res.From = current
			}
			if current > latest {
				return fmt.Errorf("%w: the database is at schema version %d and this build knows versions up to %d; upgrade the hymical binary",
					storage.ErrSchemaUnknown, current, latest)
			}
			if current > target {
				return fmt.Errorf("%w: the database is at schema version %d, past the requested %d: migrations only go forward",
					storage.ErrInvalid, current, target)
			}
			if current == target {
				res.To = current
				done = true
				return nil
			}
			m := all[current] // version current+1
			name := fmt.Sprintf("%04d_%s", m.Version, m.Name)
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("apply %s: %w", name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO hymical_schema_migrations (version, name, applied_at)
				VALUES ($1, $2, now())`, m.Version, m.Name); err != nil {
				return fmt.Errorf("record %s: %w", name, err)
			}
			applied = name
			return nil
		})
		if err != nil {
			return storage.MigrateResult{}, mapErr(op, err)
		}
		if done {
			return res, nil
		}
		res.Applied = append(res.Applied, applied)
	}
}

// SchemaVersion returns the newest migration version recorded in the
// database, and 0 when no migration has ever run.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	const op = "schema version"
	var v int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A query naming a missing table fails to parse, so look first.
		var present bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('hymical_schema_migrations') IS NOT NULL`).Scan(&present); err != nil || !present {
			return err
		}
		return tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM hymical_schema_migrations`).Scan(&v)
	})
	if err != nil {
		return 0, mapErr(op, err)
	}
	return v, nil
}
