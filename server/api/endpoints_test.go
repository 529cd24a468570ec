package api_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/storage"
)

// storedSecrets reads an endpoint's secret values straight from the store.
func storedSecrets(t *testing.T, s storage.Store, id string) []storage.Secret {
	t.Helper()
	e, err := s.EndpointGet(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return e.Secrets
}

func noSecretIn(t *testing.T, what string, raw []byte, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(string(raw), s) {
			t.Fatalf("%s shows a signing secret: %s", what, raw)
		}
	}
	if strings.Contains(string(raw), "whsec_") {
		t.Fatalf("%s shows something secret-shaped: %s", what, raw)
	}
}

// TestEndpointURLSecretsAreMasked: every answer shows an endpoint's URL
// with its credentials and secret-named parameters hidden, says what it
// hid, and the stored URL, the one delivery uses, stays the real one: a
// masked URL sent back keeps it, and one edited around the mask is refused.
func TestEndpointURLSecretsAreMasked(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		const (
			real      = "http://127.0.0.1:9/hook?token=SECRET123&x=1"
			shown     = "http://127.0.0.1:9/hook?token=[redacted]&x=1"
			withCreds = "http://alice:pw@127.0.0.1:9/hook?token=SECRET123&x=1"
		)
		hidden := func(what string, r response, wantURL string, wantMasked ...string) {
			t.Helper()
			// Not "pw" alone: a rotation's new random secret may hold it.
			for _, leak := range []string{"SECRET123", "alice", ":pw", "pw@"} {
				if strings.Contains(string(r.raw), leak) {
					t.Errorf("%s shows %q: %s", what, leak, r.raw)
				}
			}
			if !strings.Contains(string(r.raw), "x=1") {
				t.Errorf("%s hides x=1, which is no secret: %s", what, r.raw)
			}
			ep := r.body
			if eps, ok := r.body["endpoints"].([]any); ok && len(eps) == 1 {
				ep, _ = eps[0].(map[string]any)
			}
			if ep["url"] != wantURL || fmt.Sprint(ep["url_masked"]) != fmt.Sprint(wantMasked) {
				t.Errorf("%s: url %v, url_masked %v; want %q, %q", what, ep["url"], ep["url_masked"], wantURL, wantMasked)
			}
		}
		created := f.admin("POST", "/v1/endpoints", map[string]any{"url": real}).must(t, http.StatusCreated)
		id := created.str("id")
		hidden("the create answer", created, shown, "query:token")
		storedURL := func() string {
			t.Helper()
			e, err := f.store.EndpointGet(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			return e.URL
		}
		if got := storedURL(); got != real {
			t.Fatalf("stored URL %q, want the real one %q", got, real)
		}

		// A client that PATCHes back what it read changes nothing.
		back := f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{"url": shown, "description": "read, then written back"}).must(t, http.StatusOK)
		hidden("the PATCH answer", back, shown, "query:token")
		if got := storedURL(); got != real {
			t.Fatalf("PATCHing the masked URL back stored %q; want the real URL kept", got)
		}
		// A masked URL edited elsewhere cannot keep the secret it hides,
		// and must not store the mask: it is refused, on create too.
		for _, r := range []response{
			f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{"url": "http://127.0.0.1:9/other?token=[redacted]&x=1"}),
			f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{"url": "http://127.0.0.1:9/hook?token=%5Bredacted%5D&x=2"}),
			f.admin("POST", "/v1/endpoints", map[string]any{"url": shown}),
		} {
			r.must(t, http.StatusUnprocessableEntity)
			if code, msg := r.errorCode(t); code != "invalid_url" || !strings.Contains(msg, "[redacted]") || !strings.Contains(msg, "send the real URL") {
				t.Errorf("a masked URL sent back: %s %s", code, msg)
			}
		}
		if got := storedURL(); got != real {
			t.Fatalf("a refused PATCH stored %q", got)
		}
		// A new real URL replaces the old one.
		moved := f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{"url": "http://127.0.0.1:9/new?api_key=NEWSECRET&x=1"}).must(t, http.StatusOK)
		hidden("the PATCH answer", moved, "http://127.0.0.1:9/new?api_key=[redacted]&x=1", "query:api_key")
		if got := storedURL(); got != "http://127.0.0.1:9/new?api_key=NEWSECRET&x=1" {
			t.Fatalf("stored URL after a PATCH with a new URL: %q", got)
		}

		// The API refuses credentials in a URL, but a row may still hold
		// them (written before that rule, or straight into the database).
		e, err := f.store.EndpointGet(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		e.URL = withCreds
		if _, err := f.store.EndpointUpdate(t.Context(), e); err != nil {
			t.Fatal(err)
		}
		const both = "http://[redacted]@127.0.0.1:9/hook?token=[redacted]&x=1"
		hidden("GET /v1/endpoints/{id}", f.admin("GET", "/v1/endpoints/"+id, nil).must(t, http.StatusOK), both, "userinfo", "query:token")
		hidden("GET /v1/endpoints", f.admin("GET", "/v1/endpoints", nil).must(t, http.StatusOK), both, "userinfo", "query:token")
		hidden("disable", f.admin("POST", "/v1/endpoints/"+id+"/disable", nil).must(t, http.StatusOK), both, "userinfo", "query:token")
		hidden("rotate-secret", f.admin("POST", "/v1/endpoints/"+id+"/rotate-secret", nil).must(t, http.StatusOK), both, "userinfo", "query:token")
		if logs := f.logs.String(); strings.Contains(logs, "SECRET") || strings.Contains(logs, ":pw@") {
			t.Errorf("the API's log shows a URL's secret:\n%s", logs)
		}
	})
}

func TestEndpointLifecycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const grace = 2 * time.Hour
		f := newFixture(t, b, func(o *api.Options) { o.SecretRotationGrace = grace })

		created := f.admin("POST", "/v1/endpoints", map[string]any{
			"url":         "https://hooks.example.com/in?token=abc",
			"event_types": []string{"submission.received"},
			"form_ids":    []string{"contact", "contact", "signup"},
			"description": "CRM",
		}).must(t, http.StatusCreated)
		id, secret := created.str("id"), created.str("secret")
		if created.header.Get("Location") != "/v1/endpoints/"+id {
			t.Fatalf("Location = %q", created.header.Get("Location"))
		}
		if created.header.Get("Cache-Control") != "no-store" {
			t.Fatal("the answer carrying the secret may be cached")
		}
		if key, err := webhook.ParseSecret(secret); err != nil || len(key) != 32 {
			t.Fatalf("secret %d bytes, %v; want a whsec_ secret of 32 random bytes", len(key), err)
		}
		if got := storedSecrets(t, f.store, id); len(got) != 1 || got[0].Reveal() != secret || got[0].ExpiresAt != nil {
			t.Fatal("the stored secret is not the one shown")
		}
		if created.str("transport") != "http" || created.str("description") != "CRM" || created.body["disabled"] != false {
			t.Fatalf("created endpoint: %s", created.raw)
		}
		if fmt.Sprint(created.list("form_ids")) != "[contact signup]" {
			t.Fatalf("form_ids = %v, want the repeat dropped", created.list("form_ids"))
		}

		got := f.admin("GET", "/v1/endpoints/"+id, nil).must(t, http.StatusOK)
		noSecretIn(t, "GET endpoint", got.raw, secret)
		if _, ok := got.body["secret"]; ok || len(got.list("secrets")) != 1 || got.str("url") != "https://hooks.example.com/in?token=[redacted]" {
			t.Fatalf("GET endpoint: %s", got.raw)
		}
		list := f.admin("GET", "/v1/endpoints", nil).must(t, http.StatusOK)
		noSecretIn(t, "endpoint list", list.raw, secret)
		if len(list.list("endpoints")) != 1 {
			t.Fatalf("list: %s", list.raw)
		}

		t.Run("PATCH changes only the fields it names", func(t *testing.T) {
			r := f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{"description": "CRM (prod)", "form_ids": []string{}}).must(t, http.StatusOK)
			noSecretIn(t, "PATCH answer", r.raw, secret)
			if r.str("description") != "CRM (prod)" || len(r.list("form_ids")) != 0 || r.str("url") != got.str("url") ||
				fmt.Sprint(r.list("event_types")) != "[submission.received]" {
				t.Fatalf("after PATCH: %s", r.raw)
			}
			if s := storedSecrets(t, f.store, id); len(s) != 1 || s[0].Reveal() != secret {
				t.Fatal("PATCH changed the secrets")
			}
			same := f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{}).must(t, http.StatusOK)
			if same.str("updated_at") != r.str("updated_at") {
				t.Fatal("an empty PATCH wrote the endpoint")
			}
			moved := f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{"url": "https://other.example.com/hook"}).must(t, http.StatusOK)
			if moved.str("url") != "https://other.example.com/hook" {
				t.Fatalf("after PATCH url: %s", moved.raw)
			}
		})

		t.Run("disable holds new deliveries and enable releases them; both are idempotent", func(t *testing.T) {
			d1 := f.admin("POST", "/v1/endpoints/"+id+"/disable", nil).must(t, http.StatusOK)
			if d1.body["disabled"] != true || d1.str("disabled_at") == "" {
				t.Fatalf("disable: %s", d1.raw)
			}
			d2 := f.admin("POST", "/v1/endpoints/"+id+"/disable", "{}").must(t, http.StatusOK)
			if d2.str("disabled_at") != d1.str("disabled_at") {
				t.Fatal("disabling again moved disabled_at")
			}
			r := f.submit("contact", map[string]any{"a": 1}).must(t, http.StatusAccepted)
			if len(r.list("deliveries")) != 1 {
				t.Fatalf("a disabled endpoint's delivery was not kept: %s", r.raw)
			}
			held := fmt.Sprint(r.list("deliveries")[0])
			if d, err := f.store.DeliveryGet(context.Background(), held); err != nil || !d.Held {
				t.Fatalf("delivery %s to a disabled endpoint: %+v, %v; want it held", held, d, err)
			}
			e := f.admin("POST", "/v1/endpoints/"+id+"/enable", nil).must(t, http.StatusOK)
			if e.body["disabled"] != false || e.body["disabled_at"] != nil {
				t.Fatalf("enable: %s", e.raw)
			}
			f.admin("POST", "/v1/endpoints/"+id+"/enable", nil).must(t, http.StatusOK)
			if d, err := f.store.DeliveryGet(context.Background(), held); err != nil || d.Held {
				t.Fatalf("delivery %s after enabling: %+v, %v; want it released", held, d, err)
			}
			if r := f.submit("contact", map[string]any{"a": 2}).must(t, http.StatusAccepted); len(r.list("deliveries")) != 1 {
				t.Fatalf("an enabled endpoint got no delivery: %s", r.raw)
			}
		})

		t.Run("rotate-secret shows the new secret once and keeps the old one signing for the grace", func(t *testing.T) {
			start := time.Now().Truncate(time.Millisecond)
			r := f.admin("POST", "/v1/endpoints/"+id+"/rotate-secret", nil).must(t, http.StatusOK)
			second := r.str("secret")
			if !strings.HasPrefix(second, "whsec_") || second == secret {
				t.Fatalf("rotate answered secret %q", second)
			}
			expires, err := time.Parse(time.RFC3339Nano, r.str("previous_secrets_expire_at"))
			if err != nil || expires.Before(start.Add(grace)) || expires.After(time.Now().Add(grace)) {
				t.Fatalf("previous_secrets_expire_at = %q, want now + %s", r.str("previous_secrets_expire_at"), grace)
			}
			s := storedSecrets(t, f.store, id)
			if len(s) != 2 || s[0].Reveal() != second || s[0].ExpiresAt != nil || s[1].Reveal() != secret || !s[1].ExpiresAt.Equal(expires) {
				t.Fatalf("stored secrets after rotation: %d, want the new one and the old one expiring at %s", len(s), expires)
			}
			if v := r.list("secrets"); len(v) != 2 {
				t.Fatalf("rotate answer lists %d secrets, want 2: %s", len(v), r.raw)
			}
			g := f.admin("GET", "/v1/endpoints/"+id, nil).must(t, http.StatusOK)
			noSecretIn(t, "GET after rotation", g.raw, secret, second)

			// A second rotation keeps the first old secret's earlier expiry.
			third := f.admin("POST", "/v1/endpoints/"+id+"/rotate-secret", "").must(t, http.StatusOK).str("secret")
			s = storedSecrets(t, f.store, id)
			if len(s) != 3 || s[0].Reveal() != third || s[2].Reveal() != secret || !s[2].ExpiresAt.Equal(expires) || s[1].ExpiresAt.Before(expires) {
				t.Fatal("a second rotation moved the first rotated-out secret's expiry or lost a secret")
			}
			for _, v := range []string{secret, second, third} {
				if strings.Contains(f.logs.String(), v) {
					t.Fatal("a secret reached the log")
				}
			}
		})
	})
}

