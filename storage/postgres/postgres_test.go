package postgres_test

import (
	"context"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
	"github.com/hymical/hymical/storage/storagetest"
)

var backend = storagetest.Backend{
	Name:                "postgres",
	NewDatabase:         newDatabase,
	WakeupsAcrossStores: true,
	HoldCommits:         holdCommits,
	OpenAway: func(t *testing.T, db storagetest.Database) (storage.Store, func()) {
		return openAway(t, db.(*database))
	},
}

type database struct {
	dsn  string
	pool *pgxpool.Pool // for Exec and QueryInt, apart from any Store
}

func newDatabase(t *testing.T) storagetest.Database {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("open pool on test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return &database{dsn: dsn, pool: pool}
}

func (d *database) Open(t *testing.T, opts ...storage.OpenOption) storage.Store {
	t.Helper()
	return d.openStore(t, opts...)
}

func (d *database) openStore(t *testing.T, opts ...storage.OpenOption) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), d.dsn, opts...)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func (d *database) Exec(ctx context.Context, sql string) error {
	// No arguments: pgx uses the simple protocol, which takes several
	// statements at once.
	_, err := d.pool.Exec(ctx, sql)
	return err
}

func (d *database) QueryInt(ctx context.Context, sql string) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, sql).Scan(&n)
	return n, err
}

func (d *database) QueryString(ctx context.Context, sql string) (string, error) {
	var s string
	err := d.pool.QueryRow(ctx, sql).Scan(&s)
	return s, err
}

func (d *database) TimeLiteral(t time.Time) string {
	return t.UTC().Format("'2006-01-02 15:04:05.000000+00'")
}

func (d *database) BlobLiteral(b []byte) string {
	return `'\x` + hex.EncodeToString(b) + `'::bytea`
}

// HoldKeyWrites locks webhook_idempotency_keys against writes, not reads,
// in a transaction of its own.
func (d *database) HoldKeyWrites(t *testing.T) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE webhook_idempotency_keys IN EXCLUSIVE MODE`); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatalf("lock the idempotency keys: %v", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := tx.Rollback(ctx); err != nil {
				t.Errorf("let the idempotency keys go: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

func TestConformance(t *testing.T) { storagetest.Run(t, backend) }
