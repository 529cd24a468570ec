package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/storagetest"
)

func waitEventBatches(t *testing.T, s *postgres.Store, batches, waiting int) {
	t.Helper()
	storagetest.WaitForBatches(t, func() (int, int) { return postgres.EventBatches(s) }, batches, waiting)
}

// lockEndpoints locks the endpoints table in a transaction of its own,
// until the transaction ends, so that a create's transaction waits when it
// reads the endpoints.
func lockEndpoints(t *testing.T, db *database) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	lock, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback(ctx) })
	if _, err := lock.Exec(ctx, `LOCK TABLE webhook_endpoints IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	return lock
}

// Creates that queue behind a batch are written together, in one
// transaction, and each is still answered on its own terms: one addressed
// to no endpoint fails alone, and of two sharing a key or an id within the
// batch the second meets the first as it would one transaction later.
func TestCreatesQueuedTogetherShareOneTransaction(t *testing.T) {
	db, s := migrated(t)
	seedEndpoint(t, s)
	ctx := context.Background()

	// The first create's transaction waits on this lock when it reads the
	// endpoints; the others queue meanwhile.
	lock := lockEndpoints(t, db)

	const n = 12
	events := make([]storage.Event, n)
	for i := range events {
		events[i] = storage.Event{Type: "submission.received", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	events[3].EndpointID = "ep_missing"
	events[5].IdempotencyKey, events[8].IdempotencyKey = "shared-key", "shared-key"
	events[6].ID, events[9].ID = "evt_shared_id", "evt_shared_id"
	results := make([]storage.EventCreateResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { results[0], errs[0] = s.EventCreate(ctx, events[0]) })
	waitEventBatches(t, s, 1, 0)
	for i := 1; i < n; i++ {
		// In order, so the batch's order is the events' order.
		wg.Go(func() { results[i], errs[i] = s.EventCreate(ctx, events[i]) })
		waitEventBatches(t, s, 1, i)
	}
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	if b, _ := postgres.EventBatches(s); b != 2 {
		t.Fatalf("%d creates were written in %d batches, want 2: the first alone, the rest together", n, b)
	}
	for i := range n {
		switch i {
		case 3:
			if !errors.Is(errs[i], storage.ErrInvalid) {
				t.Fatalf("create addressed to no endpoint: %v, want ErrInvalid", errs[i])
			}
		case 9:
			if !errors.Is(errs[i], storage.ErrConflict) {
				t.Fatalf("create reusing an id taken earlier in its batch: %v, want ErrConflict", errs[i])
			}
		case 8:
			if errs[i] != nil || !results[i].Duplicate || results[i].Event.ID != results[5].Event.ID || len(results[i].Deliveries) != 1 {
				t.Fatalf("create repeating a key used earlier in its batch = %+v, %v; want the first event, duplicate", results[i], errs[i])
			}
		default:
			if errs[i] != nil {
				t.Fatalf("create %d: %v", i, errs[i])
			}
			if results[i].Duplicate || string(results[i].Event.Payload) != string(events[i].Payload) || len(results[i].Deliveries) != 1 {
				t.Fatalf("create %d = %+v, want its own event with one delivery", i, results[i])
			}
			if d := results[i].Deliveries[0]; d.EventID != results[i].Event.ID || !d.NextAttemptAt.Equal(results[i].Event.CreatedAt) {
				t.Fatalf("create %d: delivery %+v does not belong to event %s or is not due at its creation %s", i, d, results[i].Event.ID, results[i].Event.CreatedAt)
			}
		}
	}
	for q, want := range map[string]int64{
		`SELECT count(*) FROM webhook_events`:     n - 3, // not 3, 8 and 9
		`SELECT count(*) FROM webhook_deliveries`: n - 3,
	} {
		if got, err := db.QueryInt(ctx, q); err != nil || got != want {
			t.Fatalf("%s = %d, %v; want %d", q, got, err, want)
		}
	}
}

// A create whose transaction cannot go on (here a table lock held
// elsewhere; in life a database that stopped answering) returns when its
// caller gives up, instead of holding its batch until the database answers.
func TestACreateStuckInTheDatabaseReturnsWhenItsCallerGivesUp(t *testing.T) {
	db, s := migrated(t)
	seedEndpoint(t, s)
	ctx := context.Background()
	lock := lockEndpoints(t, db)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.EventCreate(cctx, storage.Event{Type: "t", Payload: []byte(`{}`)})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the create succeeded while the table was locked")
		}
		if !errors.Is(err, context.DeadlineExceeded) || strings.Count(err.Error(), "event create") != 1 {
			t.Fatalf("error %q: want the caller's deadline, said once where it came from", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the create still waits 10 s after its caller gave up")
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM webhook_events`); err != nil || n != 0 {
		t.Fatalf("events = %d, %v; want none", n, err)
	}
	// The store goes on.
	if _, err := s.EventCreate(ctx, storage.Event{Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("create after: %v", err)
	}
}
