package endpoint

import (
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite/sqlitetest"
)

// newSchemeEndpoint makes a migrated SQLite store with one endpoint signed
// by a fresh secret of scheme, which it returns too.
func newSchemeEndpoint(t *testing.T, scheme webhook.Scheme) (storage.Store, storage.Endpoint, string) {
	t.Helper()
	ctx := t.Context()
	s := sqlitetest.Open(t)
	if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	first, err := scheme.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: "https://receiver.example/",
		Secrets: []storage.Secret{storage.NewSecret(first, nil)}}})
	if err != nil {
		t.Fatal(err)
	}
	return s, ep.Endpoint, first
}

func TestRotateSecretKeepsTheEndpointsScheme(t *testing.T) {
	t.Parallel()
	for _, scheme := range webhook.Schemes() {
		t.Run(string(scheme), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s, ep, _ := newSchemeEndpoint(t, scheme)
			now := time.Now()
			var shown []string
			for range 2 {
				rot, err := RotateSecret(ctx, s, ep.ID, time.Hour, now, nil, nil)
				if err != nil {
					t.Fatalf("RotateSecret: %v", err)
				}
				if webhook.KeyScheme(rot.Secret) != scheme || Scheme(rot.Endpoint) != scheme {
					t.Fatalf("a %s endpoint was rotated to a %s secret (endpoint now %s)", scheme, webhook.KeyScheme(rot.Secret), Scheme(rot.Endpoint))
				}
				if rot.Endpoint.Secrets[0].Reveal() != rot.Secret {
					t.Fatal("the new secret does not sign first")
				}
				shown = append(shown, rot.Secret)
				ep = rot.Endpoint
			}
			if len(ep.Secrets) != 3 || shown[0] == shown[1] {
				t.Fatalf("%d secrets after two rotations, want 3 distinct", len(ep.Secrets))
			}

			pks := PublicKeys(ep, now)
			if scheme == webhook.SchemeV1 {
				if len(pks) != 0 {
					t.Fatalf("a v1 endpoint has public keys %v", pks)
				}
				return
			}
			if len(pks) != 3 {
				t.Fatalf("%d public keys, want one per active key", len(pks))
			}
			for i, sec := range ep.Secrets {
				want, err := webhook.PublicKey(sec.Reveal())
				if err != nil || pks[i].Key != want || (pks[i].ExpiresAt == nil) != (sec.ExpiresAt == nil) {
					t.Fatalf("public key %d = %+v, want %s of the secret in that place", i, pks[i], want)
				}
				if !strings.HasPrefix(pks[i].Key, "whpk_") {
					t.Fatalf("public key %q", pks[i].Key)
				}
			}
			if later := PublicKeys(ep, now.Add(2*time.Hour)); len(later) != 1 || later[0].Key != pks[0].Key {
				t.Fatalf("after the grace, public keys %v; want only the current one", later)
			}
		})
	}
}

func TestScheme(t *testing.T) {
	t.Parallel()
	past := time.Now().Add(-time.Hour)
	v1, _ := webhook.SchemeV1.NewKey()
	v1a, _ := webhook.SchemeV1a.NewKey()
	for _, tc := range []struct {
		name    string
		secrets []storage.Secret
		want    webhook.Scheme
	}{
		{"no secrets", nil, webhook.SchemeV1},
		{"a whsec_ secret", []storage.Secret{storage.NewSecret(v1, nil)}, webhook.SchemeV1},
		{"a whsk_ key", []storage.Secret{storage.NewSecret(v1a, nil)}, webhook.SchemeV1a},
		{"the current one decides, wherever it stands", []storage.Secret{storage.NewSecret(v1, &past), storage.NewSecret(v1a, nil)}, webhook.SchemeV1a},
		{"all expired: the first", []storage.Secret{storage.NewSecret(v1a, &past), storage.NewSecret(v1, &past)}, webhook.SchemeV1a},
	} {
		if got := Scheme(storage.Endpoint{Secrets: tc.secrets}); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
