package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/access"
	"github.com/hymical/hymical/server/faceopts"
)

// exerciseAccess walks the routes of scoped tokens and portal links
// through their answers, and a scoped token through the answers only it
// gets on the routes it opens.
func (c *contract) exerciseAccess(t *testing.T, b backend) {
	f := newFixture(t, b, nil)
	const A = adminToken
	big := `{"name":"` + strings.Repeat("a", faceopts.DefaultMaxBodyBytes) + `"}`

	const create = "POST /v1/tokens"
	made := c.do(f, call{route: create, token: A, body: map[string]any{"name": "acme", "forms": []string{"a"}, "expires_in": "720h"}, want: 201})
	secret, id := made.str("token"), made.str("id")
	if !strings.HasPrefix(secret, access.TokenPrefix) || id == "" {
		t.Fatalf("a new token: %s", made.raw)
	}
	c.do(f, call{route: create, token: A, body: map[string]any{"forms": []string{"a"}, "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, want: 201})
	c.do(f, call{route: create, token: A, body: map[string]any{"forms": []string{"a"}, "expires_in": "1h", "admin": true}, refused: true, want: 400})
	c.do(f, call{route: create, token: A, body: big, refused: true, want: 413})
	c.do(f, call{route: create, token: A, body: `{}`, contentType: "text/plain", refused: true, want: 415})
	for _, bad := range []map[string]any{
		{"forms": []string{"a"}},
		{"forms": []string{"a"}, "expires_in": "1h", "expires_at": "2030-01-01T00:00:00Z"},
		{"forms": []string{"a"}, "expires_in": "9000h"},
		{"forms": []string{"a"}, "expires_in": "-1h"},
		{"forms": []string{"a", "a"}, "expires_in": "1h"},
	} {
		refused := false
		if fs := bad["forms"].([]string); len(fs) == 2 {
			refused = true // the document says the forms are unique
		}
		r := c.do(f, call{route: create, token: A, body: bad, refused: refused, want: 422})
		if code, _ := r.errorCode(t); code != "invalid_request" {
			t.Errorf("a token %v: code %s, want invalid_request", bad, code)
		}
	}
	list := c.do(f, call{route: "GET /v1/tokens", token: A, want: 200})
	if strings.Contains(string(list.raw), secret) || len(list.list("tokens")) != 2 {
		t.Errorf("the token list: %s, want two tokens without their secrets", list.raw)
	}
	c.do(f, call{route: "GET /v1/tokens", token: A, query: "all=1", want: 400})

	// The scoped token's own answers on the routes it opens.
	S := secret
	c.do(f, call{route: "POST /v1/endpoints", token: S, body: map[string]any{"url": "https://hooks.example.com/", "form_ids": []string{"b"}}, want: 403})
	c.do(f, call{route: "GET /v1/deliveries", token: S, query: "form_id=b", want: 404})
	c.do(f, call{route: "POST /v1/deliveries/replay", token: S, body: map[string]any{"form_id": "b"}, want: 404})
	c.do(f, call{route: "GET /v1/endpoints", token: S, want: 200})

	const revoke = "DELETE /v1/tokens/{id}"
	one := map[string]string{"id": id}
	c.do(f, call{route: revoke, token: A, params: one, body: map[string]any{"now": true}, refused: true, want: 400})
	c.do(f, call{route: revoke, token: A, params: one, body: big, refused: true, want: 413})
	c.do(f, call{route: revoke, token: A, params: one, body: `{}`, contentType: "text/plain", refused: true, want: 415})
	c.do(f, call{route: revoke, token: A, want: 404})
	r := c.do(f, call{route: revoke, token: A, params: one, want: 200})
	again := c.do(f, call{route: revoke, token: A, params: one, want: 200})
	if r.str("revoked_at") == "" || again.str("revoked_at") != r.str("revoked_at") {
		t.Errorf("revoking twice: %s then %s, want one revoked_at", r.raw, again.raw)
	}
	c.do(f, call{route: "GET /v1/endpoints", token: S, want: 401})

	const portal = "POST /v1/portal/sessions"
	p := c.do(f, call{route: portal, token: A, body: map[string]any{"forms": []string{"a"}, "ttl": "1h", "read_only": true}, want: 201})
	if u := p.str("url"); !strings.HasPrefix(u, f.srv.URL+"/portal/start?link="+access.PortalLinkPrefix) {
		t.Errorf("the portal link %q is not %s/portal/start?link=%s…", u, f.srv.URL, access.PortalLinkPrefix)
	}
	c.do(f, call{route: portal, token: A, body: map[string]any{"forms": []string{"a"}, "ttl": "1h", "theme": "dark"}, refused: true, want: 400})
	c.do(f, call{route: portal, token: A, body: big, refused: true, want: 413})
	c.do(f, call{route: portal, token: A, body: `{}`, contentType: "text/plain", refused: true, want: 415})
	c.do(f, call{route: portal, token: A, body: map[string]any{"forms": []string{"a"}, "ttl": "48h"}, want: 422})
	c.do(f, call{route: portal, token: A, body: map[string]any{"forms": []string{"a"}, "ttl": "soon"}, want: 422})

	const links = "GET /v1/portal/sessions"
	listed := c.do(f, call{route: links, token: A, want: 200})
	if ls := listed.list("links"); len(ls) != 1 || strings.Contains(string(listed.raw), "hympl_") {
		t.Errorf("the portal link list: %s, want the one link without its secret", listed.raw)
	}
	c.do(f, call{route: links, token: A, query: "all=1", want: 400})

	const end = "DELETE /v1/portal/sessions/{id}"
	link := map[string]string{"id": p.str("id")}
	c.do(f, call{route: end, token: A, params: link, body: map[string]any{"now": true}, refused: true, want: 400})
	c.do(f, call{route: end, token: A, params: link, body: big, refused: true, want: 413})
	c.do(f, call{route: end, token: A, params: link, body: `{}`, contentType: "text/plain", refused: true, want: 415})
	c.do(f, call{route: end, token: A, want: 404})
	c.do(f, call{route: end, token: A, params: one, want: 404}) // a token is no portal link
	ended := c.do(f, call{route: end, token: A, params: link, want: 200})
	endedAgain := c.do(f, call{route: end, token: A, params: link, want: 200})
	if ended.str("revoked_at") == "" || endedAgain.str("revoked_at") != ended.str("revoked_at") {
		t.Errorf("revoking a link twice: %s then %s, want one revoked_at", ended.raw, endedAgain.raw)
	}
}
