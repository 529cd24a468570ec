package fleet_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/fleet"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
	"github.com/hymical/hymical/storage/sqlite"
)

// sharedStores opens n Stores on one fresh, migrated database of each
// kind, each with connections of its own, like n server processes.
func sharedStores(t *testing.T, n int) map[string][]storage.Store {
	open := map[string]func(t *testing.T) func() storage.Store{
		"sqlite": func(t *testing.T) func() storage.Store {
			path := filepath.Join(t.TempDir(), "h.db")
			return func() storage.Store {
				s, err := sqlite.Open(t.Context(), path)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		},
		"postgres": func(t *testing.T) func() storage.Store {
			dsn := pgtest.NewDatabase(t)
			return func() storage.Store {
				s, err := postgres.Open(t.Context(), dsn)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		},
	}
	out := map[string][]storage.Store{}
	for name, opener := range open {
		next := opener(t)
		for i := range n {
			s := next()
			t.Cleanup(func() { s.Close() })
			if i == 0 {
				if _, err := s.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
					t.Fatal(err)
				}
			}
			out[name] = append(out[name], s)
		}
	}
	return out
}

func newEndpoint(t *testing.T, s storage.Store, url string, mutate ...func(*storage.Endpoint)) storage.Endpoint {
	t.Helper()
	e := storage.Endpoint{Transport: "http", URL: url,
		Secrets: []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)}}
	for _, m := range mutate {
		m(&e)
	}
	created, err := s.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: e})
	if err != nil {
		t.Fatal(err)
	}
	return created.Endpoint
}

// failAt records one failed attempt to ep, finished at `at`.
func failAt(t *testing.T, s storage.Store, ep storage.Endpoint, at time.Time) {
	t.Helper()
	ctx := t.Context()
	if _, err := s.EventCreate(ctx, storage.Event{Type: "probe", EndpointID: ep.ID, Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 1, Lease: time.Minute})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v, %d", err, len(claims))
	}
	if _, _, err := s.DeliveryComplete(ctx, storage.DeliveryCompleteParams{
		DeliveryID: claims[0].Delivery.ID, Token: claims[0].Token, Outcome: storage.OutcomeRetryable,
		HTTPStatus: 503, StartedAt: at.Add(-time.Second), FinishedAt: at, RetryDelay: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
}

// notifications returns the hymical.endpoint.disabled events addressed to
// the operator endpoint.
func notifications(t *testing.T, s storage.Store, ops string) []json.RawMessage {
	t.Helper()
	ds, err := s.DeliveryList(t.Context(), storage.DeliveryListParams{Filter: storage.DeliveryFilter{EndpointID: ops}})
	if err != nil {
		t.Fatal(err)
	}
	var out []json.RawMessage
	for _, d := range ds {
		ev, err := s.EventGet(t.Context(), d.EventID)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != event.TypeEndpointDisabled || ev.EndpointID != ops {
			t.Fatalf("the operator endpoint got a %s event addressed to %q", ev.Type, ev.EndpointID)
		}
		out = append(out, ev.Payload)
	}
	return out
}

func TestHealthDisablesEndpointsFailingTooLong(t *testing.T) {
	for name, stores := range sharedStores(t, 1) {
		t.Run(name, func(t *testing.T) {
			s := stores[0]
			now := time.Now().UTC()
			ops := newEndpoint(t, s, "https://ops.example.com/hook", func(e *storage.Endpoint) { e.EventTypes = []string{"none"} })
			long := newEndpoint(t, s, "https://long.example.com/hook?token=s3cret-in-the-url", func(e *storage.Endpoint) { e.EventTypes = []string{"none"} })
			short := newEndpoint(t, s, "https://short.example.com/hook", func(e *storage.Endpoint) { e.EventTypes = []string{"none"} })
			failAt(t, s, long, now.Add(-2*time.Hour))
			failAt(t, s, short, now.Add(-10*time.Minute))

			var disabled []string
			h := &fleet.EndpointHealth{Store: s, DisableAfterFailing: time.Hour, OperatorEndpoint: ops.ID, Log: e2etest.Logger(),
				Disabled: func(_ context.Context, reason string) { disabled = append(disabled, reason) }}
			n, err := h.Check(t.Context())
			if err != nil || n != 1 {
				t.Fatalf("Check = %d, %v; want the one endpoint failing for 2h disabled", n, err)
			}
			for _, tc := range []struct {
				ep     storage.Endpoint
				reason storage.DisabledReason
			}{{long, storage.DisabledFailing}, {short, ""}, {ops, ""}} {
				got, err := s.EndpointGet(t.Context(), tc.ep.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.DisabledReason != tc.reason || (got.DisabledAt != nil) != (tc.reason != "") {
					t.Fatalf("endpoint %s: disabled %v reason %q, want reason %q", got.URL, got.DisabledAt, got.DisabledReason, tc.reason)
				}
			}
			notes := notifications(t, s, ops.ID)
			if len(notes) != 1 || len(disabled) != 1 || disabled[0] != string(storage.DisabledFailing) {
				t.Fatalf("notifications %d, disables counted %v; want one each", len(notes), disabled)
			}
			var body struct {
				Endpoint struct {
					ID, Reason   string
					FailingSince *time.Time `json:"failing_since"`
				}
			}
			if err := json.Unmarshal(notes[0], &body); err != nil {
				t.Fatal(err)
			}
			if body.Endpoint.ID != long.ID || body.Endpoint.Reason != string(storage.DisabledFailing) || body.Endpoint.FailingSince == nil {
				t.Fatalf("notification = %s", notes[0])
			}
			if strings.Contains(string(notes[0]), "s3cret-in-the-url") {
				t.Fatalf("the notification carries the token in the endpoint's URL: %s", notes[0])
			}
			if n, err := h.Check(t.Context()); err != nil || n != 0 {
				t.Fatalf("a second Check = %d, %v; want nothing more to do", n, err)
			}
			if len(notifications(t, s, ops.ID)) != 1 {
				t.Fatal("a second Check told the operator again")
			}
		})
	}
}

// However many processes see the 410 at once, the endpoint is disabled
// once and the operator is told once.
func TestDisablingIsOnceAcrossProcesses(t *testing.T) {
	const procs = 6
	for name, stores := range sharedStores(t, procs) {
		t.Run(name, func(t *testing.T) {
			ops := newEndpoint(t, stores[0], "https://ops.example.com/hook")
			ep := newEndpoint(t, stores[0], "https://gone.example.com/hook")
			var counted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for _, s := range stores {
				h := &fleet.EndpointHealth{Store: s, OperatorEndpoint: ops.ID, Log: e2etest.Logger(),
					Disabled: func(context.Context, string) { counted.Add(1) }}
				wg.Go(func() {
					<-start
					if err := h.DisableEndpoint(t.Context(), ep.ID, storage.DisabledGone); err != nil {
						t.Error(err)
					}
				})
			}
			close(start)
			wg.Wait()
			if n := len(notifications(t, stores[0], ops.ID)); n != 1 || counted.Load() != 1 {
				t.Fatalf("%d processes disabling at once: %d notifications, %d disables counted; want 1 and 1", procs, n, counted.Load())
			}
		})
	}
}
