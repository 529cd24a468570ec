package sdkdrivers_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/sdk/webhook/dedupetest"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// backend opens a fresh database of one kind and returns it with its
// dialect. open may be called again for a second, independent pool on the
// same database, which is what a second receiver process would have.
type backend struct {
	dialect webhook.Dialect
	// fresh makes a new database and returns a way to open pools on it.
	fresh func(t *testing.T) (open func(t *testing.T) *sql.DB)
}

// sqliteDSN is how a receiver should open its SQLite file: a busy timeout
// so that a second process waits for the write lock instead of failing,
// and immediate transactions so the lock is taken at BEGIN.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
}

var backends = map[string]backend{
	"sqlite": {
		dialect: webhook.DialectSQLite,
		fresh: func(t *testing.T) func(t *testing.T) *sql.DB {
			path := filepath.Join(t.TempDir(), "receiver.db")
			return func(t *testing.T) *sql.DB { return openDB(t, "sqlite", sqliteDSN(path)) }
		},
	},
	"postgres": {
		dialect: webhook.DialectPostgres,
		fresh: func(t *testing.T) func(t *testing.T) *sql.DB {
			dsn := pgtest.NewDatabase(t)
			return func(t *testing.T) *sql.DB { return openDB(t, "pgx", dsn) }
		},
	},
}

func openDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("sql.Open(%s): %v", driver, err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatalf("ping %s: %v", driver, err)
	}
	return db
}

func newSQLDeduper(t *testing.T, db *sql.DB, dialect webhook.Dialect, opts webhook.SQLOptions) *webhook.SQLDeduper {
	t.Helper()
	opts.Dialect = dialect
	d, err := webhook.NewSQLDeduper(db, opts)
	if err != nil {
		t.Fatalf("NewSQLDeduper: %v", err)
	}
	if err := d.CreateTable(t.Context()); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	return d
}

const subID = "sub_48984534f33749c49a88de2d59400dce"

// TestDeduperRules runs the rules every Deduper keeps on the SQLDeduper; the
// SDK runs them on its MemoryDeduper. other is a deduper on an independent
// connection pool to the same database.
func TestDeduperRules(t *testing.T) {
	t.Parallel()
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dedupetest.Run(t, func(t *testing.T) (webhook.Deduper, webhook.Deduper) {
				open := b.fresh(t)
				d := newSQLDeduper(t, open(t), b.dialect, webhook.SQLOptions{})
				other, err := webhook.NewSQLDeduper(open(t), webhook.SQLOptions{Dialect: b.dialect})
				if err != nil {
					t.Fatal(err)
				}
				return d, other
			})
		})
	}
}

func TestSQLDeduper(t *testing.T) {
	t.Parallel()
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runSQLDeduper(t, b)
		})
	}
}

// sideTable is where the tests' handlers do their work, in the deduper's
// database, to show what commits with the id and what is rolled back.
const sideTable = "received_submissions"

