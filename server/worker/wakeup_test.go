package worker_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// slowPoll is a poll interval far longer than a test waits for a delivery
// (20 s in waitFor): a delivery that arrives was woken for, not polled for.
const slowPoll = 10 * time.Minute

// wakeConfig retries after 200 ms and polls almost never.
func wakeConfig() worker.Config {
	cfg := fastConfig(5)
	cfg.PollInterval = slowPoll
	cfg.Retry = worker.RetrySchedule{Delays: []time.Duration{200 * time.Millisecond}}
	return cfg
}

// script answers each request with the next status queued, or 200,
// after wait.
type script struct {
	mu   sync.Mutex
	next []int
	wait time.Duration
}

func (s *script) slow(wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wait = wait
}

func (s *script) queue(codes ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = append(s.next, codes...)
}

func (s *script) answer(int, *http.Request) int {
	s.mu.Lock()
	wait := s.wait
	s.mu.Unlock()
	time.Sleep(wait)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.next) == 0 {
		return http.StatusOK
	}
	code := s.next[0]
	s.next = s.next[1:]
	return code
}

func delivered(d storage.Delivery) bool { return d.State == storage.StateDelivered }

// TestDueDeliveriesWakeTheClaimer: with a poll that never comes in the
// test's time, every way a delivery becomes due still gets it sent: the
// store's wake-up, or its timed wake-up for a retry, brings the claim.
func TestDueDeliveriesWakeTheClaimer(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var s script
			e := newEnv(t, open, "http", s.answer)
			e.run(wakeConfig(), e.store)
			ctx := t.Context()

			// The first may be found by the pool's first claim; the
			// others arrive while it waits.
			for range 3 {
				_, d := e.submit()
				e.waitFor(d.ID, "delivered once created", delivered)
			}

			// A burst to one endpoint that answers slowly: it takes every
			// sender, and the claim after that finds it at its room and
			// takes nothing more; as each send ends, the room it frees
			// brings another claim.
			s.slow(100 * time.Millisecond)
			burst := e2etest.Submit(t, e.store, "form_1", 12)
			for id := range burst {
				e.waitFor(id, "delivered after a burst", delivered)
			}
			s.slow(0)

			s.queue(http.StatusServiceUnavailable)
			_, d := e.submit()
			got := e.waitFor(d.ID, "delivered after a retry", delivered)
			if got.Attempts != 2 {
				t.Fatalf("delivered after %d attempts, want 2: a 503, then the retry", got.Attempts)
			}

			s.queue(http.StatusBadRequest)
			_, d = e.submit()
			e.waitFor(d.ID, "failed", terminal)
			if _, err := e.store.DeliveryReplay(ctx, storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: "test"}); err != nil {
				t.Fatal(err)
			}
			e.waitFor(d.ID, "delivered after a replay", delivered)

			ep, err := e.store.EndpointGet(ctx, e.ep.ID)
			if err != nil {
				t.Fatal(err)
			}
			off := time.Now()
			ep.DisabledAt, ep.DisabledReason = &off, storage.DisabledByOperator
			if ep, err = e.store.EndpointUpdate(ctx, ep); err != nil {
				t.Fatal(err)
			}
			_, d = e.submit()
			if !d.Held {
				t.Fatal("a delivery to a disabled endpoint is not held")
			}
			ep.DisabledAt, ep.DisabledReason = nil, ""
			if _, err = e.store.EndpointUpdate(ctx, ep); err != nil {
				t.Fatal(err)
			}
			e.waitFor(d.ID, "delivered once its endpoint is enabled again", delivered)
		})
	}
}

// twoProcesses opens two Stores on one fresh PostgreSQL database, as two
// server processes would, and returns them with the database's DSN.
func twoProcesses(t *testing.T) (a, b *postgres.Store, dsn string) {
	t.Helper()
	dsn = pgtest.NewDatabase(t)
	open := func() *postgres.Store {
		s, err := postgres.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b = open(), open()
	if _, err := a.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	return a, b, dsn
}

// TestASubmissionInOneProcessWakesTheClaimerOfAnother: the pool runs on one
// Store, the submissions are made through another on the same database,
// and with a poll that never comes they still go at once.
func TestASubmissionInOneProcessWakesTheClaimerOfAnother(t *testing.T) {
	t.Parallel()
	a, b, _ := twoProcesses(t)
	e := newEnv(t, func(*testing.T) storage.Store { return a }, "http", func(int, *http.Request) int { return http.StatusOK })
	e.run(wakeConfig(), b)
	for range 3 {
		_, d := e.submit()
		e.waitFor(d.ID, "delivered by the other process", delivered)
	}
}

// TestDeliveriesFlowWhileTheListenerIsKilled: the LISTEN connection of the
// claiming process is killed over and over while submissions arrive
// through another; the poll and the wake-up on reconnecting still get
// every one delivered, and the listener is back once the killing stops.
func TestDeliveriesFlowWhileTheListenerIsKilled(t *testing.T) {
	t.Parallel()
	a, b, dsn := twoProcesses(t)
	e := newEnv(t, func(*testing.T) storage.Store { return a }, "http", func(int, *http.Request) int { return http.StatusOK })
	cfg := fastConfig(5)
	cfg.PollInterval = 300 * time.Millisecond
	e.run(cfg, b)
	waitListening(t, b)

	admin, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	// The listener is the connection named for it; a has none, since
	// nothing asked it for wake-ups.
	kill := func() int {
		var n int
		if err := admin.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'hymical wakeups'`).Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}
	if n := kill(); n != 1 {
		t.Fatalf("killed %d listener connections, want the claiming process's one", n)
	}
	var killed atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				killed.Add(int64(kill()))
			}
		}
	}()
	var ids []string
	for range 10 {
		_, d := e.submit()
		ids = append(ids, d.ID)
		time.Sleep(30 * time.Millisecond)
	}
	for _, id := range ids {
		e.waitFor(id, "delivered while the listener was being killed", delivered)
	}
	close(stop)
	<-done
	t.Logf("the listener was killed %d more times while the submissions arrived", killed.Load())
	waitListening(t, b)
}

// waitListening waits for s's listener to be LISTENing.
func waitListening(t *testing.T, s *postgres.Store) {
	t.Helper()
	testwait.For(t, 20*time.Second, func() error {
		if !s.Listening() {
			return errors.New("the wake-up listener is not listening")
		}
		return nil
	})
}
