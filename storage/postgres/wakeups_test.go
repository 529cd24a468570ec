package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/storagetest"
)

// listenerPID is the backend pid of the one wake-up listener on the
// database, other than not, waiting up to 20 s for it to be connected.
func listenerPID(t *testing.T, db *database, not int32) int32 {
	t.Helper()
	var pid int32
	testwait.For(t, 20*time.Second, func() error {
		err := db.pool.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'hymical wakeups'
			AND query ILIKE 'LISTEN%'`).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		switch pid {
		case 0:
			return errors.New("no wake-up listener is connected")
		case not:
			return fmt.Errorf("the wake-up listener is still backend %d", not)
		}
		return nil
	})
	return pid
}

func wokenWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// TestTheListenerComesBackAndWakesOnce: the wake-up listener's connection
// is killed; the Store reconnects, wakes its claimers once for whatever
// was missed meanwhile, and hears the other Stores' writes again.
func TestTheListenerComesBackAndWakesOnce(t *testing.T) {
	t.Parallel()
	db, a := migrated(t)
	b := db.openStore(t)
	seedEndpoint(t, a)
	wake := b.Wakeups(t.Context())
	pid := listenerPID(t, db, 0)
	var ok bool
	if err := db.pool.QueryRow(t.Context(), `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate the listener %d: %v, %v", pid, ok, err)
	}
	if !wokenWithin(wake, 20*time.Second) {
		t.Fatal("no wake-up after the listener came back: what was missed while it was away waits for the poll")
	}
	listenerPID(t, db, pid) // the listener came back
	if wokenWithin(wake, 0) {
		t.Fatal("woken twice for one reconnect")
	}
	seedEvents(t, a, 1, time.Time{})
	if !wokenWithin(wake, 20*time.Second) {
		t.Fatal("after the reconnect, a submission through another store did not wake this one")
	}
}

// holdCommitsKey is the advisory lock the held commits wait for.
const holdCommitsKey = 0x686f6c64

// holdCommits holds every transaction that changes a delivery or an
// endpoint at its commit: a deferred constraint trigger, which runs at
// COMMIT after every statement and before the notifications the
// transaction queued go out, waits for an advisory lock the test holds.
// The test's own connection LISTENs on the wake-up channel and on a
// channel of its own, so Sent can tell, by the order PostgreSQL delivers
// notifications in, whether a wake-up went out before a marker it sends.
func holdCommits(t *testing.T, sdb storagetest.Database) storagetest.CommitHold {
	t.Helper()
	db := sdb.(*database)
	ctx := context.Background()
	if err := db.Exec(ctx, fmt.Sprintf(`
		CREATE FUNCTION hymical_test_hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock_shared(%[1]d); RETURN NULL; END $$;
		CREATE CONSTRAINT TRIGGER hymical_test_hold_commit AFTER INSERT OR UPDATE ON webhook_deliveries
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hymical_test_hold_commit();
		CREATE CONSTRAINT TRIGGER hymical_test_hold_commit AFTER INSERT OR UPDATE ON webhook_endpoints
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hymical_test_hold_commit();`, holdCommitsKey)); err != nil {
		t.Fatalf("install the commit hold: %v", err)
	}
	holder, err := pgx.Connect(ctx, db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, holdCommitsKey); err != nil {
		t.Fatalf("take the commit hold's lock: %v", err)
	}
	listener, err := pgx.Connect(ctx, db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	const marker = "hymical_test_marker"
	if _, err := listener.Exec(ctx, `LISTEN `+postgres.WakeChannel+`; LISTEN `+marker); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, holdCommitsKey); err != nil {
				t.Errorf("let the held commits go: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return storagetest.CommitHold{
		Waiting: func() {
			t.Helper()
			testwait.For(t, 20*time.Second, func() error {
				n, err := db.QueryInt(ctx, fmt.Sprintf(`SELECT count(*) FROM pg_locks
					WHERE locktype = 'advisory' AND objid = %d AND NOT granted`, holdCommitsKey))
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					return errors.New("no write transaction waits at its commit")
				}
				return nil
			})
		},
		Sent: func() bool {
			t.Helper()
			if err := db.Exec(ctx, `NOTIFY `+marker); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			for {
				n, err := listener.WaitForNotification(wctx)
				if err != nil {
					t.Fatalf("wait for the marker notification: %v", err)
				}
				if n.Channel == marker {
					return false
				}
				if n.Channel == postgres.WakeChannel {
					return true
				}
			}
		},
		Release: release,
	}
}
