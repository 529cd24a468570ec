package worker_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/server/retrypolicy"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// completions passes every call to the real store and keeps what each
// recorded attempt left on its delivery, as the store answered: the
// delivery's next_attempt_at is overwritten by the next attempt, so it is
// read here, the moment it is written. It injects nothing.
type completions struct {
	worker.Store
	mu  sync.Mutex
	got []storage.DeliveryCompleteResult
}

func (s *completions) DeliveryCompleteBatch(ctx context.Context, ps []storage.DeliveryCompleteParams) ([]storage.DeliveryCompleteResult, error) {
	res, err := s.Store.DeliveryCompleteBatch(ctx, ps)
	if err == nil {
		s.mu.Lock()
		for _, r := range res {
			if r.Err == nil {
				s.got = append(s.got, r)
			}
		}
		s.mu.Unlock()
	}
	return res, err
}

func (s *completions) results() []storage.DeliveryCompleteResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]storage.DeliveryCompleteResult(nil), s.got...)
}

// After the n-th request of a cycle fails, the delivery waits the n-th step
// of its schedule: the first retry the first step, the second retry the
// second, and so on. A worker that counted from zero would wait the first
// step twice and every later one a step early: with the default schedule a
// dead receiver would fail after about 13 minutes, not 1 h 13 min. The
// first retry cannot tell the two apart (step 0 is clamped to step 1), so
// the schedule here has three steps, far enough apart that a neighbouring
// one cannot pass for the right one, and no jitter. The server's schedule
// and an endpoint's own go through the same count; both are checked.
func TestRetryWaitsTheStepOfTheRequestThatFailed(t *testing.T) {
	t.Parallel()
	steps := []time.Duration{100 * time.Millisecond, 1600 * time.Millisecond, 3100 * time.Millisecond}
	// next_attempt_at counts from when the store wrote the outcome, a
	// little after the request ended (the completer gathers for a few
	// milliseconds, then writes): that lag must stay below this, which
	// is less than the 1.5 s between steps. It is that wide because CI
	// runs every package at once on two cores, where a write can wait
	// hundreds of milliseconds for a core.
	const writeLag = 1400 * time.Millisecond
	for _, tc := range []struct {
		name string
		// own sets the steps as the endpoint's own schedule, and gives the
		// server a schedule that would wait an hour.
		own bool
	}{
		{name: "the server's schedule"},
		{name: "the endpoint's own schedule", own: true},
	} {
		for backend, open := range backends {
			t.Run(tc.name+"/"+backend, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, open, "http", func(int, *http.Request) int { return http.StatusServiceUnavailable })
				cfg := fastConfig(len(steps) + 1)
				cfg.Retry = worker.RetrySchedule{Delays: steps}
				if tc.own {
					ep := e.ep
					ep.RetrySchedule = steps
					if _, err := e.store.EndpointUpdate(t.Context(), ep); err != nil {
						t.Fatal(err)
					}
					cfg.Retry = worker.RetrySchedule{Delays: []time.Duration{time.Hour}}
					cfg.MaxCycleAttempts = 10
					cfg.EndpointRetry = retrypolicy.EndpointBounds{MinDelay: 10 * time.Millisecond, MaxDelay: time.Hour, MaxAttempts: 10}
				}
				store := &completions{Store: e.store}
				e.run(cfg, store)
				_, d := e.submit()
				got := e.waitFor(d.ID, "terminal", terminal)
				if got.State != storage.StateFailed || got.CycleAttempts != len(steps)+1 {
					t.Fatalf("delivery = %+v, want failed after %d requests", got, len(steps)+1)
				}

				res := store.results()
				if len(res) != len(steps)+1 {
					t.Fatalf("the store recorded %d attempts, want %d", len(res), len(steps)+1)
				}
				waits := make([]time.Duration, len(steps))
				for i, step := range steps {
					r := res[i]
					if r.Attempt.Number != i+1 || r.Delivery.State != storage.StatePending {
						t.Fatalf("completion %d: attempt %d, delivery %s; want attempt %d and the delivery pending", i+1, r.Attempt.Number, r.Delivery.State, i+1)
					}
					wait := r.Delivery.NextAttemptAt.Sub(r.Attempt.FinishedAt)
					waits[i] = wait
					if wait < step || wait >= step+writeLag {
						t.Errorf("after request %d failed the delivery waits %s, want step %d of the schedule, %s (plus at most %s for the write)",
							i+1, wait, i+1, step, writeLag)
					}
				}
				t.Logf("waits before each retry: %v; the schedule's steps: %v", waits, steps)
			})
		}
	}
}
