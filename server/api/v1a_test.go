package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/api"
)

func TestV1aEndpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, func(o *api.Options) { o.SecretRotationGrace = time.Hour })
		created := f.admin("POST", "/v1/endpoints", map[string]any{
			"url": "https://hooks.example.com/in", "signature_scheme": "v1a",
		}).must(t, http.StatusCreated)
		id, sk := created.str("id"), created.str("secret")
		// The private key is shown exactly where a whsec_ secret would be:
		// in the answer to creation, once.
		pk, err := webhook.PublicKey(sk)
		if err != nil || !strings.HasPrefix(sk, "whsk_") {
			t.Fatalf("created a v1a endpoint with secret %.5s…: %v", sk, err)
		}
		if got := storedSecrets(t, f.store, id); len(got) != 1 || got[0].Reveal() != sk {
			t.Fatal("the stored key is not the one shown")
		}
		if created.str("signature_scheme") != "v1a" || len(created.list("public_keys")) != 1 || created.list("public_keys")[0] != pk {
			t.Fatalf("created: %s", created.raw)
		}

		for _, path := range []string{"/v1/endpoints/" + id, "/v1/endpoints"} {
			got := f.admin("GET", path, nil).must(t, http.StatusOK)
			if strings.Contains(string(got.raw), "whsk_") || strings.Contains(string(got.raw), sk[5:30]) {
				t.Fatalf("GET %s shows the signing key: %s", path, got.raw)
			}
			if !strings.Contains(string(got.raw), `"signature_scheme":"v1a"`) || !strings.Contains(string(got.raw), `"public_keys":["`+pk+`"]`) {
				t.Fatalf("GET %s lacks the scheme or the public key: %s", path, got.raw)
			}
		}

		rot := f.admin("POST", "/v1/endpoints/"+id+"/rotate-secret", nil).must(t, http.StatusOK)
		newSK := rot.str("secret")
		newPK, err := webhook.PublicKey(newSK)
		if err != nil || newSK == sk {
			t.Fatalf("rotation answered secret %.5s…: %v; want a new whsk_ key", newSK, err)
		}
		keys := rot.list("public_keys")
		if len(keys) != 2 || keys[0] != newPK || keys[1] != pk || rot.str("previous_secrets_expire_at") == "" {
			t.Fatalf("after a rotation: %s", rot.raw)
		}
		secrets := rot.list("secrets")
		if len(secrets) != 2 || secrets[0].(map[string]any)["public_key"] != newPK || secrets[1].(map[string]any)["expires_at"] == nil {
			t.Fatalf("secrets after a rotation: %s", rot.raw)
		}
		got := f.admin("GET", "/v1/endpoints/"+id, nil).must(t, http.StatusOK)
		if strings.Contains(string(got.raw), "whsk_") || len(got.list("public_keys")) != 2 {
			t.Fatalf("GET after a rotation: %s", got.raw)
		}
	})
}

func TestSignatureSchemeOnCreate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		for _, scheme := range []string{"", "v1"} {
			body := map[string]any{"url": "https://hooks.example.com/in"}
			if scheme != "" {
				body["signature_scheme"] = scheme
			}
			r := f.admin("POST", "/v1/endpoints", body).must(t, http.StatusCreated)
			if !strings.HasPrefix(r.str("secret"), "whsec_") || r.str("signature_scheme") != "v1" {
				t.Fatalf("signature_scheme %q: %s", scheme, r.raw)
			}
			if _, ok := r.body["public_keys"]; ok {
				t.Fatalf("a v1 endpoint shows public keys: %s", r.raw)
			}
		}
		before := f.count("webhook_endpoints")
		for _, bad := range []any{"v1A", "ed25519", "v2", " v1a", 1} {
			r := f.admin("POST", "/v1/endpoints", map[string]any{"url": "https://hooks.example.com/in", "signature_scheme": bad})
			r.must(t, http.StatusBadRequest)
			code, msg := r.errorCode(t)
			if _, isString := bad.(string); isString && (code != "invalid_signature_scheme" || !strings.Contains(msg, `"v1"`) || !strings.Contains(msg, `"v1a"`)) {
				t.Fatalf("signature_scheme %q: %s %s; want invalid_signature_scheme naming v1 and v1a", bad, code, msg)
			}
		}
		if f.count("webhook_endpoints") != before {
			t.Fatal("a refused create wrote an endpoint")
		}
		id, _ := f.createEndpoint(map[string]any{"url": "https://hooks.example.com/in"})
		r := f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{"signature_scheme": "v1a"}).must(t, http.StatusBadRequest)
		if code, msg := r.errorCode(t); code != "unknown_field" || !strings.Contains(msg, "chosen when the endpoint is created") {
			t.Fatalf("PATCH signature_scheme: %s %s", code, msg)
		}
	})
}
