package postgres_test

import (
	"context"
	"testing"
	"time"
)

// listenerPID is the backend pid of the one wake-up listener on the
// database, waiting for it to be connected; 0 if none came within 20 s.
func listenerPID(t *testing.T, db *database, not int32) int32 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var pid int32
		err := db.pool.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'hymical wakeups'
			AND query ILIKE 'LISTEN%'`).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		if pid != 0 && pid != not {
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0
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
	if pid == 0 {
		t.Fatal("no listener connection after Wakeups")
	}
	var ok bool
	if err := db.pool.QueryRow(t.Context(), `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate the listener %d: %v, %v", pid, ok, err)
	}
	if !wokenWithin(wake, 20*time.Second) {
		t.Fatal("no wake-up after the listener came back: what was missed while it was away waits for the poll")
	}
	back := listenerPID(t, db, pid)
	if back == 0 {
		t.Fatal("the listener did not come back")
	}
	if wokenWithin(wake, 0) {
		t.Fatal("woken twice for one reconnect")
	}
	seedEvents(t, a, 1, time.Time{})
	if !wokenWithin(wake, 20*time.Second) {
		t.Fatal("after the reconnect, a submission through another store did not wake this one")
	}
}
