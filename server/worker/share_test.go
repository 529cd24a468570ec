package worker_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// gauge counts the requests a receiver holds at once, and the most it held.
type gauge struct{ now, peak, total atomic.Int64 }

func (g *gauge) enter() {
	g.total.Add(1)
	n := g.now.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (g *gauge) leave() { g.now.Add(-1) }

// shareEnv is one store and the http plugin, sending to loopback with 1 s
// to connect and 30 s to read: longer than a test runs, so no send to a
// receiver that hangs ends while it does, and the requests such a receiver
// holds open are exactly the senders held on it (a send that timed out
// would leave its request open at the receiver a while, and be counted).
func shareEnv(t *testing.T, open func(*testing.T) storage.Store) (storage.Store, *pluginhost.Host) {
	t.Helper()
	store := open(t)
	host, err := pluginhost.New(t.Context(), pluginhost.Config{
		Dir: pluginDir,
		Plugins: []pluginhost.PluginConfig{
			{Name: "http", Settings: map[string]string{"allowed_networks": "127.0.0.0/8", "connect_timeout": "1s", "read_timeout": "30s"}},
		},
	}, e2etest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	return store, host
}

// endpointFor creates an endpoint for form that sends to a receiver whose
// handler is answer, and returns the receiver's gauge.
func endpointFor(t *testing.T, store storage.Store, form string, answer func(w http.ResponseWriter, r *http.Request)) *gauge {
	t.Helper()
	g := &gauge{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.enter()
		defer g.leave()
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: srv.URL + "/hook", FormIDs: []string{form},
		Secrets: []storage.Secret{storage.NewSecret(secret, nil)}}}); err != nil {
		t.Fatal(err)
	}
	return g
}

// shareConfig is the default pool with a send deadline that covers the
// plugin's timeouts (the benchmark's 3 s read timeout too).
func shareConfig() worker.Config {
	return worker.Config{SendTimeout: 33 * time.Second, PollInterval: 20 * time.Millisecond}
}

// A receiver that accepts and never answers holds no more than its share
// of the senders, so a healthy endpoint's deliveries submitted behind 200
// of its own go out at once: all 20 within 5 s, where without the share
// they waited for the hung ones to time out, batch after batch.
func TestFairShareAHungReceiverDoesNotStallTheOthers(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, host := shareEnv(t, open)
			release := make(chan struct{})
			hung := endpointFor(t, store, "form_hung", func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-release:
				case <-r.Context().Done():
				}
			})
			healthy := endpointFor(t, store, "form_ok", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })

			cfg := shareConfig()
			e2etest.RunPool(t, store, host, cfg)
			// Cleanups run last first: the hung requests are answered
			// before the pool stops, which waits for its sends.
			t.Cleanup(func() { close(release) })
			e2etest.Submit(t, store, "form_hung", 200)
			testwait.For(t, 10*time.Second, func() error {
				if hung.now.Load() == 0 {
					return errors.New("the hung receiver holds no request")
				}
				return nil
			})
			start := time.Now()
			e2etest.Submit(t, store, "form_ok", 20)
			testwait.For(t, 10*time.Second, func() error {
				if n := healthy.total.Load(); n < 20 {
					return fmt.Errorf("the healthy receiver got %d of 20", n)
				}
				return nil
			})
			took := time.Since(start)
			t.Logf("healthy endpoint: 20/20 in %s; the hung receiver held at most %d requests at once", took.Round(time.Millisecond), hung.peak.Load())
			// Without the share they wait for hung sends to time out (10 s
			// and more); 5 s leaves room for a loaded machine and still tells.
			if took > 5*time.Second {
				t.Errorf("the healthy endpoint's 20 deliveries took %s, want at most 5s", took)
			}
			// Concurrency 16 × share 0.25: one endpoint's room is 4.
			if p := hung.peak.Load(); p > 4 {
				t.Errorf("the hung receiver held %d requests at once, more than its room of 4 of the 16 senders", p)
			}
		})
	}
}

// An endpoint alone may use every sender once its sends have shown they
// are quick: the share holds it back only while others have due work.
func TestFairShareAnEndpointAloneUsesEverySender(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, host := shareEnv(t, open)
			busy := endpointFor(t, store, "form_busy", func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(50 * time.Millisecond)
				w.WriteHeader(http.StatusNoContent)
			})
			cfg := shareConfig()
			e2etest.RunPool(t, store, host, cfg)
			e2etest.Submit(t, store, "form_busy", 400)
			testwait.For(t, 30*time.Second, func() error {
				if n := busy.total.Load(); n < 400 {
					return fmt.Errorf("%d of 400 delivered", n)
				}
				return nil
			})
			t.Logf("the endpoint alone held up to %d of the 16 senders", busy.peak.Load())
			if p := busy.peak.Load(); p < 12 {
				t.Errorf("alone, the endpoint held at most %d senders at once, want nearly all 16 (at least 12)", p)
			}
		})
	}
}

// An endpoint that hangs after its sends were quick had claims queued for
// it meanwhile, up to a queue's worth (64 here, four times the senders):
// they are given back unsent once the slow endpoints' sends fill their
// share, instead of each taking a sender for a timeout in turn, so another
// endpoint's delivery goes out after the first round of hung sends, not
// after every round the queue holds.
func TestFairShareAnEndpointThatHangsGivesBackItsQueuedClaims(t *testing.T) {
	t.Parallel()
	const hang = 4 * time.Second
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, host := shareEnv(t, open)
			var hanging atomic.Bool
			var hungStarted atomic.Int64
			a := endpointFor(t, store, "form_a", func(w http.ResponseWriter, r *http.Request) {
				if hanging.Load() {
					hungStarted.Add(1)
					select {
					case <-time.After(hang):
					case <-r.Context().Done():
					}
				}
				w.WriteHeader(http.StatusNoContent)
			})
			b := endpointFor(t, store, "form_b", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })

			cfg := shareConfig()
			cfg.BatchSize = 64
			// A backlog, so that the endpoint holds every sender and a
			// full queue when it hangs.
			e2etest.Submit(t, store, "form_a", 1000)
			e2etest.RunPool(t, store, host, cfg)
			// Quick sends make it the endpoint that may hold every sender
			// and a full queue.
			testwait.For(t, 10*time.Second, func() error {
				if n := a.total.Load(); n < 100 {
					return fmt.Errorf("endpoint a got %d of its first 100 deliveries", n)
				}
				return nil
			})
			hanging.Store(true)
			start := time.Now()
			e2etest.Submit(t, store, "form_b", 1)
			testwait.For(t, 3*hang, func() error {
				if b.total.Load() == 0 {
					return errors.New("endpoint b's delivery has not arrived")
				}
				return nil
			})
			took := time.Since(start)
			t.Logf("endpoint b's delivery arrived after %s; endpoint a got %d requests that hung meanwhile", took.Round(time.Millisecond), hungStarted.Load())
			// One round of hung sends is unavoidable: they started while
			// the endpoint was quick. A second round, from the queue,
			// would take the wait to twice the hang.
			if limit := hang + hang/2; took > limit {
				t.Errorf("endpoint b's delivery took %s, want at most %s: one round of %s hung sends, not more", took.Round(time.Millisecond), limit, hang)
			}
			// The first round holds at most every sender; after it, the
			// slow endpoints' share (4 of 16) is all endpoint a may use.
			if n := hungStarted.Load(); n > 16+4 {
				t.Errorf("endpoint a got %d requests that hung before b's delivery arrived, want at most 20: a round of 16, then its slow share of 4", n)
			}
		})
	}
}
