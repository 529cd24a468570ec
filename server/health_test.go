package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite"
)

// Endpoint health is opt-in. With the defaults a receiver's 410 Gone is an
// ordinary failed request, as the http transport classifies it (permanent,
// like any other 4xx): the delivery fails and the endpoint stays enabled,
// as the delivery-semantics page has it. With endpoints.disable_on_gone the
// endpoint is disabled and the delivery kept, pending and held.
func TestGoneDisablesOnlyWhenAskedTo(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("endpoints.disable_on_gone=%v", on), func(t *testing.T) {
			t.Parallel()
			dbPath := filepath.Join(t.TempDir(), "hymical.db")
			// The server and the test's own store share a key, which
			// the database records before the endpoint is written.
			key, box := secretsKey(t)
			direct, err := sqlite.Open(t.Context(), dbPath, storage.WithSecretBox(box))
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			if _, err := direct.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
				t.Fatal(err)
			}
			if _, err := direct.SecretsEncrypt(t.Context(), box); err != nil {
				t.Fatal(err)
			}
			recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) }))
			defer recv.Close()
			secret, err := webhook.NewSecret()
			if err != nil {
				t.Fatal(err)
			}
			ep, err := direct.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: recv.URL + "/hook",
				Secrets: []storage.Secret{storage.NewSecret(secret, nil)}}})
			if err != nil {
				t.Fatal(err)
			}

			cfg := testConfig("sqlite:" + dbPath)
			cfg.Secrets.Key = config.Secret(key.Text())
			cfg.Console.Enabled = false
			cfg.Endpoints.DisableOnGone = on
			start(t, cfg)
			ev, err := event.Submission("form_1", json.RawMessage(`{"email":"a@example.com"}`), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			res, err := direct.EventCreate(t.Context(), ev)
			if err != nil || len(res.Deliveries) != 1 {
				t.Fatalf("submit: %+v, %v", res, err)
			}
			id := res.Deliveries[0].ID
			var d storage.Delivery
			testwait.For(t, 20*time.Second, func() error {
				d, err = direct.DeliveryGet(t.Context(), id)
				if err != nil {
					t.Fatal(err)
				}
				if !d.State.Terminal() && !d.Held {
					return fmt.Errorf("the 410 is not recorded: %+v", d)
				}
				return nil
			})
			as, err := direct.AttemptList(t.Context(), id)
			if err != nil || len(as) != 1 || as[0].HTTPStatus != http.StatusGone {
				t.Fatalf("attempts: %+v, %v; want one, a 410", as, err)
			}
			got, err := direct.EndpointGet(t.Context(), ep.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !on {
				if d.State != storage.StateFailed || as[0].Outcome != storage.OutcomePermanent || got.DisabledAt != nil {
					t.Fatalf("with the defaults: delivery %s, attempt %s, endpoint disabled at %v; want failed, permanent, enabled",
						d.State, as[0].Outcome, got.DisabledAt)
				}
				return
			}
			if d.State != storage.StatePending || !d.Held || as[0].Outcome != storage.OutcomeRetryable ||
				got.DisabledAt == nil || got.DisabledReason != storage.DisabledGone {
				t.Fatalf("with disable_on_gone: delivery %s held %v, attempt %s, endpoint disabled at %v (%q); want pending, held, retryable, disabled for gone",
					d.State, d.Held, as[0].Outcome, got.DisabledAt, got.DisabledReason)
			}
		})
	}
}
