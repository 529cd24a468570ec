package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

// An attempt is a request that went out. These prove, on both stores, that
// a claim which sends nothing records no attempt and spends no allowance:
// a passing cause gives the delivery back with its reason and a backoff, a
// lasting one fails it with the reason on the row, and replay works once
// the cause is fixed.
func TestNoRequestNoAttempt(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			t.Run("a plugin whose binary is gone and whose process died costs no attempt, and its deliveries go once it is back", func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				bin := filepath.Join(dir, pluginhost.BinaryPrefix+"http")
				copyFile(t, filepath.Join(pluginDir, pluginhost.BinaryPrefix+"http"), bin)
				e := newEnvIn(t, dir, open, "http", func(int, *http.Request) int { return http.StatusNoContent })
				if err := os.Remove(bin); err != nil {
					t.Fatal(err)
				}
				killPlugin(t, bin)
				// Up starts what it can; until the host has seen the process
				// go it still counts it as running.
				testwait.For(t, 5*time.Second, func() error {
					if e.host.Up(t.Context()) == nil {
						return errors.New("the host still sees the plugin up")
					}
					return nil
				})

				reader := sdkmetric.NewManualReader()
				metrics, err := telemetry.NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
				if err != nil {
					t.Fatal(err)
				}
				const allowance = 2
				cfg := fastConfig(allowance)
				cfg.Metrics = metrics
				e.run(cfg, e.store)
				var ids []string
				for range 3 {
					_, d := e.submit()
					ids = append(ids, d.ID)
				}
				// Round and round, many more times than the allowance.
				testwait.For(t, 20*time.Second, func() error {
					n := counter(t, reader, telemetry.MetricClaimsUnsent, "transport", "http", "reason", telemetry.UnsentUnavailable)
					if want := int64(len(ids) * (allowance + 2)); n < want {
						return fmt.Errorf("%d claims ended unsent, want at least %d", n, want)
					}
					return nil
				})
				for _, id := range ids {
					d := e.waitFor(id, "given back with the reason", func(d storage.Delivery) bool { return d.State == storage.StatePending })
					if d.Attempts != 0 || d.CycleAttempts != 0 || !strings.Contains(d.UnsentReason, `transport plugin "http" is not running`) {
						t.Fatalf("delivery while the plugin is down = %+v, want pending, no attempts, the reason naming the plugin", d)
					}
					if as := e.attempts(id); len(as) != 0 {
						t.Fatalf("%d attempts recorded while no request could go out", len(as))
					}
				}
				if n := counter(t, reader, telemetry.MetricAttempts, "transport", "http", "outcome", "retryable"); n != 0 {
					t.Fatalf("%d retryable attempts counted while the plugin was down", n)
				}
				if n := len(e.recv.requests()); n != 0 {
					t.Fatalf("the receiver got %d requests from a plugin that was not running", n)
				}

				copyFile(t, filepath.Join(pluginDir, pluginhost.BinaryPrefix+"http"), bin)
				for _, id := range ids {
					d := e.waitFor(id, "delivered once the plugin is back", func(d storage.Delivery) bool { return d.State == storage.StateDelivered })
					if d.Attempts != 1 || d.CycleAttempts != 1 || d.UnsentReason != "" {
						t.Fatalf("delivered = %+v, want one attempt and the reason cleared", d)
					}
					wantOutcomes(t, e.attempts(id), "delivered 204")
				}
			})

			t.Run("an unknown transport fails the delivery with the reason and no attempt; replay works once it is fixed", func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, open, "smtp", func(int, *http.Request) int { return http.StatusOK })
				e.run(fastConfig(5), e.store)
				_, d := e.submit()
				got := e.waitFor(d.ID, "terminal", terminal)
				if got.State != storage.StateFailed || got.Attempts != 0 || got.CycleAttempts != 0 ||
					!strings.Contains(got.UnsentReason, `"smtp"`) || !strings.Contains(got.UnsentReason, "loaded: http") {
					t.Fatalf("delivery = %+v, want failed, no attempts, the reason naming smtp and the loaded transports", got)
				}
				if as := e.attempts(d.ID); len(as) != 0 {
					t.Fatalf("%d attempts recorded for a transport that does not exist", len(as))
				}

				ep := e.ep
				ep.Transport = "http"
				if _, err := e.store.EndpointUpdate(t.Context(), ep); err != nil {
					t.Fatal(err)
				}
				replayed := e.replay(d.ID)
				if replayed.UnsentReason != "" {
					t.Fatalf("replay left the reason %q", replayed.UnsentReason)
				}
				got = e.waitFor(d.ID, "delivered", func(d storage.Delivery) bool { return d.State == storage.StateDelivered })
				if got.Attempts != 1 || got.CycleAttempts != 1 {
					t.Fatalf("after the fix and a replay = %+v, want one attempt", got)
				}
				wantOutcomes(t, e.attempts(d.ID), "delivered 200")
			})

			t.Run("a message that cannot be signed fails with no attempt; replay after rotating a secret in delivers it", func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, open, "http", func(int, *http.Request) int { return http.StatusOK })
				expired := time.Now().Add(-time.Hour)
				ep := e.ep
				ep.Secrets = []storage.Secret{storage.NewSecret(e.recv.secret, &expired)}
				ep, err := e.store.EndpointUpdate(t.Context(), ep)
				if err != nil {
					t.Fatal(err)
				}
				e.run(fastConfig(5), e.store)
				_, d := e.submit()
				got := e.waitFor(d.ID, "terminal", terminal)
				if got.State != storage.StateFailed || got.Attempts != 0 || got.CycleAttempts != 0 || !strings.Contains(got.UnsentReason, "no active signing secret") {
					t.Fatalf("delivery = %+v, want failed, no attempts, saying there is no active secret", got)
				}
				if as := e.attempts(d.ID); len(as) != 0 {
					t.Fatalf("%d attempts recorded for a message that was never signed", len(as))
				}
				if n := len(e.recv.requests()); n != 0 {
					t.Fatalf("the receiver got %d requests", n)
				}

				// A rotation puts an active secret in (the receiver holds it).
				ep.Secrets = append(ep.Secrets, storage.NewSecret(e.recv.secret, nil))
				if _, err := e.store.EndpointUpdate(t.Context(), ep); err != nil {
					t.Fatal(err)
				}
				e.replay(d.ID)
				got = e.waitFor(d.ID, "delivered", func(d storage.Delivery) bool { return d.State == storage.StateDelivered })
				if got.Attempts != 1 || got.UnsentReason != "" {
					t.Fatalf("after rotating and replaying = %+v, want one attempt and no reason", got)
				}
				reqs := e.recv.requests()
				if len(reqs) != 1 || reqs[0].err != nil {
					t.Fatalf("receiver got %d requests (first verified: %v), want 1 that verifies", len(reqs), reqs)
				}
			})

			t.Run("the http plugin's own guard refusing the target at dial time fails the delivery with no attempt", func(t *testing.T) {
				t.Parallel()
				// A host whose http plugin keeps its default guard, which
				// refuses loopback; localhost passes the URL checks and
				// resolves to loopback only when dialled.
				e := newEnvWith(t, pluginDir, open, nil, func(int, *http.Request) int { return http.StatusOK })
				ep := e.ep
				ep.URL = strings.Replace(e.recv.URL, "127.0.0.1", "localhost", 1) + "/hook"
				if _, err := e.store.EndpointUpdate(t.Context(), ep); err != nil {
					t.Fatal(err)
				}
				e.run(fastConfig(5), e.store)
				_, d := e.submit()
				got := e.waitFor(d.ID, "terminal", terminal)
				if got.State != storage.StateFailed || got.Attempts != 0 || got.CycleAttempts != 0 ||
					!strings.Contains(got.UnsentReason, "loopback") || !strings.Contains(got.UnsentReason, "allowed_networks") {
					t.Fatalf("delivery = %+v, want failed, no attempts, the guard's reason", got)
				}
				if as := e.attempts(d.ID); len(as) != 0 {
					t.Fatalf("%d attempts recorded for a request the guard never let out", len(as))
				}
				if n := len(e.recv.requests()); n != 0 {
					t.Fatalf("the receiver got %d requests despite the guard", n)
				}
			})

			t.Run("a plugin that says not now costs no attempt until it sends; one that refuses fails the delivery", func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, open, "misbehave", func(int, *http.Request) int { return http.StatusOK })
				ep := e.ep
				ep.Config = map[string]string{"mode": "defer"}
				ep, err := e.store.EndpointUpdate(t.Context(), ep)
				if err != nil {
					t.Fatal(err)
				}
				e.run(fastConfig(2), e.store)
				_, d := e.submit()
				// Each time it is given back it is due again 50 ms later, so
				// three distinct due times are three rounds of deferring,
				// seen rather than slept through, and none may cost an
				// attempt.
				given := map[int64]bool{}
				e.waitFor(d.ID, "given back three times with the plugin's reason", func(d storage.Delivery) bool {
					if d.Attempts != 0 || d.CycleAttempts != 0 {
						t.Fatalf("delivery the plugin keeps deferring = %+v, want no attempts", d)
					}
					if d.State == storage.StatePending && strings.Contains(d.UnsentReason, "misbehave is not sending for now") {
						given[d.NextAttemptAt.UnixNano()] = true
					}
					return len(given) >= 3
				})
				ep.Config = map[string]string{"mode": "ok"}
				if ep, err = e.store.EndpointUpdate(t.Context(), ep); err != nil {
					t.Fatal(err)
				}
				got := e.waitFor(d.ID, "delivered", func(d storage.Delivery) bool { return d.State == storage.StateDelivered })
				if got.Attempts != 1 || got.UnsentReason != "" {
					t.Fatalf("delivered = %+v, want one attempt and the reason cleared", got)
				}

				ep.Config = map[string]string{"mode": "refuse"}
				if _, err = e.store.EndpointUpdate(t.Context(), ep); err != nil {
					t.Fatal(err)
				}
				_, d = e.submit()
				got = e.waitFor(d.ID, "terminal", terminal)
				if got.State != storage.StateFailed || got.Attempts != 0 || !strings.Contains(got.UnsentReason, "misbehave refuses the target") {
					t.Fatalf("delivery the plugin refuses = %+v, want failed with its reason and no attempts", got)
				}
			})
		})
	}
}