func createSideTable(t *testing.T, db *sql.DB) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE `+sideTable+` (id TEXT NOT NULL, note TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, db *sql.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func runSQLDeduper(t *testing.T, b backend) {
	ctx := context.Background()
	placeholder := "?"
	if b.dialect == webhook.DialectPostgres {
		placeholder = "$1"
	}
	insertSide := `INSERT INTO ` + sideTable + ` (id, note) VALUES (` + placeholder + `, 'done')`

	t.Run("work through the transaction commits with the id, exactly once under concurrency", func(t *testing.T) {
		t.Parallel()
		open := b.fresh(t)
		db := open(t)
		createSideTable(t, db)
		d1 := newSQLDeduper(t, db, b.dialect, webhook.SQLOptions{})
		d2 := newSQLDeduper(t, open(t), b.dialect, webhook.SQLOptions{})
		var wg sync.WaitGroup
		var dups atomic.Int32
		const n = 30
		for i := range n {
			d := d1
			if i%2 == 1 {
				d = d2
			}
			wg.Go(func() {
				dup, err := d.ProcessTx(ctx, subID, func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, insertSide, subID)
					return err
				})
				if err != nil {
					t.Errorf("ProcessTx: %v", err)
				}
				if dup {
					dups.Add(1)
				}
			})
		}
		wg.Wait()
		if got := count(t, db, `SELECT count(*) FROM `+sideTable); got != 1 {
			t.Fatalf("the work's row was written %d times, want 1", got)
		}
		if dups.Load() != n-1 {
			t.Fatalf("%d duplicates, want %d", dups.Load(), n-1)
		}
	})

	t.Run("a failing handler rolls back its writes and the id together", func(t *testing.T) {
		t.Parallel()
		db := b.fresh(t)(t)
		createSideTable(t, db)
		d := newSQLDeduper(t, db, b.dialect, webhook.SQLOptions{})
		boom := errors.New("validation failed after the insert")
		dup, err := d.ProcessTx(ctx, subID, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, insertSide, subID); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) || dup {
			t.Fatalf("ProcessTx = %v, %v; want the handler's error", dup, err)
		}
		if got := count(t, db, `SELECT count(*) FROM `+sideTable); got != 0 {
			t.Fatalf("a failed handler's write survived: %d rows", got)
		}
		if got := count(t, db, `SELECT count(*) FROM `+d.Table()); got != 0 {
			t.Fatalf("a failed handler's id was recorded: %d rows", got)
		}
	})

	t.Run("a cancelled context rolls back the id", func(t *testing.T) {
		t.Parallel()
		db := b.fresh(t)(t)
		d := newSQLDeduper(t, db, b.dialect, webhook.SQLOptions{})
		cctx, cancel := context.WithCancel(ctx)
		_, err := d.Process(cctx, subID, func(context.Context) error {
			cancel() // the sender hung up while the work ran
			return nil
		})
		if err == nil {
			t.Fatal("Process after its context ended reported success")
		}
		if got := count(t, db, `SELECT count(*) FROM `+d.Table()); got != 0 {
			t.Fatalf("the id was recorded although the commit could not happen: %d rows", got)
		}
	})

	t.Run("recorded ids survive reopening the database", func(t *testing.T) {
		t.Parallel()
		open := b.fresh(t)
		db := open(t)
		d := newSQLDeduper(t, db, b.dialect, webhook.SQLOptions{})
		if dup, err := d.Process(ctx, subID, func(context.Context) error { return nil }); err != nil || dup {
			t.Fatalf("first delivery: %v, %v", dup, err)
		}
		db.Close()
		again := newSQLDeduper(t, open(t), b.dialect, webhook.SQLOptions{})
		if dup, err := again.Process(ctx, subID, func(context.Context) error { return nil }); err != nil || !dup {
			t.Fatalf("delivery after reopening: %v, %v; want a duplicate", dup, err)
		}
	})

	t.Run("CreateTable is idempotent and a custom table is used", func(t *testing.T) {
		t.Parallel()
		db := b.fresh(t)(t)
		d := newSQLDeduper(t, db, b.dialect, webhook.SQLOptions{Table: "my_hooks"})
		if err := d.CreateTable(ctx); err != nil {
			t.Fatalf("second CreateTable: %v", err)
		}
		if _, err := d.Process(ctx, subID, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if got := count(t, db, `SELECT count(*) FROM my_hooks`); got != 1 {
			t.Fatalf("my_hooks holds %d rows, want 1", got)
		}
	})

	t.Run("Prune forgets ids recorded before the cutoff", func(t *testing.T) {
		t.Parallel()
		db := b.fresh(t)(t)
		now := time.Unix(1_800_000_000, 0)
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		d := newSQLDeduper(t, db, b.dialect, webhook.SQLOptions{Now: clock})
		for i, id := range []string{"sub_old1", "sub_old2", "sub_new"} {
			if i == 2 {
				mu.Lock()
				now = now.Add(48 * time.Hour)
				mu.Unlock()
			}
			if _, err := d.Process(ctx, id, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		n, err := d.Prune(ctx, now.Add(-24*time.Hour))
		if err != nil || n != 2 {
			t.Fatalf("Prune = %d, %v; want 2", n, err)
		}
		for id, wantDup := range map[string]bool{"sub_old1": false, "sub_new": true} {
			if dup, err := d.Process(ctx, id, func(context.Context) error { return nil }); err != nil || dup != wantDup {
				t.Errorf("after Prune, %s: duplicate %v, %v; want %v", id, dup, err, wantDup)
			}
		}
	})

	t.Run("without CreateTable the error names the table", func(t *testing.T) {
		t.Parallel()
		db := b.fresh(t)(t)
		d, err := webhook.NewSQLDeduper(db, webhook.SQLOptions{Dialect: b.dialect, Table: "not_created"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Process(ctx, subID, func(context.Context) error { t.Error("work ran"); return nil })
		if err == nil || !strings.Contains(err.Error(), "not_created") {
			t.Fatalf("Process without the table = %v, want an error naming it", err)
		}
	})
}
