package storagetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/secretbox"
)

// headerValue is the credential the suite's custom headers carry: found in
// a raw row, it means the headers were not sealed.
const headerValue = "Bearer hdr-credential-7f3a9c"

func headerEndpoint(id string) storage.Endpoint {
	e := secretEndpoint(id, secretV1)
	e.Headers = []storage.Header{
		storage.NewHeader("Authorization", headerValue),
		storage.NewHeader("X-Tenant", "acme"),
		storage.NewHeader("x-a", "first-by-order"),
	}
	return e
}

func rawHeaders(t *testing.T, db Database, id string) string {
	t.Helper()
	raw, err := db.QueryString(t.Context(), fmt.Sprintf("SELECT CAST(headers AS TEXT) FROM webhook_endpoints WHERE id = '%s'", id))
	if err != nil {
		t.Fatalf("read the raw headers of %s: %v", id, err)
	}
	return raw
}

// wantHeaders fails unless e's headers are want, as "Name: value", in order.
func wantHeaders(t *testing.T, what string, e storage.Endpoint, want ...string) {
	t.Helper()
	got := make([]string, len(e.Headers))
	for i, h := range e.Headers {
		got[i] = h.Name + ": " + h.Reveal()
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || e.Headers == nil {
		t.Fatalf("%s: endpoint %s headers = %q, want %q", what, e.ID, got, want)
	}
}

func testHeaders(t *testing.T, b Backend) {
	all := []string{"Authorization: " + headerValue, "X-Tenant: acme", "x-a: first-by-order"}
	for _, tc := range []struct {
		name string
		box  bool
	}{{"in plaintext", false}, {"sealed", true}} {
		t.Run("custom headers round-trip in order, "+tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var (
				s   storage.Store
				db  Database
				box *secretbox.Box
			)
			if tc.box {
				box = newSecretBox(t)
				s, db = encryptedStore(t, b, box)
			} else {
				db = b.NewDatabase(t)
				s = db.Open(t)
				if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
					t.Fatal(err)
				}
			}
			created, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: headerEndpoint("ep_hdr")})
			if err != nil {
				t.Fatal(err)
			}
			wantHeaders(t, "create", created.Endpoint, all...)
			bare, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: secretEndpoint("ep_bare", secretV1)})
			if err != nil {
				t.Fatal(err)
			}
			wantHeaders(t, "create without headers", bare.Endpoint)
			if raw := rawHeaders(t, db, "ep_hdr"); tc.box {
				if strings.Contains(raw, headerValue) || strings.Contains(raw, "acme") || strings.Contains(raw, "Authorization") {
					t.Fatalf("the raw headers hold a name or value in plaintext: %s", raw)
				}
				if !strings.Contains(raw, secretbox.Header(box.KeyID())) {
					t.Fatalf("the raw headers are not sealed under key %s: %s", box.KeyID(), raw)
				}
				wantSealedUnder(t, db, "ep_hdr", box)
			} else if !strings.Contains(raw, headerValue) {
				t.Fatalf("the raw headers without a key should be plaintext JSON: %s", raw)
			}

			got, err := s.EndpointGet(ctx, "ep_hdr")
			if err != nil {
				t.Fatal(err)
			}
			wantHeaders(t, "get", got, all...)
			got.Headers = []storage.Header{storage.NewHeader("X-Tenant", "globex"), storage.NewHeader("Authorization", "Basic other")}
			updated, err := s.EndpointUpdate(ctx, got)
			if err != nil {
				t.Fatal(err)
			}
			wantHeaders(t, "update", updated, "X-Tenant: globex", "Authorization: Basic other")
			list, err := s.EndpointList(ctx)
			if err != nil || len(list) != 2 {
				t.Fatalf("EndpointList = %d endpoints, %v", len(list), err)
			}
			wantHeaders(t, "list", list[1], "X-Tenant: globex", "Authorization: Basic other")
			page, err := s.EndpointListPage(ctx, storage.EndpointListParams{})
			if err != nil || len(page) != 2 {
				t.Fatalf("EndpointListPage = %d endpoints, %v", len(page), err)
			}
			wantHeaders(t, "list page", page[0], "X-Tenant: globex", "Authorization: Basic other")

			// The worker's read: a claim carries the endpoint, headers opened.
			sub := storage.NewID("sub")
			if _, err := s.EventCreate(ctx, storage.Event{Type: "submission.received", FormID: "form_1", SubmissionID: sub, Payload: submissionPayload(sub, "form_1")}); err != nil {
				t.Fatal(err)
			}
			claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 5, Lease: lease, Now: time.Now().Add(time.Minute)})
			if err != nil || len(claims) != 2 {
				t.Fatalf("DeliveryClaim = %d claims, %v", len(claims), err)
			}
			for _, c := range claims {
				if c.Endpoint.ID == "ep_hdr" {
					wantHeaders(t, "claim", c.Endpoint, "X-Tenant: globex", "Authorization: Basic other")
				}
			}

			updated.Headers = nil
			cleared, err := s.EndpointUpdate(ctx, updated)
			if err != nil {
				t.Fatal(err)
			}
			wantHeaders(t, "update to none", cleared)
			if raw := rawHeaders(t, db, "ep_hdr"); raw != "[]" {
				t.Fatalf("the raw headers of an endpoint without any are %s, want []", raw)
			}
		})
	}

	t.Run("header names are unique ignoring case", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, b)
		e := secretEndpoint("ep_dup", secretV1)
		e.Headers = []storage.Header{storage.NewHeader("X-Key", headerValue), storage.NewHeader("x-key", "two")}
		_, err := s.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: e})
		if !errors.Is(err, storage.ErrInvalid) || !strings.Contains(err.Error(), "x-key") {
			t.Fatalf("create with a name given twice: err = %v, want ErrInvalid naming it", err)
		}
		if strings.Contains(err.Error(), headerValue) {
			t.Fatalf("the error holds the header's value: %v", err)
		}
	})

	t.Run("encrypting the secrets seals the headers, and the database refuses them in plaintext", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		db := b.NewDatabase(t)
		plain := db.Open(t)
		if _, err := plain.Migrate(ctx, storage.MigrateParams{}); err != nil {
			t.Fatal(err)
		}
		if _, err := plain.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: headerEndpoint("ep_old")}); err != nil {
			t.Fatal(err)
		}
		box := newSecretBox(t)
		sealed := db.Open(t, storage.WithSecretBox(box))
		if _, err := keeper(t, sealed).SecretsEncrypt(ctx, box); err != nil {
			t.Fatal(err)
		}
		if raw := rawHeaders(t, db, "ep_old"); strings.Contains(raw, headerValue) || !strings.Contains(raw, secretbox.Header(box.KeyID())) {
			t.Fatalf("after SecretsEncrypt the raw headers are %s, want them sealed under %s", raw, box.KeyID())
		}
		got, err := sealed.EndpointGet(ctx, "ep_old")
		if err != nil {
			t.Fatal(err)
		}
		wantHeaders(t, "get after encrypt", got, all...)
		if err := db.Exec(ctx, `UPDATE webhook_endpoints SET headers = '[{"name":"X-Leak","value":"plain"}]' WHERE id = 'ep_old'`); err == nil {
			t.Fatal("the database took plaintext headers while a secrets key is recorded")
		}
		// A row sealed for another endpoint does not open here.
		if _, err := sealed.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: secretEndpoint("ep_other", secretV1)}); err != nil {
			t.Fatal(err)
		}
		if err := db.Exec(ctx, `UPDATE webhook_endpoints SET headers = (SELECT headers FROM webhook_endpoints WHERE id = 'ep_old') WHERE id = 'ep_other'`); err != nil {
			t.Fatal(err)
		}
		_, err = sealed.EndpointGet(ctx, "ep_other")
		if !errors.Is(err, storage.ErrSecretsKey) || strings.Contains(err.Error(), headerValue) {
			t.Fatalf("moved headers: err = %v, want ErrSecretsKey without the value", err)
		}
	})
}