func TestRotationDropsExpiredSecrets(t *testing.T) {
	f := newFixture(t, backends["sqlite"], func(o *api.Options) { o.SecretRotationGrace = time.Millisecond })
	id, first := f.createEndpoint(map[string]any{"url": "https://hooks.example.com/in"})
	second := f.admin("POST", "/v1/endpoints/"+id+"/rotate-secret", nil).must(t, http.StatusOK).str("secret")
	time.Sleep(20 * time.Millisecond) // past the first secret's grace
	third := f.admin("POST", "/v1/endpoints/"+id+"/rotate-secret", nil).must(t, http.StatusOK).str("secret")
	var values []string
	for _, s := range storedSecrets(t, f.store, id) {
		values = append(values, s.Reveal())
	}
	if !slices.Equal(values, []string{third, second}) || slices.Contains(values, first) {
		t.Fatal("the expired secret was kept, or a live one dropped")
	}
	time.Sleep(20 * time.Millisecond) // past the second secret's grace
	if n := len(f.admin("GET", "/v1/endpoints/"+id, nil).must(t, http.StatusOK).list("secrets")); n != 1 {
		t.Fatalf("%d secrets shown as signing, want only the current one", n)
	}
}

// Rotations and PATCHes racing on one endpoint must not lose each other's
// change: every secret a rotation handed out must still be stored. As
// many rotations as leave the endpoint at its cap of live secrets, so
// that none is retired and a missing one can only be a lost update.
func TestConcurrentEndpointChangesLoseNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		id, first := f.createEndpoint(map[string]any{"url": "https://hooks.example.com/in"})
		const n = endpoint.MaxLiveSecrets - 1
		secrets := make(chan string, n)
		var wg sync.WaitGroup
		for i := range 8 {
			if i < n {
				wg.Go(func() {
					r := f.admin("POST", "/v1/endpoints/"+id+"/rotate-secret", nil)
					if r.status == http.StatusOK {
						secrets <- r.str("secret")
					}
				})
			}
			wg.Go(func() {
				f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{"description": fmt.Sprintf("edit %d", i)})
			})
		}
		wg.Wait()
		close(secrets)
		stored := map[string]bool{}
		for _, s := range storedSecrets(t, f.store, id) {
			stored[s.Reveal()] = true
		}
		handed := 0
		for s := range secrets {
			handed++
			if !stored[s] {
				t.Fatal("a rotation's secret was lost to a concurrent change")
			}
		}
		if handed != n || !stored[first] || len(stored) != n+1 {
			t.Fatalf("%d rotations answered, %d secrets stored; want %d and %d", handed, len(stored), n, n+1)
		}
	})
}
