// Package pgtest gives tests a fresh PostgreSQL database of their own on the
// server named by HYMICAL_TEST_POSTGRES_DSN, and drops it when the test ends.
// Without that variable the test skips, saying how to set it, except under
// CI=true, where a silently skipped backend would pass what was never run.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// DSNEnv names the variable holding a superuser DSN of the test server.
const DSNEnv = "HYMICAL_TEST_POSTGRES_DSN"

// BaseDSN is the server tests create their databases on.
func BaseDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(DSNEnv)
	if dsn == "" {
		const how = DSNEnv + " is not set: run `eval \"$(.ci/postgres.sh)\"` to start a throwaway server, " +
			"or set it to a superuser DSN such as postgres://user@127.0.0.1:5432/postgres?sslmode=disable"
		if os.Getenv("CI") == "true" {
			t.Fatal(how + " (CI=true: the PostgreSQL tests must run in CI)")
		}
		t.Skip(how)
	}
	// harness/testrun counts the tests that ran against a real server.
	t.Log("hymical-test-uses: postgres")
	return dsn
}

// NewDatabase creates a fresh, empty database and returns its DSN. A
// database per test, not a schema, so advisory locks and search_path are as
// isolated as between two real deployments.
func NewDatabase(t testing.TB) string {
	t.Helper()
	base := BaseDSN(t)
	ctx := context.Background()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "hymical_test_" + hex.EncodeToString(b[:])

	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to %s to create a test database: %v", DSNEnv, err)
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
	return dsn
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
