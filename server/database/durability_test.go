package database

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// The check reports exactly the settings the PostgreSQL server really runs
// with that lose acknowledged writes, read apart from the store, and never
// synchronous_commit, which the store raises for its own sessions however
// the database was set. On the CI cluster (fsync and full_page_writes off
// for speed) that is two warnings; on a durable one, none.
func TestCheckDurabilityReportsWhatPostgreSQLRunsWith(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The way an operator (or a tuning guide) turns it off for one
	// database; the store's connections must not inherit it.
	if _, err := conn.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = off', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, name := range []string{"fsync", "full_page_writes"} {
		var v string
		if err := conn.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v == "off" {
			want = append(want, name)
		}
	}
	t.Logf("the test cluster runs with %v off", want)

	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	risks, err := CheckDurability(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range risks {
		got = append(got, r.Setting)
		msg := r.Message()
		fix := fmt.Sprintf("ALTER SYSTEM SET %s = on; SELECT pg_reload_conf();", r.Setting)
		if !strings.Contains(msg, r.Setting+" is off") || !strings.Contains(msg, "accepted submissions") || !strings.Contains(msg, fix) {
			t.Errorf("warning %q: want it to name the setting, what can be lost, and the fix %q", msg, fix)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("CheckDurability reported %v, want %v (what SHOW says is off; never synchronous_commit, which the store raises)", got, want)
	}
}

// SQLite has no server settings: the check has nothing to report.
func TestCheckDurabilityHasNothingToSayOfSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if risks, err := CheckDurability(ctx, s); err != nil || len(risks) != 0 {
		t.Errorf("CheckDurability on SQLite = %v, %v; want nothing", risks, err)
	}
}
