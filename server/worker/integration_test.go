package worker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/harness/proctest"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/webhook"

	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// pluginDir holds the real plugin binaries, built once in TestMain.
var pluginDir string

func TestMain(m *testing.M) {
	e2etest.PluginMain(m, map[string]string{
		"http":      "github.com/hymical/hymical/plugins/http",
		"misbehave": "github.com/hymical/hymical/server/pluginhost/testdata/misbehave",
		"leaky":     "github.com/hymical/hymical/server/worker/testdata/leaky",
	}, &pluginDir)
}

// backends opens a fresh, migrated store of each kind.
var backends = e2etest.Backends()

// receiver is a real HTTP server on loopback that verifies each request
// and answers with whatever the test's script says.
type receiver struct {
	*httptest.Server
	secret string
	mu     sync.Mutex
	got    []received
	answer func(n int, r *http.Request) int // n counts requests from 1
}

type received struct {
	path   string
	header http.Header
	body   []byte
	err    error // from our verifier, sdk/webhook
	indep  error // from the Standard Webhooks project's own verifier
}

func newReceiver(t *testing.T, answer func(n int, r *http.Request) int) *receiver {
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{secret: secret, answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{
			path: r.URL.Path, header: r.Header.Clone(), body: body,
			err:   webhook.Verify(r.Header, body, secret),
			indep: independentVerify(secret, r.Header, body),
		})
		n := len(rc.got)
		rc.mu.Unlock()
		w.WriteHeader(rc.answer(n, r))
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// env is one store, one plugin host and one receiver.
type env struct {
	t     *testing.T
	store storage.Store
	host  *pluginhost.Host
	recv  *receiver
	ep    storage.Endpoint
}

func newEnv(t *testing.T, open func(*testing.T) storage.Store, transport string, answer func(int, *http.Request) int) *env {
	t.Helper()
	return newEnvIn(t, pluginDir, open, transport, answer)
}

// newEnvIn launches the plugins found in dir.
func newEnvIn(t *testing.T, dir string, open func(*testing.T) storage.Store, transport string, answer func(int, *http.Request) int) *env {
	t.Helper()
	ctx := t.Context()
	store := open(t)
	host, err := pluginhost.New(ctx, pluginhost.Config{
		Dir: dir,
		Plugins: []pluginhost.PluginConfig{
			{Name: "http", Settings: map[string]string{"allowed_networks": "127.0.0.0/8", "connect_timeout": "1s", "read_timeout": "2s"}},
		},
	}, e2etest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	recv := newReceiver(t, answer)
	ep, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{
		Transport: transport,
		URL:       recv.URL + "/hook",
		Secrets:   []storage.Secret{storage.NewSecret(recv.secret, nil)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, store: store, host: host, recv: recv, ep: ep.Endpoint}
}

// fastConfig retries quickly so a whole schedule runs in a test.
func fastConfig(allowance int) worker.Config {
	return worker.Config{
		Concurrency:      4,
		BatchSize:        4,
		Lease:            8 * time.Second,
		SendTimeout:      3 * time.Second,
		PollInterval:     20 * time.Millisecond,
		MaxCycleAttempts: allowance,
		Retry:            worker.RetrySchedule{Delays: []time.Duration{50 * time.Millisecond}},
	}
}

// submit creates one submission event and returns its delivery.
func (e *env) submit() (storage.Event, storage.Delivery) {
	e.t.Helper()
	ev, err := event.Submission("form_1", []byte(`{"email":"a@example.com"}`), time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.store.EventCreate(e.t.Context(), ev)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(res.Deliveries) != 1 {
		e.t.Fatalf("fan-out made %d deliveries, want 1", len(res.Deliveries))
	}
	return res.Event, res.Deliveries[0]
}

// run starts a pool and stops it when the test ends.
func (e *env) run(cfg worker.Config, store worker.Store) {
	e.t.Helper()
	e2etest.RunPool(e.t, store, e.host, cfg)
}

// waitFor polls the delivery until cond holds or 20 s pass.
func (e *env) waitFor(id string, what string, cond func(storage.Delivery) bool) storage.Delivery {
	e.t.Helper()
	var d storage.Delivery
	testwait.For(e.t, 20*time.Second, func() error {
		var err error
		if d, err = e.store.DeliveryGet(context.Background(), id); err != nil {
			e.t.Fatal(err)
		}
		if !cond(d) {
			return fmt.Errorf("delivery %s never became %s: %+v", id, what, d)
		}
		return nil
	})
	return d
}

func terminal(d storage.Delivery) bool { return d.State.Terminal() }

func (e *env) attempts(id string) []storage.Attempt {
	e.t.Helper()
	as, err := e.store.AttemptList(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	for i, a := range as {
		if a.Number != i+1 {
			e.t.Fatalf("attempt numbers not 1..n: %+v", as)
		}
	}
	return as
}

func wantOutcomes(t *testing.T, as []storage.Attempt, want ...string) {
	t.Helper()
	var got []string
	for _, a := range as {
		s := string(a.Outcome)
		if a.HTTPStatus != 0 {
			s += fmt.Sprintf(" %d", a.HTTPStatus)
		}
		if a.Late {
			s += " late"
		}
		got = append(got, s)
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("attempts = [%s], want [%s]", strings.Join(got, ", "), strings.Join(want, ", "))
	}
}

func TestDelivery(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("a submission is delivered once, signed, with the exact body", func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, open, "http", func(int, *http.Request) int { return http.StatusNoContent })
				e.run(fastConfig(5), e.store)
				ev, d := e.submit()
				got := e.waitFor(d.ID, "terminal", terminal)
				if got.State != storage.StateDelivered || got.Attempts != 1 || got.CycleAttempts != 1 {
					t.Fatalf("delivery = %+v", got)
				}
				wantOutcomes(t, e.attempts(d.ID), "delivered 204")
				reqs := e.recv.requests()
				if len(reqs) != 1 {
					t.Fatalf("receiver got %d requests, want 1", len(reqs))
				}
				r := reqs[0]
				if r.err != nil || r.indep != nil {
					t.Fatalf("receiver could not verify the signature: sdk/webhook says %v, the Standard Webhooks library says %v", r.err, r.indep)
				}
				if string(r.body) != string(ev.Payload) {
					t.Fatalf("body = %s, want %s", r.body, ev.Payload)
				}
				if r.header.Get("webhook-id") != d.ID || !strings.Contains(string(r.body), ev.SubmissionID) {
					t.Fatalf("webhook-id = %q (want %s), body carries submission %s", r.header.Get("webhook-id"), d.ID, ev.SubmissionID)
				}
			})

			t.Run("a retryable failure is retried and then delivered", func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, open, "http", func(n int, _ *http.Request) int {
					if n == 1 {
						return http.StatusServiceUnavailable
					}
					return http.StatusOK
				})
				e.run(fastConfig(5), e.store)
				_, d := e.submit()
				got := e.waitFor(d.ID, "terminal", terminal)
				if got.State != storage.StateDelivered || got.Attempts != 2 || got.CycleAttempts != 2 {
					t.Fatalf("delivery = %+v", got)
				}
				wantOutcomes(t, e.attempts(d.ID), "retryable 503", "delivered 200")
			})

			t.Run("retries stop at the allowance and the delivery fails", func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, open, "http", func(int, *http.Request) int { return http.StatusInternalServerError })
				e.run(fastConfig(3), e.store)
				_, d := e.submit()
				got := e.waitFor(d.ID, "terminal", terminal)
				if got.State != storage.StateFailed || got.Attempts != 3 || got.CycleAttempts != 3 {
					t.Fatalf("delivery = %+v", got)
				}
				wantOutcomes(t, e.attempts(d.ID), "retryable 500", "retryable 500", "retryable 500")
				if n := len(e.recv.requests()); n != 3 {
					t.Fatalf("receiver got %d requests, want 3", n)
				}
			})

			t.Run("a permanent 4xx fails the delivery at once", func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, open, "http", func(int, *http.Request) int { return http.StatusUnprocessableEntity })
				e.run(fastConfig(5), e.store)
				_, d := e.submit()
				got := e.waitFor(d.ID, "terminal", terminal)
				if got.State != storage.StateFailed || got.Attempts != 1 {
					t.Fatalf("delivery = %+v", got)
				}
				wantOutcomes(t, e.attempts(d.ID), "permanent 422")
			})

			t.Run("an operator's replay of a failed delivery delivers it with a fresh cycle", func(t *testing.T) {
				t.Parallel()
				var fixed sync.Mutex
				broken := true
				e := newEnv(t, open, "http", func(int, *http.Request) int {
					fixed.Lock()
					defer fixed.Unlock()
					if broken {
						return http.StatusBadRequest
					}
					return http.StatusOK
				})
				e.run(fastConfig(5), e.store)
				_, d := e.submit()
				e.waitFor(d.ID, "failed", func(d storage.Delivery) bool { return d.State == storage.StateFailed })
				fixed.Lock()
				broken = false
				fixed.Unlock()
				if _, err := e.store.DeliveryReplay(t.Context(), storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: "test"}); err != nil {
					t.Fatal(err)
				}
				got := e.waitFor(d.ID, "delivered", func(d storage.Delivery) bool { return d.State == storage.StateDelivered })
				if got.Attempts != 2 || got.CycleAttempts != 1 {
					t.Fatalf("after replay: attempts %d cycle %d, want 2 and 1", got.Attempts, got.CycleAttempts)
				}
				wantOutcomes(t, e.attempts(d.ID), "permanent 400", "delivered 200")
				reqs := e.recv.requests()
				if len(reqs) != 2 || string(reqs[0].body) != string(reqs[1].body) {
					t.Fatal("a replay must send the same bytes, with the same submission id")
				}
			})

			t.Run("a plugin killed mid-send is a retryable attempt, relaunched, and the delivery still arrives", func(t *testing.T) {
				t.Parallel()
				inFlight := make(chan struct{})
				release := make(chan struct{})
				// A private copy of the binary, so the kill hits only this
				// test's plugin process and not those of parallel tests.
				dir := t.TempDir()
				bin := filepath.Join(dir, "hymical-plugin-http")
				copyFile(t, filepath.Join(pluginDir, "hymical-plugin-http"), bin)
				e := newEnvIn(t, dir, open, "http", func(n int, r *http.Request) int {
					if n == 1 {
						close(inFlight)
						select { // hold the first request until the plugin is dead
						case <-release:
						case <-r.Context().Done():
						}
					}
					return http.StatusOK
				})
				e.run(fastConfig(5), e.store)
				_, d := e.submit()
				<-inFlight
				killPlugin(t, bin)
				close(release)
				got := e.waitFor(d.ID, "terminal", terminal)
				if got.State != storage.StateDelivered {
					t.Fatalf("delivery = %+v", got)
				}
				as := e.attempts(d.ID)
				if len(as) != 2 || as[0].Outcome != storage.OutcomeRetryable || as[1].Outcome != storage.OutcomeDelivered {
					t.Fatalf("attempts = %+v, want the killed send retryable then delivered", as)
				}
				if !strings.Contains(as[0].Error, "plugin") {
					t.Fatalf("the killed send's error %q does not say the plugin failed", as[0].Error)
				}
				if e.host.Restarts("http") < 1 {
					t.Fatal("the host did not relaunch the killed plugin")
				}
			})

			t.Run("a hanging plugin hits the deadline, counts as retryable and is relaunched", func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, open, "misbehave", func(int, *http.Request) int { return http.StatusOK })
				ep := e.ep
				ep.Config = map[string]string{"mode": "hang"}
				if _, err := e.store.EndpointUpdate(t.Context(), ep); err != nil {
					t.Fatal(err)
				}
				cfg := fastConfig(2)
				cfg.SendTimeout = 500 * time.Millisecond
				e.run(cfg, e.store)
				_, d := e.submit()
				got := e.waitFor(d.ID, "terminal", terminal)
				if got.State != storage.StateFailed || got.Attempts != 2 {
					t.Fatalf("delivery = %+v", got)
				}
				for _, a := range e.attempts(d.ID) {
					if a.Outcome != storage.OutcomeRetryable || a.FinishedAt.Sub(a.StartedAt) > 5*time.Second {
						t.Fatalf("attempt = %+v, want retryable within the deadline and its grace", a)
					}
				}
				if e.host.Restarts("misbehave") < 1 {
					t.Fatal("the host did not relaunch the hung plugin")
				}
			})

			t.Run("shutdown lets the in-flight send finish and record, and claims nothing more", func(t *testing.T) {
				t.Parallel()
				inFlight := make(chan struct{})
				release := make(chan struct{})
				e := newEnv(t, open, "http", func(n int, _ *http.Request) int {
					if n == 1 {
						close(inFlight)
						<-release
					}
					return http.StatusOK
				})
				cfg := fastConfig(5)
				cfg.Concurrency, cfg.BatchSize = 1, 1
				pool, err := worker.New(e.store, e.host, cfg, e2etest.Logger())
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- pool.Run(ctx) }()
				_, first := e.submit()
				<-inFlight
				cancel()
				_, second := e.submit()
				select {
				case <-done:
					t.Fatal("Run returned while a send was still in flight")
				case <-time.After(200 * time.Millisecond):
				}
				close(release)
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Run did not return after its last send finished")
				}
				got, err := e.store.DeliveryGet(t.Context(), first.ID)
				if err != nil || got.State != storage.StateDelivered || got.Attempts != 1 {
					t.Fatalf("in-flight delivery after shutdown = %+v, %v; want delivered once", got, err)
				}
				got, err = e.store.DeliveryGet(t.Context(), second.ID)
				if err != nil || got.State != storage.StatePending || got.Attempts != 0 {
					t.Fatalf("delivery created after shutdown = %+v, %v; want pending and untouched", got, err)
				}
			})

			t.Run("a worker whose claim is taken mid-send records a late attempt and moves nothing", func(t *testing.T) {
				t.Parallel()
				inFlight := make(chan struct{})
				release := make(chan struct{})
				e := newEnv(t, open, "http", func(n int, _ *http.Request) int {
					if n == 1 {
						close(inFlight)
						<-release
					}
					return http.StatusOK
				})
				e.run(fastConfig(5), e.store)
				_, d := e.submit()
				<-inFlight
				// Another worker, on its own view of the clock past the lease,
				// takes the delivery over while the first request is out.
				steal, err := e.store.DeliveryClaim(t.Context(), storage.DeliveryClaimParams{Limit: 1, Lease: time.Hour, Now: time.Now().Add(time.Minute)})
				if err != nil || len(steal) != 1 || steal[0].Delivery.ID != d.ID {
					t.Fatalf("steal claim: %v, %v", steal, err)
				}
				close(release)
				got := e.waitFor(d.ID, "one late attempt", func(d storage.Delivery) bool { return d.Attempts == 1 })
				if got.State != storage.StateProcessing || got.CycleAttempts != 0 || !got.ClaimExpiresAt.Equal(*steal[0].Delivery.ClaimExpiresAt) {
					t.Fatalf("the late worker moved the new owner's delivery: %+v", got)
				}
				wantOutcomes(t, e.attempts(d.ID), "delivered 200 late")
			})
		})
	}
}

// independentVerify checks a request with the Standard Webhooks project's
// own library, so our signing is not only checked against our verifier.
func independentVerify(secret string, h http.Header, body []byte) error {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return err
	}
	return wh.Verify(body, h)
}

// killPlugin SIGKILLs every running process of the binary at path, which
// may have been removed already.
func killPlugin(t *testing.T, path string) {
	t.Helper()
	if n, err := proctest.KillExecutable(path); err != nil || n == 0 {
		t.Fatalf("no running process of %s to kill (%v)", path, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
