package worker_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// releases passes every call to the real store and keeps what each claim
// given back left on its delivery, as the store answered. It injects
// nothing.
type releases struct {
	worker.Store
	mu  sync.Mutex
	got []storage.Delivery
}

func (s *releases) DeliveryRelease(ctx context.Context, p storage.DeliveryReleaseParams) (storage.Delivery, error) {
	d, err := s.Store.DeliveryRelease(ctx, p)
	if err == nil {
		s.mu.Lock()
		s.got = append(s.got, d)
		s.mu.Unlock()
	}
	return d, err
}

func (s *releases) released() []storage.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]storage.Delivery(nil), s.got...)
}

// A send never outlives its claim: before the message goes out the sender
// checks that what is left of the lease covers the whole send deadline,
// and gives a claim with less left (it waited long in the queue, say) back
// unspent: no request, no attempt, the delivery pending again. Sent anyway,
// the lease could run out mid-send and another worker send the same
// message alongside. The pool's clock is put ahead of the store's, so the
// claim reaches its sender with less of its lease left than the deadline,
// however quickly it is taken off the queue; the first case, with the
// clocks together, shows the same set-up sends.
func TestAClaimWhoseLeaseEndsBeforeTheSendDeadlineIsGivenBack(t *testing.T) {
	t.Parallel()
	cfg := fastConfig(5)
	for _, tc := range []struct {
		name string
		// ahead is how far the pool's clock runs ahead of the store's.
		ahead time.Duration
		sent  bool
	}{
		{name: "a lease that covers the send deadline: sent", ahead: 0, sent: true},
		{name: "a lease a second short of the send deadline: given back", ahead: cfg.Lease - cfg.SendTimeout + time.Second},
	} {
		for backend, open := range backends {
			t.Run(tc.name+"/"+backend, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, open, "http", func(int, *http.Request) int { return http.StatusNoContent })
				store := &releases{Store: e.store}
				pool, err := worker.New(store, e.host, cfg, e2etest.Logger())
				if err != nil {
					t.Fatal(err)
				}
				worker.SetClock(pool, func() time.Time { return time.Now().Add(tc.ahead) })
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- pool.Run(ctx) }()
				stop := sync.OnceValue(func() error {
					cancel()
					return <-done
				})
				t.Cleanup(func() { _ = stop() })

				_, d := e.submit()
				testwait.For(t, 20*time.Second, func() error {
					if len(e.recv.requests()) == 0 && len(store.released()) == 0 {
						return errors.New("the claim is neither sent nor given back")
					}
					return nil
				})
				// Stopped, the pool has given back what it held and recorded
				// every send it started: what follows is its final word.
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				got, err := e.store.DeliveryGet(t.Context(), d.ID)
				if err != nil {
					t.Fatal(err)
				}
				requests, attempts := len(e.recv.requests()), e.attempts(d.ID)
				if tc.sent {
					if requests != 1 || len(attempts) != 1 || got.State != storage.StateDelivered {
						t.Fatalf("with the lease covering the deadline: %d requests, %d attempts, delivery %+v; want it sent and delivered once", requests, len(attempts), got)
					}
					return
				}
				if requests != 0 || len(attempts) != 0 {
					t.Fatalf("a claim whose lease ends before the send deadline was sent: %d requests, %d attempts recorded, delivery %+v", requests, len(attempts), got)
				}
				if got.State != storage.StatePending || got.Attempts != 0 || got.CycleAttempts != 0 || got.ClaimExpiresAt != nil {
					t.Fatalf("delivery after its claims were given back = %+v, want pending, unclaimed, no attempts", got)
				}
				for _, r := range store.released() {
					if r.ID != d.ID || r.State != storage.StatePending || r.Attempts != 0 || r.CycleAttempts != 0 {
						t.Fatalf("a claim given back left %+v, want the delivery pending with no attempts", r)
					}
				}
			})
		}
	}
}
