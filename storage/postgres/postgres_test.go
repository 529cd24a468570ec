package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/storagetest"
)

const dsnEnv = "HYMICAL_TEST_POSTGRES_DSN"

var backend = storagetest.Backend{
	Name:        "postgres",
	NewDatabase: newDatabase,
}

// baseDSN is the server the tests create their databases on. Without one
// the tests skip, except in CI, where a skipped backend would pass silently.
func baseDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		const how = dsnEnv + " is not set: run `eval \"$(.ci/postgres.sh)\"` to start a throwaway server, " +
			"or set it to a superuser DSN such as postgres://user@127.0.0.1:5432/postgres?sslmode=disable"
		if os.Getenv("CI") == "true" {
			t.Fatal(how + " (CI=true: the PostgreSQL tests must run in CI)")
		}
		t.Skip(how)
	}
	return dsn
}

// database is one fresh database on the test server, dropped when the test
// ends. A database per test, not a schema, so advisory locks, extensions
// and search_path are as isolated as between two real deployments.
type database struct {
	dsn  string
	pool *pgxpool.Pool // for Exec and QueryInt, apart from any Store
}

func newDatabase(t *testing.T) storagetest.Database {
	t.Helper()
	base := baseDSN(t)
	ctx := context.Background()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "hymical_test_" + hex.EncodeToString(b[:])

	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to %s to create a test database: %v", dsnEnv, err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	admin.Close(ctx)
	if err != nil {
		t.Fatalf("create test database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		admin, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("connect to drop test database %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})

	dsn, err := withDatabase(base, name)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("open pool on test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return &database{dsn: dsn, pool: pool}
}

// withDatabase points dsn, URL or keyword/value, at database name.
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil
}

func (d *database) Open(t *testing.T) storage.Store {
	t.Helper()
	return d.openStore(t)
}

func (d *database) openStore(t *testing.T) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), d.dsn)
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

func (d *database) TimeLiteral(t time.Time) string {
	return t.UTC().Format("'2006-01-02 15:04:05.000000+00'")
}

func (d *database) BlobLiteral(b []byte) string {
	return `'\x` + hex.EncodeToString(b) + `'::bytea`
}

func TestConformance(t *testing.T) { storagetest.Run(t, backend) }
