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
// makes a portal link, opens it, lists it and revokes it, which ends its
// session.
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
	out = hymical("portal", "link", "--form", "contact", "--ttl", "30m")
	link, _, _ := strings.Cut(out, "\n")
	linkID := regexp.MustCompile(`acc_[0-9a-f]{32}`).FindString(out)
	if !strings.HasPrefix(link, base+"/portal/start?link=hympl_") || linkID == "" || !strings.Contains(out, "hymical portal revoke "+linkID) {
		t.Fatalf("portal link printed %q, want the link on its first line and its id", out)
	}
	if list := hymical("portal", "list"); !strings.Contains(list, linkID) || !strings.Contains(list, "unused, opens until") || strings.Contains(list, "hympl_") {
		t.Errorf("portal list before the link is opened:\n%s", list)
	}
	cookie := openPortalLink(t, link)
	portal := func() int {
		t.Helper()
		r, err := http.NewRequestWithContext(t.Context(), "GET", base+"/portal/endpoints", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := portal(); got != http.StatusOK {
		t.Fatalf("the portal with the new session: %d, want 200", got)
	}
	if list := hymical("portal", "list"); !strings.Contains(list, "in use until") {
		t.Errorf("portal list after the link is opened:\n%s", list)
	}
	if out := hymical("portal", "revoke", linkID); !strings.Contains(out, "portal link "+linkID+" revoked at ") {
		t.Errorf("portal revoke printed %q", out)
	}
	if got := portal(); got != http.StatusUnauthorized {
		t.Errorf("the portal with the revoked session: %d, want 401", got)
	}
	var links apiwire.PortalLinkList
	if err := json.Unmarshal([]byte(hymical("portal", "list", "-o", "json")), &links); err != nil || len(links.Links) != 1 ||
		links.Links[0].RevokedAt == nil || links.Links[0].UsedAt == nil {
		t.Errorf("portal list -o json after the revoke: %+v, %v; want the link, used and revoked", links, err)
	}
	b.Reset()
	err = run(t.Context(), []string{"portal", "revoke", "acc_nothing", "--server", base}, &b, &b)
	if err == nil || !strings.Contains(err.Error(), `portal link "acc_nothing" does not exist`) {
		t.Errorf("portal revoke of an unknown id: %v, want it named", err)
	}
}

// openPortalLink opens a portal link as a browser does and returns the
// session cookie it set.
func openPortalLink(t *testing.T, link string) *http.Cookie {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := http.NewRequestWithContext(t.Context(), "GET", link, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "hymical_portal" {
			return c
		}
	}
	t.Fatalf("opening the link answered %d and set no portal cookie", resp.StatusCode)
	return nil
}
