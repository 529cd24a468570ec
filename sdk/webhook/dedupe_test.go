package webhook_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/sdk/webhook/dedupetest"
)

// The SQLDeduper's tests against real SQLite and PostgreSQL are in the server
// module, harness/sdkdrivers: this module carries no database driver.

const subID = "sub_48984534f33749c49a88de2d59400dce"

func TestDeduperRules(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		dedupetest.Run(t, func(t *testing.T) (webhook.Deduper, webhook.Deduper) {
			d, err := webhook.NewMemoryDeduper(webhook.MemoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return d, d
		})
	})
}

func TestMemoryDeduperBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	mustProcess := func(t *testing.T, d webhook.Deduper, id string, wantDup bool) {
		t.Helper()
		dup, err := d.Process(ctx, id, ok)
		if err != nil || dup != wantDup {
			t.Fatalf("Process(%s) = %v, %v; want duplicate %v", id, dup, err, wantDup)
		}
	}

	t.Run("beyond MaxIDs the oldest id is forgotten first", func(t *testing.T) {
		t.Parallel()
		d, err := webhook.NewMemoryDeduper(webhook.MemoryOptions{MaxIDs: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"a", "b", "c", "d"} {
			mustProcess(t, d, id, false)
		}
		if d.Len() != 3 {
			t.Fatalf("Len = %d, want 3", d.Len())
		}
		mustProcess(t, d, "d", true)
		mustProcess(t, d, "c", true)
		mustProcess(t, d, "b", true)
		mustProcess(t, d, "a", false) // forgotten, so processed again; "b" goes now
		mustProcess(t, d, "b", false)
	})

	t.Run("an id is forgotten once its TTL has passed", func(t *testing.T) {
		t.Parallel()
		now := time.Unix(1_800_000_000, 0)
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		d, err := webhook.NewMemoryDeduper(webhook.MemoryOptions{TTL: time.Hour, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		mustProcess(t, d, "old", false)
		advance(30 * time.Minute)
		mustProcess(t, d, "young", false)
		advance(29 * time.Minute)
		mustProcess(t, d, "old", true)
		advance(time.Minute)
		if d.Len() != 1 {
			t.Fatalf("Len after the first TTL = %d, want 1", d.Len())
		}
		mustProcess(t, d, "young", true)
		mustProcess(t, d, "old", false)
	})

	t.Run("bad options are refused", func(t *testing.T) {
		t.Parallel()
		for _, o := range []webhook.MemoryOptions{{MaxIDs: -1}, {TTL: -time.Second}} {
			if _, err := webhook.NewMemoryDeduper(o); err == nil {
				t.Errorf("NewMemoryDeduper(%+v) accepted", o)
			}
		}
	})
}

// refusingConnector is a database that cannot be reached.
type refusingConnector struct{}

func (refusingConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("this test has no database")
}

func (c refusingConnector) Driver() driver.Driver { return c }

func (refusingConnector) Open(string) (driver.Conn, error) {
	return nil, errors.New("this test has no database")
}

func TestNewSQLDeduperRefuses(t *testing.T) {
	t.Parallel()
	// NewSQLDeduper does not touch the database, so its checks need no
	// driver: a database that refuses every connection is enough.
	db := sql.OpenDB(refusingConnector{})
	defer db.Close()
	cases := []struct {
		name string
		db   *sql.DB
		opts webhook.SQLOptions
		says string
	}{
		{"no db", nil, webhook.SQLOptions{Dialect: webhook.DialectSQLite}, "db is nil"},
		{"no dialect", db, webhook.SQLOptions{}, "dialect"},
		{"unknown dialect", db, webhook.SQLOptions{Dialect: 99}, "Dialect(99)"},
		{"table with a quote", db, webhook.SQLOptions{Dialect: webhook.DialectSQLite, Table: `t"; DROP TABLE x; --`}, "not a plain identifier"},
		{"table with a space", db, webhook.SQLOptions{Dialect: webhook.DialectPostgres, Table: "my table"}, "not a plain identifier"},
		{"three-part name", db, webhook.SQLOptions{Dialect: webhook.DialectPostgres, Table: "a.b.c"}, "not a plain identifier"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := webhook.NewSQLDeduper(tc.db, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("NewSQLDeduper = %v, want an error saying %q", err, tc.says)
			}
		})
	}
	if _, err := webhook.NewSQLDeduper(db, webhook.SQLOptions{Dialect: webhook.DialectPostgres, Table: "receiver.processed_ids"}); err != nil {
		t.Fatalf("a schema-qualified table was refused: %v", err)
	}
}
