package worker_test

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/testwait"
)

// Endpoints whose receivers answer just under what makes an endpoint slow
// take every sender and, before, filled the queue in front of the senders
// too: a healthy endpoint's deliveries then waited behind their backlog
// for many seconds (4.4-20.7 s measured through serve, issue 34). Claimed
// work now waits per endpoint and the senders serve the endpoints in turn,
// with a reserve only an endpoint with nothing in flight may use, and the
// claimer claims a newly due endpoint's work even while the queue is full
// of others': the healthy endpoint's deliveries go out as they come.
//
// Not parallel, and its cases one at a time: what it measures is one
// pool's turn-taking within a bound, and on two cores the package's
// other tests running beside it stretched a healthy delivery past it
// (2.7 s in one full run).
func TestFairShareANewcomerIsNotBehindOthersBacklog(t *testing.T) {
	cases := []struct {
		slow  int
		delay time.Duration
	}{{4, 950 * time.Millisecond}, {6, 950 * time.Millisecond}, {6, 500 * time.Millisecond}}
	for name, open := range backends {
		for _, tc := range cases {
			// One case at a time: each runs a pool of 16 senders, and
			// six at once on two cores measured their own contention.
			t.Run(fmt.Sprintf("%s/%d endpoints at %s", name, tc.slow, tc.delay), func(t *testing.T) {
				store, host := shareEnv(t, open)
				for i := range tc.slow {
					endpointFor(t, store, fmt.Sprintf("form_slow_%d", i), func(w http.ResponseWriter, r *http.Request) {
						select {
						case <-time.After(tc.delay):
						case <-r.Context().Done():
						}
						w.WriteHeader(http.StatusNoContent)
					})
				}
				var mu sync.Mutex
				arrived := map[string]time.Time{}
				endpointFor(t, store, "form_ok", func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					arrived[r.Header.Get("webhook-id")] = time.Now()
					mu.Unlock()
					w.WriteHeader(http.StatusNoContent)
				})
				e2etest.RunPool(t, store, host, shareConfig())
				// 150 submissions to the slow endpoints: a backlog of
				// several seconds at 16 senders.
				for i := range 150 {
					e2etest.Submit(t, store, fmt.Sprintf("form_slow_%d", i%tc.slow), 1)
				}
				// Then the healthy endpoint's, at 4 a second.
				const healthy = 12
				created := map[string]time.Time{}
				for range healthy {
					at := time.Now()
					for id := range e2etest.Submit(t, store, "form_ok", 1) {
						created[id] = at
					}
					time.Sleep(250 * time.Millisecond)
				}
				testwait.For(t, 60*time.Second, func() error {
					mu.Lock()
					defer mu.Unlock()
					if len(arrived) < healthy {
						return fmt.Errorf("%d of the healthy endpoint's %d deliveries arrived", len(arrived), healthy)
					}
					return nil
				})
				mu.Lock()
				defer mu.Unlock()
				var waits []time.Duration
				for id, at := range created {
					got, ok := arrived[id]
					if !ok {
						t.Fatalf("delivery %s of the healthy endpoint did not arrive; arrived: %v", id, arrived)
					}
					waits = append(waits, got.Sub(at))
				}
				slices.Sort(waits)
				t.Logf("healthy endpoint, create to received: %v", waits)
				// The claimer's gap is milliseconds and a sender is free
				// for an endpoint with nothing in flight, so on a quiet
				// machine the worst is well under the 1 s (the
				// fault harness measures that bound, through serve). The
				// regression this catches is a wait behind the backlog, 4.7
				// s and more here (150 sends of 500 ms on 16 senders);
				// 2.5 s tells the two apart on a CI machine loaded by the
				// other packages' tests, where 1.8 s was seen.
				const bound = 2500 * time.Millisecond
				if worst := waits[len(waits)-1]; worst > bound {
					t.Errorf("a healthy delivery took %s from create to received behind %d endpoints at %s, want at most %s", worst.Round(time.Millisecond), tc.slow, tc.delay, bound)
				}
			})
		}
	}
}
