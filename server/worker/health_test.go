package worker_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/testwait"

	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/fleet"
	"github.com/hymical/hymical/storage"
)

// With endpoints.disable_on_gone (a Disabler; off by default), a
// receiver that answers 410 Gone gets its endpoint disabled: the
// delivery stays pending, held, nothing more is sent to it, and the
// operator endpoint gets one signed hymical.endpoint.disabled event through
// the same worker. Enabling the endpoint sends the held delivery.
func TestGoneDisablesTheEndpointAndTellsTheOperator(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			var gone atomic.Bool
			gone.Store(true)
			e := newEnv(t, open, "http", func(_ int, r *http.Request) int {
				if strings.HasSuffix(r.URL.Path, "/hook") && gone.Load() {
					return http.StatusGone
				}
				return http.StatusNoContent
			})
			ctx := t.Context()
			ops, err := e.store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{
				Transport: "http", URL: e.recv.URL + "/ops",

				EventTypes: []string{event.TypeEndpointDisabled},
				Secrets:    []storage.Secret{storage.NewSecret(e.recv.secret, nil)},
			}})
			if err != nil {
				t.Fatal(err)
			}
			health := &fleet.EndpointHealth{Store: e.store, OperatorEndpoint: ops.ID, Log: e2etest.Logger()}
			cfg := fastConfig(5)
			cfg.Disabler = health
			e.run(cfg, e.store)

			_, d := e.submit()
			d = e.waitFor(d.ID, "pending and held", func(d storage.Delivery) bool { return d.Held })
			if d.State != storage.StatePending || d.Attempts != 1 {
				t.Fatalf("after the 410: %+v, want pending after 1 attempt", d)
			}
			ep, err := e.store.EndpointGet(ctx, e.ep.ID)
			if err != nil {
				t.Fatal(err)
			}
			if ep.DisabledAt == nil || ep.DisabledReason != storage.DisabledGone {
				t.Fatalf("endpoint after a 410: disabled %v reason %q, want disabled for gone", ep.DisabledAt, ep.DisabledReason)
			}
			as := e.attempts(d.ID)
			if as[0].Outcome != storage.OutcomeRetryable || as[0].HTTPStatus != http.StatusGone || !strings.Contains(as[0].Error, "410 Gone") {
				t.Fatalf("attempt after a 410 = %+v", as[0])
			}

			note := waitForPath(t, e.recv, "/ops")
			if note.err != nil || note.indep != nil {
				t.Fatalf("the notification does not verify: ours %v, independent %v", note.err, note.indep)
			}
			var body struct {
				Type     string `json:"type"`
				Endpoint struct {
					ID, URL, Reason string
				} `json:"endpoint"`
			}
			if err := json.Unmarshal(note.body, &body); err != nil {
				t.Fatal(err)
			}
			if body.Type != event.TypeEndpointDisabled || body.Endpoint.ID != e.ep.ID || body.Endpoint.Reason != string(storage.DisabledGone) {
				t.Fatalf("notification = %s", note.body)
			}
			if strings.Contains(string(note.body), e.recv.secret) {
				t.Fatal("the notification carries the endpoint's secret")
			}

			// Paused means paused: the held delivery is one that no claim
			// takes, even once its retry is due (the claim looks a second
			// ahead, past the 50 ms backoff and within the notification's
			// lease), so nothing more goes to /hook.
			claims, err := e.store.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 10, Lease: time.Minute, Now: time.Now().Add(time.Second)})
			if err != nil || len(claims) != 0 {
				t.Fatalf("a claim took %d deliveries (%v) with the only pending one held, want none", len(claims), err)
			}
			if n := countPath(e.recv, "/hook"); n != 1 {
				t.Fatalf("%d requests reached the disabled endpoint, want the 1 that answered 410", n)
			}
			gone.Store(false)
			if _, err := endpoint.SetDisabled(ctx, e.store, e.ep.ID, false, time.Now(), nil); err != nil {
				t.Fatal(err)
			}
			d = e.waitFor(d.ID, "delivered", terminal)
			if d.State != storage.StateDelivered || d.Attempts != 2 {
				t.Fatalf("after enabling: %+v, want delivered on attempt 2", d)
			}
			if n := countPath(e.recv, "/ops"); n != 1 {
				t.Fatalf("the operator endpoint got %d notifications, want 1", n)
			}
		})
	}
}

// An endpoint's own retry schedule replaces the server's: its length plus
// one is the allowance, whatever the server's is.
func TestEndpointRetrySchedule(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, open, "http", func(int, *http.Request) int { return http.StatusServiceUnavailable })
			ep := e.ep
			ep.RetrySchedule = []time.Duration{30 * time.Millisecond, 30 * time.Millisecond}
			if _, err := e.store.EndpointUpdate(t.Context(), ep); err != nil {
				t.Fatal(err)
			}
			cfg := fastConfig(10)
			cfg.EndpointRetry.MinDelay, cfg.EndpointRetry.MaxDelay, cfg.EndpointRetry.MaxAttempts = 10*time.Millisecond, time.Second, 10
			e.run(cfg, e.store)
			_, d := e.submit()
			d = e.waitFor(d.ID, "terminal", terminal)
			if d.State != storage.StateFailed || d.Attempts != 3 {
				t.Fatalf("with a 2-delay schedule: %+v, want failed after 3 attempts (the server allows 10)", d)
			}
		})
	}
}

func waitForPath(t *testing.T, rc *receiver, suffix string) received {
	t.Helper()
	var found received
	testwait.For(t, 20*time.Second, func() error {
		for _, r := range rc.requests() {
			if strings.HasSuffix(r.path, suffix) {
				found = r
				return nil
			}
		}
		return fmt.Errorf("no request reached %s", suffix)
	})
	return found
}

func countPath(rc *receiver, suffix string) int {
	n := 0
	for _, r := range rc.requests() {
		if strings.HasSuffix(r.path, suffix) {
			n++
		}
	}
	return n
}