// newEnvWith is newEnvIn with the http plugin's settings given; nil keeps
// its defaults, the guard refusing loopback included.
func newEnvWith(t *testing.T, dir string, open func(*testing.T) storage.Store, settings map[string]string, answer func(int, *http.Request) int) *env {
	t.Helper()
	ctx := t.Context()
	store := open(t)
	host, err := pluginhost.New(ctx, pluginhost.Config{
		Dir:     dir,
		Plugins: []pluginhost.PluginConfig{{Name: "http", Settings: settings}},
	}, e2etest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	recv := newReceiver(t, answer)
	ep, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{
		Transport: "http",
		URL:       recv.URL + "/hook",
		Secrets:   []storage.Secret{storage.NewSecret(recv.secret, nil)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, store: store, host: host, recv: recv, ep: ep.Endpoint}
}

// replay is an operator's replay of a terminal delivery.
func (e *env) replay(id string) storage.Delivery {
	e.t.Helper()
	d, err := e.store.DeliveryReplay(e.t.Context(), storage.DeliveryReplayParams{DeliveryID: id, Actor: "test"})
	if err != nil {
		e.t.Fatal(err)
	}
	return d.Delivery
}

// counter reads the counter name at the data point with the given
// attribute key/value pairs from reader; 0 when there is none.
func counter(t *testing.T, reader *sdkmetric.ManualReader, name string, kv ...string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return sum(rm, name, kv...)
}
