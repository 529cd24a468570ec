package webhook_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/hymical/hymical/sdk/webhook"
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

// dedupers are the constructors the shared rules run against. Each call
// returns a fresh, empty deduper and, for the SQL ones, a second deduper on
// an independent connection pool to the same database.
func dedupers() map[string]func(t *testing.T) (d, other webhook.Deduper) {
	m := map[string]func(t *testing.T) (webhook.Deduper, webhook.Deduper){
		"memory": func(t *testing.T) (webhook.Deduper, webhook.Deduper) {
			d, err := webhook.NewMemoryDeduper(webhook.MemoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return d, d
		},
	}
	for name, b := range backends {
		m[name] = func(t *testing.T) (webhook.Deduper, webhook.Deduper) {
			open := b.fresh(t)
			d := newSQLDeduper(t, open(t), b.dialect, webhook.SQLOptions{})
			other, err := webhook.NewSQLDeduper(open(t), webhook.SQLOptions{Dialect: b.dialect})
			if err != nil {
				t.Fatal(err)
			}
			return d, other
		}
	}
	return m
}

const subID = "sub_48984534f33749c49a88de2d59400dce"

func TestDeduperRules(t *testing.T) {
	t.Parallel()
	for name, newDeduper := range dedupers() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runDeduperRules(t, newDeduper)
		})
	}
}

func runDeduperRules(t *testing.T, newDeduper func(t *testing.T) (webhook.Deduper, webhook.Deduper)) {
	ctx := context.Background()

	t.Run("the first delivery runs the work and a repeat does not", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		runs := 0
		work := func(context.Context) error { runs++; return nil }
		for i, wantDup := range []bool{false, true, true} {
			dup, err := d.Process(ctx, subID, work)
			if err != nil {
				t.Fatalf("delivery %d: %v", i+1, err)
			}
			if dup != wantDup {
				t.Fatalf("delivery %d: duplicate = %v, want %v", i+1, dup, wantDup)
			}
		}
		if runs != 1 {
			t.Fatalf("work ran %d times, want 1", runs)
		}
	})

	t.Run("ids are independent", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		for _, id := range []string{"sub_a", "sub_b", "sub_A"} {
			dup, err := d.Process(ctx, id, func(context.Context) error { return nil })
			if err != nil || dup {
				t.Fatalf("Process(%s) = %v, %v; want a first delivery", id, dup, err)
			}
		}
	})

	t.Run("a failing handler leaves the id unrecorded and the redelivery runs it", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		boom := errors.New("the CRM is down")
		dup, err := d.Process(ctx, subID, func(context.Context) error { return fmt.Errorf("saving: %w", boom) })
		if !errors.Is(err, boom) || dup {
			t.Fatalf("Process = %v, %v; want the handler's error, not a duplicate", dup, err)
		}
		ran := false
		dup, err = d.Process(ctx, subID, func(context.Context) error { ran = true; return nil })
		if err != nil || dup || !ran {
			t.Fatalf("redelivery: duplicate %v, err %v, ran %v; want the work to run", dup, err, ran)
		}
		if dup, err := d.Process(ctx, subID, func(context.Context) error { t.Error("ran a third time"); return nil }); !dup || err != nil {
			t.Fatalf("third delivery = %v, %v; want a duplicate", dup, err)
		}
	})

	t.Run("a panicking handler leaves the id unrecorded", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic did not propagate")
				}
			}()
			_, _ = d.Process(ctx, subID, func(context.Context) error { panic("handler bug") })
		}()
		done := make(chan struct{})
		go func() {
			defer close(done)
			dup, err := d.Process(ctx, subID, func(context.Context) error { return nil })
			if err != nil || dup {
				t.Errorf("after a panic: %v, %v; want the work to run", dup, err)
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a delivery after a panicking one is stuck")
		}
	})

	t.Run("many concurrent deliveries of one id run the work exactly once", func(t *testing.T) {
		t.Parallel()
		d, other := newDeduper(t)
		const n = 40
		var runs, dups atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			dd := d
			if i%2 == 1 {
				dd = other // a second receiver process on the same database
			}
			wg.Go(func() {
				<-start
				dup, err := dd.Process(ctx, subID, func(context.Context) error {
					runs.Add(1)
					time.Sleep(20 * time.Millisecond) // hold the id while others arrive
					return nil
				})
				if err != nil {
					t.Errorf("Process: %v", err)
				}
				if dup {
					dups.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if runs.Load() != 1 || dups.Load() != n-1 {
			t.Fatalf("work ran %d times with %d duplicates, want 1 and %d", runs.Load(), dups.Load(), n-1)
		}
	})

	t.Run("when the first of concurrent deliveries fails, exactly one other runs the work", func(t *testing.T) {
		t.Parallel()
		d, other := newDeduper(t)
		const n = 20
		var calls, successes, dups atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			dd := d
			if i%2 == 1 {
				dd = other
			}
			wg.Go(func() {
				<-start
				dup, err := dd.Process(ctx, subID, func(context.Context) error {
					if calls.Add(1) == 1 {
						time.Sleep(20 * time.Millisecond)
						return errors.New("first attempt fails")
					}
					successes.Add(1)
					return nil
				})
				if dup {
					dups.Add(1)
				}
				_ = err // one call fails on purpose
			})
		}
		close(start)
		wg.Wait()
		if calls.Load() != 2 || successes.Load() != 1 || dups.Load() != n-2 {
			t.Fatalf("calls %d, successes %d, duplicates %d; want 2, 1, %d", calls.Load(), successes.Load(), dups.Load(), n-2)
		}
	})

	t.Run("a delivery waiting on one in progress gives up with its context", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		holding, release := make(chan struct{}), make(chan struct{})
		firstDone := make(chan error, 1)
		go func() {
			_, err := d.Process(ctx, subID, func(context.Context) error {
				close(holding)
				<-release
				return nil
			})
			firstDone <- err
		}()
		<-holding
		waitCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := d.Process(waitCtx, subID, func(context.Context) error {
			t.Error("the waiting delivery ran the work while the first held the id")
			return nil
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("waiting delivery = %v, want context.DeadlineExceeded", err)
		}
		close(release)
		if err := <-firstDone; err != nil {
			t.Fatalf("first delivery: %v", err)
		}
	})

	t.Run("an unusable id is refused before any work", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		for _, id := range []string{"", strings.Repeat("x", webhook.MaxIDBytes+1)} {
			_, err := d.Process(ctx, id, func(context.Context) error { t.Error("work ran"); return nil })
			if !errors.Is(err, webhook.ErrInvalidID) {
				t.Errorf("Process(%d bytes) = %v, want ErrInvalidID", len(id), err)
			}
		}
		if dup, err := d.Process(ctx, strings.Repeat("x", webhook.MaxIDBytes), func(context.Context) error { return nil }); err != nil || dup {
			t.Errorf("an id of exactly %d bytes: %v, %v", webhook.MaxIDBytes, dup, err)
		}
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

func TestNewSQLDeduperRefuses(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(t.TempDir(), "x.db")))
	if err != nil {
		t.Fatal(err)
	}
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
