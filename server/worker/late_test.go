package worker_test

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/server/fleet"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
	"github.com/hymical/hymical/storage/sqlite"
)

// rawBackend is a fresh migrated store of one kind with a way to run raw
// SQL on its database from connections of the test's own, for faults the
// Store API cannot make.
type rawBackend struct {
	open func(t *testing.T) (storage.Store, func(t *testing.T, sql string))
	// refuseLate makes the database refuse to insert a late attempt, with
	// a real error of its own, until the trigger is dropped.
	refuseLate, allowLate string
}

var rawBackends = map[string]rawBackend{
	"sqlite": {
		open: func(t *testing.T) (storage.Store, func(*testing.T, string)) {
			path := filepath.Join(t.TempDir(), "hymical.db")
			s, err := sqlite.Open(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if _, err := s.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
				t.Fatal(err)
			}
			raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { raw.Close() })
			return s, func(t *testing.T, q string) {
				t.Helper()
				if _, err := raw.ExecContext(context.Background(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		},
		refuseLate: `CREATE TRIGGER refuse_late BEFORE INSERT ON webhook_delivery_attempts WHEN NEW.late = 1
			BEGIN SELECT RAISE(ABORT, 'test: the database refuses late attempts for now'); END`,
		allowLate: `DROP TRIGGER refuse_late`,
	},
	"postgres": {
		open: func(t *testing.T) (storage.Store, func(*testing.T, string)) {
			dsn := pgtest.NewDatabase(t)
			s, err := postgres.Open(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if _, err := s.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
				t.Fatal(err)
			}
			return s, func(t *testing.T, q string) {
				t.Helper()
				ctx := context.Background()
				conn, err := pgx.Connect(ctx, dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		},
		refuseLate: `CREATE FUNCTION refuse_late() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'test: the database refuses late attempts for now'; END $$;
			CREATE TRIGGER refuse_late BEFORE INSERT ON webhook_delivery_attempts
			FOR EACH ROW WHEN (NEW.late) EXECUTE FUNCTION refuse_late()`,
		allowLate: `DROP TRIGGER refuse_late ON webhook_delivery_attempts`,
	},
}

// lateCounter passes every call to the real store and counts the late
// records it was asked for and how many the database refused. It injects
// nothing: the refusals come from the database. It is there so the test
// can tell that the database really refused, and for how long, rather
// than passing because the fault never happened.
type lateCounter struct {
	worker.Store
	calls, refused atomic.Int32
}

func (s *lateCounter) AttemptRecordLate(ctx context.Context, p storage.AttemptRecordLateParams) (storage.Attempt, error) {
	a, err := s.Store.AttemptRecordLate(ctx, p)
	s.calls.Add(1)
	if err != nil {
		s.refused.Add(1)
	}
	return a, err
}

// A superseded worker whose late attempt the database refuses for longer
// than the worker's lease keeps trying, and the attempt lands once the
// database takes writes again, with the next lifetime number read from the
// stored row: the new owner's attempt took number 1, so the late one is 2,
// though the late worker claimed the delivery at attempts 0.
func TestLateAttemptLandsAfterTheDatabaseRefusedIt(t *testing.T) {
	for name, b := range rawBackends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, exec := b.open(t)
			inFlight := make(chan struct{})
			release := make(chan struct{})
			e := newEnv(t, func(*testing.T) storage.Store { return store }, "http", func(n int, _ *http.Request) int {
				if n == 1 {
					close(inFlight)
					<-release
				}
				return http.StatusOK
			})
			exec(t, b.refuseLate)
			counter := &lateCounter{Store: store}
			cfg := fastConfig(5)
			cfg.Lease, cfg.SendTimeout = 3*time.Second, 2500*time.Millisecond
			e.run(cfg, counter)

			_, d := e.submit()
			<-inFlight
			held, err := store.DeliveryGet(t.Context(), d.ID)
			if err != nil || held.ClaimExpiresAt == nil {
				t.Fatalf("the delivery in flight: %+v, %v", held, err)
			}
			// Another worker takes the delivery over while the request is
			// out, and records its own attempt: delivered, number 1.
			steal, err := store.DeliveryClaim(t.Context(), storage.DeliveryClaimParams{Limit: 1, Lease: time.Hour, Now: time.Now().Add(time.Minute)})
			if err != nil || len(steal) != 1 || steal[0].Delivery.ID != d.ID {
				t.Fatalf("steal claim: %v, %v", steal, err)
			}
			now := time.Now()
			if _, a, err := store.DeliveryComplete(t.Context(), storage.DeliveryCompleteParams{
				DeliveryID: d.ID, Token: steal[0].Token, Outcome: storage.OutcomeDelivered, HTTPStatus: http.StatusOK,
				StartedAt: now, FinishedAt: now, MaxCycleAttempts: 5,
			}); err != nil || a.Number != 1 {
				t.Fatalf("the new owner's attempt: %+v, %v", a, err)
			}
			close(release)

			// The database refuses the late attempt until well after the
			// late worker's own lease has run out.
			time.Sleep(time.Until(held.ClaimExpiresAt.Add(time.Second)))
			if counter.refused.Load() < 2 || counter.calls.Load() != counter.refused.Load() {
				t.Fatalf("before the database took writes again: %d late records asked for, %d refused; want every one refused, at least 2",
					counter.calls.Load(), counter.refused.Load())
			}
			t.Logf("the database refused %d late records over %s", counter.refused.Load(), time.Since(now).Round(time.Millisecond))
			exec(t, b.allowLate)

			got := e.waitFor(d.ID, "the late attempt recorded", func(d storage.Delivery) bool { return d.Attempts == 2 })
			if got.State != storage.StateDelivered || got.CycleAttempts != 1 {
				t.Fatalf("the late attempt moved the delivery: %+v", got)
			}
			wantOutcomes(t, e.attempts(d.ID), "delivered 200", "delivered 200 late")
		})
	}
}

// With endpoints.disable_on_gone on, only the claim's owner acts on a 410:
// a worker whose claim was taken over while its request was out, and whose
// receiver answered 410 Gone, records a late attempt as the transport
// reported it (permanent, 410) and changes nothing else: the endpoint stays
// enabled and its failing run is not started.
func TestSupersededWorkersGoneDisablesNothing(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inFlight := make(chan struct{})
			release := make(chan struct{})
			e := newEnv(t, open, "http", func(n int, _ *http.Request) int {
				if n == 1 {
					close(inFlight)
					<-release
				}
				return http.StatusGone
			})
			cfg := fastConfig(5)
			cfg.Disabler = &fleet.EndpointHealth{Store: e.store, Log: e2etest.Logger()}
			pool, err := worker.New(e.store, e.host, cfg, e2etest.Logger())
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			done := make(chan error, 1)
			go func() { done <- pool.Run(ctx) }()

			_, d := e.submit()
			<-inFlight
			steal, err := e.store.DeliveryClaim(t.Context(), storage.DeliveryClaimParams{Limit: 1, Lease: time.Hour, Now: time.Now().Add(time.Minute)})
			if err != nil || len(steal) != 1 || steal[0].Delivery.ID != d.ID {
				t.Fatalf("steal claim: %v, %v", steal, err)
			}
			close(release)
			got := e.waitFor(d.ID, "one late attempt", func(d storage.Delivery) bool { return d.Attempts == 1 })
			// Run returns once every outcome it had is recorded and acted on,
			// so whatever the late worker was going to do to the endpoint is
			// done by then.
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got.State != storage.StateProcessing || got.CycleAttempts != 0 || got.Held {
				t.Fatalf("the late worker moved the new owner's delivery: %+v", got)
			}
			wantOutcomes(t, e.attempts(d.ID), "permanent 410 late")
			ep, err := e.store.EndpointGet(t.Context(), e.ep.ID)
			if err != nil {
				t.Fatal(err)
			}
			if ep.DisabledAt != nil || ep.DisabledReason != "" || ep.FailingSince != nil {
				t.Fatalf("a superseded worker's 410 acted on the endpoint: disabled at %v (%q), failing since %v", ep.DisabledAt, ep.DisabledReason, ep.FailingSince)
			}
		})
	}
}
