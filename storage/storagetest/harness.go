// Package storagetest is the one conformance suite for storage.Store. Every
// rule of the delivery state machine is written here once, as a test, and
// each backend's own test runs it against a real database:
//
//	func TestConformance(t *testing.T) { storagetest.Run(t, backend) }
//
// The suite never mocks a database. Concurrency rules are exercised with
// several independent Store values on one database (each with its own
// connections) and many goroutines.
package storagetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/storage"
)

// Backend is what a store package hands the suite.
type Backend struct {
	// Name is used in messages, e.g. "postgres".
	Name string
	// NewDatabase creates a fresh, empty, isolated database that nothing has
	// migrated yet, and arranges for it to be removed when t ends.
	NewDatabase func(t *testing.T) Database
	// NewBenchStore opens a Store on a fresh, empty database that nothing
	// has migrated yet, and arranges for both to be closed and removed when
	// tb ends. Bench uses it, since a benchmark has no *testing.T to hand
	// NewDatabase; nil makes Bench skip.
	NewBenchStore func(tb testing.TB) storage.Store
	// WakeupsAcrossStores says that a write through one Store wakes the
	// claimers of another Store opened on the same database, as a backend
	// that serves several processes must; false, that a Store wakes only
	// its own (SQLite: one process).
	WakeupsAcrossStores bool
	// HoldCommits, for a backend whose wake-ups between Stores go through
	// the database (PostgreSQL's NOTIFY), holds the write transactions on
	// db at their commit, after every statement of theirs ran, so the suite
	// can see that no wake-up goes out before the write it announces is
	// visible. Nil skips that rule.
	HoldCommits func(t *testing.T, db Database) CommitHold
	// OpenAway, for a backend whose database is a server that can stop or
	// become unreachable, opens a Store on db (not migrated) and returns
	// cut, which takes the database away from that Store as a stopped
	// server or a failed network does: its open connections are reset
	// and no new one is accepted, for the rest of the test. Nil skips the
	// rule: SQLite's database is a file on a local disk, and nothing short
	// of a failing disk makes it unreachable for a while.
	OpenAway func(t *testing.T, db Database) (s storage.Store, cut func())
}

// CommitHold is a hold on the commits of the write transactions on a
// database that change a delivery or an endpoint.
type CommitHold struct {
	// Waiting returns once a write transaction waits at its commit.
	Waiting func()
	// Sent reports whether a wake-up went out on the database since the
	// hold began.
	Sent func() bool
	// Release lets the transactions commit, and no later one waits. It
	// runs when t ends if not called.
	Release func()
}

// Database is one isolated database under test.
type Database interface {
	// Open opens a new Store on this database with connections of its own,
	// so two Stores opened here behave like two server processes. It does
	// not migrate. The Store is closed when t ends. opts are handed to the
	// backend's Open (e.g. storage.WithSecretBox).
	Open(t *testing.T, opts ...storage.OpenOption) storage.Store
	// Exec runs raw SQL (several statements allowed, no parameters), used to
	// seed rows into a schema stopped at an old version.
	Exec(ctx context.Context, sql string) error
	// QueryInt runs a query returning one integer, for checks the Store API
	// cannot express (e.g. the raw claim_token of a row).
	QueryInt(ctx context.Context, sql string) (int64, error)
	// QueryString runs a query returning one text value, for reading a
	// column as it is stored (e.g. an endpoint's raw secrets).
	QueryString(ctx context.Context, sql string) (string, error)
	// TimeLiteral writes t as a SQL literal of the backend's time columns.
	TimeLiteral(t time.Time) string
	// BlobLiteral writes b as a SQL literal of the backend's binary columns
	// (the event payload).
	BlobLiteral(b []byte) string
	// HoldKeyWrites takes, on a connection of its own, the lock a keyed
	// operation (one given an Idempotency) must wait for before it writes its
	// idempotency key, as another process's write in flight holds it:
	// SQLite's one write lock, PostgreSQL's lock on
	// webhook_idempotency_keys against writes. It returns once the lock is
	// held; release lets it go, and runs when t ends if not called.
	HoldKeyWrites(t *testing.T) (release func())
}

// newStore returns a fully migrated Store on a fresh database.
func newStore(t *testing.T, b Backend) (storage.Store, Database) {
	t.Helper()
	db := b.NewDatabase(t)
	s := db.Open(t)
	if _, err := s.Migrate(context.Background(), storage.MigrateParams{}); err != nil {
		t.Fatalf("%s: migrate fresh database: %v", b.Name, err)
	}
	return s, db
}

// WaitForBatches waits until stats, a store's count of the batches of
// creates it has taken and of the creates waiting for one, reports batches
// and waiting, so a store's own test can line creates up behind a batch.
func WaitForBatches(t *testing.T, stats func() (batches, waiting int), batches, waiting int) {
	t.Helper()
	testwait.For(t, 10*time.Second, func() error {
		if b, w := stats(); b != batches || w != waiting {
			return fmt.Errorf("took %d batches of creates with %d waiting, want %d and %d", b, w, batches, waiting)
		}
		return nil
	})
}
