package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/storagetest"
)

// holdWriter starts a write transaction that lasts until the returned
// function is called, so that creates queue behind it.
func holdWriter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	held, done := make(chan struct{}), make(chan struct{})
	unblock := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.write(context.Background(), "hold the writer", func(*sql.Tx) error {
			close(held)
			<-unblock
			return nil
		})
	}()
	<-held
	var once sync.Once
	release = func() { once.Do(func() { close(unblock); <-done }) }
	t.Cleanup(release)
	return release
}

// waitQueue waits until s has taken batches batches of creates and has
// waiting creates waiting.
func waitQueue(t *testing.T, s *Store, batches, waiting int) {
	t.Helper()
	storagetest.WaitForBatches(t, s.events.Stats, batches, waiting)
}

func TestCreatesQueuedTogetherShareOneTransaction(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: testEndpoint()}); err != nil {
		t.Fatal(err)
	}
	release := holdWriter(t, s)

	// The first create takes a batch of its own and waits for the writer;
	// the rest queue behind it.
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	create := func(i int) {
		ev := storage.Event{Type: "t", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		if i == 7 {
			ev.EndpointID = "ep_missing" // fails inside the shared transaction
		}
		_, errs[i] = s.EventCreate(ctx, ev)
	}
	wg.Go(func() { create(0) })
	waitQueue(t, s, 1, 0)
	for i := 1; i < n; i++ {
		wg.Go(func() { create(i) })
	}
	waitQueue(t, s, 1, n-1)
	release()
	wg.Wait()

	for i, err := range errs {
		if i == 7 {
			if !errors.Is(err, storage.ErrInvalid) {
				t.Fatalf("create addressed to a missing endpoint: %v, want ErrInvalid", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if batches, _ := s.events.Stats(); batches != 2 {
		t.Fatalf("%d creates were written in %d batches, want 2: the first alone, the %d queued behind it together", n, batches, n-1)
	}
	var events, deliveries int
	if err := s.reader.QueryRow(`SELECT (SELECT count(*) FROM webhook_events), (SELECT count(*) FROM webhook_deliveries)`).Scan(&events, &deliveries); err != nil {
		t.Fatal(err)
	}
	if events != n-1 || deliveries != n-1 {
		t.Fatalf("stored %d events and %d deliveries, want %d of each: the failed create alone rolled back", events, deliveries, n-1)
	}
}

func TestACreateGivenUpWhileQueuedIsNotWritten(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	release := holdWriter(t, s)

	var first, second error
	var wg sync.WaitGroup
	wg.Go(func() { _, first = s.EventCreate(ctx, storage.Event{Type: "t", Payload: []byte(`{"first":true}`)}) })
	waitQueue(t, s, 1, 0)
	cctx, cancel := context.WithCancel(ctx)
	secondDone := make(chan struct{})
	go func() {
		defer close(secondDone)
		_, second = s.EventCreate(cctx, storage.Event{Type: "t", Payload: []byte(`{"second":true}`)})
	}()
	waitQueue(t, s, 1, 1)
	cancel()
	// It answers while the writer is still held: it left the queue.
	<-secondDone
	waitQueue(t, s, 1, 0)
	release()
	wg.Wait()
	if first != nil {
		t.Fatalf("first create: %v", first)
	}
	if !errors.Is(second, context.Canceled) {
		t.Fatalf("create given up while queued: %v, want context.Canceled", second)
	}
	var events int
	if err := s.reader.QueryRow(`SELECT count(*) FROM webhook_events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 1 {
		t.Fatalf("stored %d events, want only the first", events)
	}
}

func TestAWriteThatPanicsLeavesTheWriterUsable(t *testing.T) {
	s, _ := openStore(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not reach the caller")
			}
		}()
		_ = s.write(context.Background(), "panic", func(tx *sql.Tx) error {
			if _, err := tx.Exec(`INSERT INTO webhook_events (id, type, payload, created_at) VALUES ('evt_rolled_back', 't', X'7B7D', 0)`); err != nil {
				t.Error(err)
			}
			panic("bug")
		})
	}()
	created := make(chan error, 1)
	go func() {
		_, err := s.EventCreate(context.Background(), storage.Event{Type: "t", Payload: []byte(`{}`)})
		created <- err
	}()
	select {
	case err := <-created:
		if err != nil {
			t.Fatalf("create after a panicked write: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a create after a panicked write still waits for the writer after 10 s")
	}
	var n int
	if err := s.reader.QueryRow(`SELECT count(*) FROM webhook_events WHERE id = 'evt_rolled_back'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the panicked write's row: count %d, %v; want it rolled back", n, err)
	}
}
