package console_test

import (
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/storage"
)

func TestV1aEndpointShowsSchemeAndPublicKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	sk, pk, err := webhook.NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := f.store.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{
		Transport: "http", URL: "https://hooks.example.com/v1a", Config: map[string]string{},
		Secrets: []storage.Secret{storage.NewSecret(sk, nil)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := f.login("alice")
	// The template escapes "+" in base64; a key is found in either spelling.
	esc := func(k string) string { return strings.ReplaceAll(k, "+", "&#43;") }
	page := f.get(s, "/console/endpoints").must(t, http.StatusOK)
	if !strings.Contains(page.body, esc(pk)) {
		t.Fatalf("the endpoints page does not show the public key:\n%s", page.body)
	}
	page.contains(t, "scheme <code>v1a</code>").lacks(t, "whsk_", sk[5:30], esc(sk[5:30]))

	rot := f.post(s, "/console/endpoints/"+ep.ID+"/rotate-secret", nil).must(t, http.StatusOK)
	m := regexp.MustCompile(`id="new-secret" type="text" readonly value="(whsk_[^"]+)"`).FindStringSubmatch(rot.body)
	if m == nil {
		t.Fatalf("the rotation page does not show the new signing key:\n%s", rot.body)
	}
	newSK := html.UnescapeString(m[1])
	newPK, err := webhook.PublicKey(newSK)
	if err != nil {
		t.Fatalf("the new secret is not a signing key: %v", err)
	}
	if !strings.Contains(rot.body, `id="new-public-key" type="text" readonly value="`+esc(newPK)+`"`) {
		t.Fatalf("the rotation page does not show the new public key:\n%s", rot.body)
	}
	after := f.get(s, "/console/endpoints").must(t, http.StatusOK).contains(t, "2 active", "old ones sign until")
	after.lacks(t, "whsk_", newSK[5:30], esc(newSK[5:30]))
	if !strings.Contains(after.body, esc(newPK)) || !strings.Contains(after.body, esc(pk)) {
		t.Fatalf("the endpoints page does not show both public keys:\n%s", after.body)
	}
}

// TestEndpointHeadersShowNamesOnly: the endpoints page lists an endpoint's
// custom headers by name, and never their values.
func TestEndpointHeadersShowNamesOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{
		Transport: "http", URL: "https://hooks.example.com/h", Config: map[string]string{},
		Secrets: []storage.Secret{storage.NewSecret(secret, nil)},
		Headers: []storage.Header{storage.NewHeader("Authorization", "Bearer console-hdr-41c7"), storage.NewHeader("X-Tenant", "tenant-console-9")},
	}}); err != nil {
		t.Fatal(err)
	}
	s := f.login("alice")
	f.get(s, "/console/endpoints").must(t, http.StatusOK).
		contains(t, "header <code>Authorization</code>: [redacted]", "header <code>X-Tenant</code>: [redacted]").
		lacks(t, "console-hdr-41c7", "tenant-console-9")
}
