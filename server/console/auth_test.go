package console_test

import (
	"crypto/sha256"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/console"
	"github.com/hymical/hymical/storage"
)

func TestEveryPageNeedsALogin(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep := f.endpoint("contact", "CRM")
	dlv := f.submit("contact", 1)[0]
	for _, path := range []string{"/console/", "/console/deliveries?state=failed", "/console/deliveries/" + dlv, "/console/endpoints"} {
		t.Run("GET "+path, func(t *testing.T) {
			t.Parallel()
			p := f.do(req{path: path}).must(t, http.StatusSeeOther)
			if want := "/console/login?next=" + url.QueryEscape(path); p.header.Get("Location") != want {
				t.Errorf("Location %q, want %q", p.header.Get("Location"), want)
			}
			// A session id nobody issued is no login either.
			f.do(req{path: path, cookie: "forged"}).must(t, http.StatusSeeOther)
		})
	}
	for _, path := range []string{"/console/deliveries/" + dlv + "/replay", "/console/deliveries/replay", "/console/endpoints/" + ep.ID + "/disable",
		"/console/endpoints/" + ep.ID + "/enable", "/console/endpoints/" + ep.ID + "/rotate-secret", "/console/logout"} {
		t.Run("POST "+path, func(t *testing.T) {
			t.Parallel()
			f.do(req{path: path, form: url.Values{"csrf": {"x"}, "state": {"failed"}}}).must(t, http.StatusUnauthorized).
				contains(t, "This action needs a login", "Log in again")
		})
	}
}

func TestLoginSetsAnOpaqueSecureSessionCookie(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)

	wrong := f.do(req{path: "/console/login", form: url.Values{"token": {"not-the-token-0123456789"}}}).must(t, http.StatusUnauthorized)
	wrong.contains(t, "not this server&#39;s admin token", "FORMS_SERVER_ADMIN_TOKEN")
	if wrong.sessionCookie() != nil {
		t.Error("a wrong token got a session cookie")
	}

	p := f.do(req{path: "/console/login", form: url.Values{"token": {adminToken}, "next": {"/console/endpoints"}}}).must(t, http.StatusSeeOther)
	if loc := p.header.Get("Location"); loc != "/console/endpoints" {
		t.Errorf("after login, Location %q, want the page asked for", loc)
	}
	c := p.sessionCookie()
	if c == nil {
		t.Fatal("no session cookie")
	}
	if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/console" || c.MaxAge <= 0 {
		t.Errorf("cookie %+v: want Secure, HttpOnly, SameSite=Strict, Path=/console and a lifetime", c)
	}
	if strings.Contains(c.Value, adminToken) || len(c.Value) < 40 {
		t.Errorf("cookie value %q: want an opaque random session id, never the token", c.Value)
	}
	f.get(session{cookie: c.Value}, "/console/").must(t, http.StatusOK).contains(t, "Overview", "Log out")
	if strings.Contains(f.logs.String(), adminToken) {
		t.Error("the admin token reached the log")
	}
}

func TestLoginRedirectStaysInsideTheConsole(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, next := range []string{"", "https://evil.example.com/", "//evil.example.com/console/", "/v1/endpoints", "/console/../v1/endpoints", "/console\\@evil", "console/"} {
		p := f.do(req{path: "/console/login", form: url.Values{"token": {adminToken}, "next": {next}}}).must(t, http.StatusSeeOther)
		if loc := p.header.Get("Location"); loc != "/console/" {
			t.Errorf("next=%q: Location %q, want /console/", next, loc)
		}
	}
}

func TestBearerTokenOpensTheConsoleWithoutCSRF(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.endpoint("contact", "CRM")
	dlv := f.submit("contact", 1)[0]
	f.failAll(dlv)
	bearer := map[string]string{"Authorization": "Bearer " + adminToken, "Hymical-Operator": "bob"}
	// The navigation, but no logout: there is no session to end.
	f.do(req{path: "/console/deliveries", header: bearer}).must(t, http.StatusOK).
		contains(t, dlv, `<nav aria-label="Console">`).lacks(t, `action="/console/logout"`)
	// A bearer request is not something a browser adds by itself, so it
	// needs no CSRF token.
	f.do(req{path: "/console/deliveries/" + dlv + "/replay", form: url.Values{}, header: bearer}).must(t, http.StatusSeeOther)
	rs, err := f.store.ReplayList(t.Context(), dlv)
	if err != nil || len(rs) != 1 || rs[0].Actor != "console:bob" {
		t.Fatalf("replays = %+v, %v; want one by console:bob", rs, err)
	}
	for _, h := range []string{"Bearer wrong-token-0123456789", "Basic " + adminToken, "Bearer"} {
		f.do(req{path: "/console/", header: map[string]string{"Authorization": h}}).must(t, http.StatusUnauthorized).contains(t, "Not logged in")
	}
}

func TestActionsNeedTheSessionsCSRFToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep := f.endpoint("contact", "CRM")
	dlv := f.submit("contact", 1)[0]
	f.failAll(dlv)
	s := f.login("alice")
	other := f.login("mallory")
	actions := []string{
		"/console/deliveries/" + dlv + "/replay",
		"/console/deliveries/replay",
		"/console/endpoints/" + ep.ID + "/disable",
		"/console/endpoints/" + ep.ID + "/rotate-secret",
		"/console/logout",
	}
	tokens := map[string][]string{
		"no token":                     nil,
		"an empty token":               {""},
		"a wrong token":                {"wrong"},
		"another session's token":      {other.csrf},
		"the token with one more char": {s.csrf + "x"},
	}
	for _, path := range actions {
		for name, tok := range tokens {
			form := url.Values{"state": {"failed"}}
			if tok != nil {
				form["csrf"] = tok
			}
			p := f.do(req{path: path, form: form, cookie: s.cookie})
			if p.status != http.StatusForbidden || !strings.Contains(p.body, "security token is missing or stale") || !strings.Contains(p.body, "reload the page") {
				t.Errorf("POST %s with %s: status %d, want 403 saying why and what to do:\n%s", path, name, p.status, p.body)
			}
		}
	}
	// Nothing happened, and the session still works.
	if st := f.state(dlv); st != storage.StateFailed {
		t.Errorf("delivery is %s after refused replays, want failed", st)
	}
	e, err := f.store.EndpointGet(t.Context(), ep.ID)
	if err != nil || e.DisabledAt != nil || len(e.Secrets) != 1 {
		t.Errorf("endpoint changed by refused actions: %+v, %v", e, err)
	}
	f.get(s, "/console/").must(t, http.StatusOK)
}

func TestCrossSitePostsAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.endpoint("contact", "CRM")
	dlv := f.submit("contact", 1)[0]
	f.failAll(dlv)
	s := f.login("alice")
	for _, path := range []string{"/console/deliveries/" + dlv + "/replay", "/console/login"} {
		form := url.Values{"csrf": {s.csrf}, "token": {adminToken}}
		p := f.do(req{path: path, form: form, cookie: s.cookie, header: map[string]string{"Sec-Fetch-Site": "cross-site"}})
		p.must(t, http.StatusForbidden).contains(t, "came from another site", "Nothing was changed")
	}
	if st := f.state(dlv); st != storage.StateFailed {
		t.Errorf("delivery is %s, want failed", st)
	}
}

func TestLogoutEndsTheSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	s := f.login("alice")
	p := f.post(s, "/console/logout", nil).must(t, http.StatusSeeOther)
	if c := p.sessionCookie(); c == nil || c.MaxAge >= 0 || c.Value != "" {
		t.Errorf("logout cookie %+v, want it cleared", c)
	}
	f.get(s, "/console/").must(t, http.StatusSeeOther)
	f.do(req{path: p.header.Get("Location")}).must(t, http.StatusOK).contains(t, "You are logged out")
}

func TestWrongTokensAreRateLimited(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for range 10 {
		f.do(req{path: "/console/login", form: url.Values{"token": {"guess-0123456789abcdef"}}}).must(t, http.StatusUnauthorized)
	}
	p := f.do(req{path: "/console/login", form: url.Values{"token": {adminToken}}}).must(t, http.StatusTooManyRequests)
	p.contains(t, "Too many wrong tokens", "Wait")
	if p.header.Get("Retry-After") == "" || p.sessionCookie() != nil {
		t.Errorf("a locked-out login: Retry-After %q, cookie %v", p.header.Get("Retry-After"), p.sessionCookie())
	}
}

func TestInsecureDevModeLogsInWithoutAToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *console.Options) { o.Insecure, o.AdminTokenDigest = true, [sha256.Size]byte{} })
	f.do(req{path: "/console/login"}).must(t, http.StatusOK).contains(t, "Insecure dev mode").lacks(t, `name="token"`)
	s := f.login("dev")
	f.get(s, "/console/").must(t, http.StatusOK).contains(t, "Insecure dev mode")
	// CSRF protection holds in dev mode too.
	f.do(req{path: "/console/logout", form: url.Values{}, cookie: s.cookie}).must(t, http.StatusForbidden)
}

func TestNewRefusesAConsoleWithoutAToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	if _, err := console.New(console.Options{Store: f.store}); err == nil || !strings.Contains(err.Error(), "admin token") {
		t.Errorf("New without a token digest = %v, want an error naming the admin token", err)
	}
	if _, err := console.New(console.Options{}); err == nil || !strings.Contains(err.Error(), "Store") {
		t.Errorf("New without a store = %v", err)
	}
}
