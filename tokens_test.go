package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/server/api/apiwire"
)

// TestTokensOnARealServer makes a scoped token with the CLI, uses it on the
// API, lists it (without its secret), revokes it, and sees it refused; and
// makes a portal link.
func TestTokensOnARealServer(t *testing.T) {
	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FORMS_SERVER_ADMIN_TOKEN", "test-admin-token-0123456789")
	base, _, _ := startServe(t, dir)
	hymical := func(args ...string) string {
		t.Helper()
		var b bytes.Buffer
		if err := run(t.Context(), append(args, "--server", base), &b, &b); err != nil {
			t.Fatalf("hymical %s: %v\n%s", strings.Join(args, " "), err, b.String())
		}
		return b.String()
	}
	status := func(token string) int {
		t.Helper()
		r, err := http.NewRequestWithContext(t.Context(), "GET", base+"/v1/endpoints", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	out := hymical("tokens", "create", "--form", "contact", "--form", "signup", "--expires-in", "720h", "--name", "acme")
	secret := regexp.MustCompile(`hymt_[A-Za-z0-9_-]{43}`).FindString(out)
	id := regexp.MustCompile(`acc_[0-9a-f]{32}`).FindString(out)
	if secret == "" || id == "" || !strings.Contains(out, "contact, signup") || !strings.Contains(out, "read-write") {
		t.Fatalf("tokens create printed:\n%s", out)
	}
	if got := status(secret); got != http.StatusOK {
		t.Fatalf("the new token on GET /v1/endpoints: %d, want 200", got)
	}
	list := hymical("tokens", "list")
	if !strings.Contains(list, id) || !strings.Contains(list, "acme") || strings.Contains(list, secret) {
		t.Errorf("tokens list:\n%s", list)
	}
	var asJSON apiwire.TokenList
	if err := json.Unmarshal([]byte(hymical("tokens", "list", "-o", "json")), &asJSON); err != nil || len(asJSON.Tokens) != 1 {
		t.Errorf("tokens list -o json: %+v, %v", asJSON, err)
	}
	if out := hymical("tokens", "revoke", id); !strings.Contains(out, id+" revoked at ") {
		t.Errorf("tokens revoke printed %q", out)
	}
	if got := status(secret); got != http.StatusUnauthorized {
		t.Errorf("the revoked token on GET /v1/endpoints: %d, want 401", got)
	}
	if list := hymical("tokens", "list"); strings.Contains(list, id) {
		t.Errorf("tokens list still shows the revoked token:\n%s", list)
	}
	var b bytes.Buffer
	err := run(t.Context(), []string{"tokens", "create", "--form", "contact", "--server", base}, &b, &b)
	if err == nil || !strings.Contains(err.Error(), "--expires-in") {
		t.Errorf("tokens create without --expires-in: %v, want it asked for", err)
	}
	if out := hymical("portal", "link", "--form", "contact", "--ttl", "30m"); !strings.HasPrefix(out, base+"/portal/start?link=hympl_") {
		t.Errorf("portal link printed %q", out)
	}
}
