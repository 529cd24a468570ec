package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/syncbuf"

	"github.com/hymical/hymical/server/access"
	"github.com/hymical/hymical/server/console"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/storage"
)

// pluginHost is a host of the real http plugin, built once for every
// portal test of this binary, with the plugin's default guard: loopback
// and private targets are refused, as they are in production.
var pluginHost = sync.OnceValues(func() (*pluginhost.Host, error) {
	dir, err := os.MkdirTemp("", "hymical-portal-plugins-")
	if err != nil {
		return nil, err
	}
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		return nil, err
	}
	return pluginhost.New(context.Background(), pluginhost.Config{Dir: dir}, e2etest.Logger())
})

// newPortalFixture serves the portal over store on a loopback server.
func newPortalFixture(t *testing.T, store storage.Store, edit func(*console.PortalOptions)) *fixture {
	t.Helper()
	host, err := pluginHost()
	if err != nil {
		t.Fatalf("start the http plugin: %v", err)
	}
	logs := &syncbuf.Buffer{}
	opts := console.PortalOptions{
		Store:      store,
		Transports: host,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&opts)
	}
	h, err := console.NewPortal(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(console.PortalPrefix+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &fixture{t: t, store: store, srv: srv, logs: logs, transports: host}
}

// link mints a portal link for forms, as POST /v1/portal/sessions does.
func (f *fixture) link(forms []string, readOnly bool, linkTTL, sessionTTL time.Duration, now time.Time) string {
	f.t.Helper()
	scope, err := access.NewScope(forms, readOnly)
	if err != nil {
		f.t.Fatal(err)
	}
	raw, _, err := access.NewPortalLink(f.t.Context(), f.store, scope, linkTTL, sessionTTL, now)
	if err != nil {
		f.t.Fatal(err)
	}
	return raw
}

// portalCookieOf is the portal session cookie a response set, or nil.
func (p page) portalCookieOf() *http.Cookie {
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == console.PortalCookieName {
			return c
		}
	}
	return nil
}

// portalSession opens a portal link the way a browser does and returns
// the session: its cookie, and the CSRF token of its forms.
func (f *fixture) portalSession(forms []string, readOnly bool) session {
	f.t.Helper()
	raw := f.link(forms, readOnly, time.Hour, time.Hour, time.Now())
	p := f.do(req{path: "/portal/start?link=" + url.QueryEscape(raw)}).must(f.t, http.StatusSeeOther)
	if loc := p.header.Get("Location"); loc != "/portal/" {
		f.t.Fatalf("start sends the browser to %q, want /portal/", loc)
	}
	c := p.portalCookieOf()
	if c == nil {
		f.t.Fatalf("start set no portal cookie: %v", p.header)
	}
	s := session{cookie: c.Value}
	if m := csrfField.FindStringSubmatch(f.portalGet(s, "/portal/endpoints").must(f.t, http.StatusOK).body); m != nil {
		s.csrf = m[1]
	}
	return s
}

func (f *fixture) portalGet(s session, path string) page {
	f.t.Helper()
	return f.do(req{path: path, header: map[string]string{"Cookie": console.PortalCookieName + "=" + s.cookie}})
}

func (f *fixture) portalPost(s session, path string, form url.Values) page {
	f.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if form.Get("csrf") == "" {
		form.Set("csrf", s.csrf)
	}
	return f.do(req{path: path, form: form, header: map[string]string{"Cookie": console.PortalCookieName + "=" + s.cookie}})
}

// snapshot is what a refused request must leave as it was: an endpoint's
// and a delivery's every changeable field.
func (f *fixture) snapshot(endpointID, deliveryID string) string {
	f.t.Helper()
	ctx := f.t.Context()
	e, err := f.store.EndpointGet(ctx, endpointID)
	if err != nil {
		f.t.Fatal(err)
	}
	d, err := f.store.DeliveryGet(ctx, deliveryID)
	if err != nil {
		f.t.Fatal(err)
	}
	rs, err := f.store.ReplayList(ctx, deliveryID)
	if err != nil {
		f.t.Fatal(err)
	}
	ds, err := f.store.DeliveryList(ctx, storage.DeliveryListParams{Filter: storage.DeliveryFilter{EndpointID: endpointID}, Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	return fmt.Sprintf("endpoint %s disabled=%v deleted=%v secrets=%d deliveries=%d; delivery %s attempts=%d replays=%d",
		e.URL, e.DisabledAt != nil, e.DeletedAt != nil, len(e.Secrets), len(ds), d.State, d.Attempts, len(rs))
}

// TestPortalKeepsToItsScope opens a session for form "contact" and, on
// both stores, asks every portal page and action about another form's
// endpoint and delivery: each answers 404, the page a missing id gets,
// and nothing is written.
func TestPortalKeepsToItsScope(t *testing.T) {
	t.Parallel()
	for name, open := range e2etest.Backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newPortalFixture(t, open(t), nil)
			mine := f.endpoint("contact", "Contact CRM")
			other := f.endpoint("billing", "Billing ledger")
			myDlv := f.submit("contact", 1)[0]
			otherDlv := f.submit("billing", 1)[0]
			f.failAll(myDlv, otherDlv)
			s := f.portalSession([]string{"contact"}, false)
			if s.csrf == "" {
				t.Fatal("the endpoints page has no form with a CSRF token")
			}
			missing := f.portalGet(s, "/portal/deliveries/dlv_00000000000000000000000000000000").must(t, http.StatusNotFound)

			tests := []struct {
				name, method, path string
				form               url.Values
			}{
				{"the delivery's page", "GET", "/portal/deliveries/" + otherDlv, nil},
				{"replay of the delivery", "POST", "/portal/deliveries/" + otherDlv + "/replay", url.Values{}},
				{"the endpoint's delete page", "GET", "/portal/endpoints/" + other.ID + "/delete", nil},
				{"disable", "POST", "/portal/endpoints/" + other.ID + "/disable", url.Values{}},
				{"enable", "POST", "/portal/endpoints/" + other.ID + "/enable", url.Values{}},
				{"rotate the secret", "POST", "/portal/endpoints/" + other.ID + "/rotate-secret", url.Values{}},
				{"delete, forced", "POST", "/portal/endpoints/" + other.ID + "/delete", url.Values{"force": {"yes"}}},
				{"send a test event", "POST", "/portal/endpoints/" + other.ID + "/test", url.Values{}},
				{"the endpoint's edit page", "GET", "/portal/endpoints/" + other.ID + "/edit", nil},
				{"an edit", "POST", "/portal/endpoints/" + other.ID + "/edit", url.Values{"url": {"https://mine.example.com/"}, "form_ids": {"contact"}}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					before := f.snapshot(other.ID, otherDlv)
					var p page
					if tt.method == "GET" {
						p = f.portalGet(s, tt.path)
					} else {
						p = f.portalPost(s, tt.path, tt.form)
					}
					p.must(t, http.StatusNotFound).contains(t, "<h1>Not found</h1>").lacks(t, other.ID+"\"", "Billing ledger", "hooks.example.com/billing")
					if after := f.snapshot(other.ID, otherDlv); after != before {
						t.Errorf("a refused %s %s changed the store:\nbefore %s\nafter  %s", tt.method, tt.path, before, after)
					}
				})
			}
			if !strings.Contains(missing.body, "<h1>Not found</h1>") {
				t.Errorf("a missing delivery is not the same Not found page:\n%s", missing.body)
			}

			// Lists show the scope only, whatever the filter asks for.
			f.portalGet(s, "/portal/endpoints").must(t, http.StatusOK).contains(t, mine.ID, "Contact CRM").lacks(t, other.ID, "Billing ledger")
			f.portalGet(s, "/portal/deliveries?state=failed").must(t, http.StatusOK).contains(t, myDlv).lacks(t, otherDlv, "Billing ledger")
			f.portalGet(s, "/portal/deliveries?form_id=billing&endpoint_id="+other.ID).must(t, http.StatusOK).lacks(t, otherDlv)

			// Bulk replay of "all failed" replays the scope's only.
			before := f.snapshot(other.ID, otherDlv)
			f.portalPost(s, "/portal/deliveries/replay", url.Values{"state": {"failed"}}).must(t, http.StatusSeeOther)
			if st := f.state(myDlv); st != storage.StatePending {
				t.Errorf("the scope's failed delivery is %s after the bulk replay, want pending", st)
			}
			if after := f.snapshot(other.ID, otherDlv); after != before {
				t.Errorf("the bulk replay reached another scope:\nbefore %s\nafter  %s", before, after)
			}
			// And within the scope the actions work: a test event's
			// delivery is the session's to see.
			p := f.portalPost(s, "/portal/endpoints/"+mine.ID+"/test", nil).must(t, http.StatusSeeOther)
			loc := p.header.Get("Location")
			if !regexp.MustCompile(`^/portal/deliveries/dlv_[0-9a-f]{32}\?done=test$`).MatchString(loc) {
				t.Fatalf("a test event leads to %q, want its delivery's page", loc)
			}
			f.portalGet(s, loc).must(t, http.StatusOK).contains(t, "Test event sent", "hymical.test", mine.ID)
			f.portalPost(s, "/portal/endpoints/"+mine.ID+"/disable", nil).must(t, http.StatusSeeOther)
			if e, err := f.store.EndpointGet(t.Context(), mine.ID); err != nil || e.DisabledAt == nil {
				t.Errorf("the scope's endpoint was not disabled: %v", err)
			}
		})
	}
}

// TestPortalEndpointOfManyFormsIsNotInAScopeOfOne: an endpoint that also
// serves a form outside the scope is not the session's, nor are its
// deliveries, those of the scope's own form included: they are listed
// nowhere and answer 404, as the endpoint does.
func TestPortalEndpointOfManyFormsIsNotInAScopeOfOne(t *testing.T) {
	t.Parallel()
	f := newPortalFixture(t, e2etest.Backends()["sqlite"](t), nil)
	shared, err := f.store.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{
		Transport: "http", URL: "https://shared.example.com/hook", FormIDs: []string{"contact", "billing"},
		Config: map[string]string{}, Secrets: []storage.Secret{storage.NewSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", nil)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	dlv := f.submit("contact", 1)[0]
	f.failAll(dlv)
	// One endpoint of its own, whose forms carry the CSRF token.
	f.endpoint("contact", "Contact CRM")
	s := f.portalSession([]string{"contact"}, false)
	f.portalGet(s, "/portal/deliveries/"+dlv).must(t, http.StatusNotFound).lacks(t, "shared.example.com")
	f.portalGet(s, "/portal/deliveries?state=failed").must(t, http.StatusOK).lacks(t, dlv, shared.Endpoint.ID)
	f.portalPost(s, "/portal/deliveries/"+dlv+"/replay", nil).must(t, http.StatusNotFound)
	f.portalPost(s, "/portal/deliveries/replay", url.Values{"state": {"failed"}}).must(t, http.StatusSeeOther)
	if st := f.state(dlv); st != storage.StateFailed {
		t.Errorf("the shared endpoint's delivery is %s after the session's bulk replay, want failed", st)
	}
	f.portalPost(s, "/portal/endpoints/"+shared.Endpoint.ID+"/rotate-secret", nil).must(t, http.StatusNotFound)
	f.portalGet(s, "/portal/endpoints").must(t, http.StatusOK).lacks(t, shared.Endpoint.ID)

	// An event of no form addressed to one endpoint, as a test event is:
	// the scope's when the endpoint is, not when it is another's.
	own := f.endpoint("contact", "Own")
	addressed := func(endpointID string) string {
		res, err := f.store.EventCreate(t.Context(), storage.Event{ID: storage.NewID("evt"), Type: "hymical.test", EndpointID: endpointID,
			Payload: []byte(`{"type":"hymical.test"}`), CreatedAt: time.Now()})
		if err != nil || len(res.Deliveries) != 1 {
			t.Fatalf("an addressed event: %v, %d deliveries", err, len(res.Deliveries))
		}
		return res.Deliveries[0].ID
	}
	f.portalGet(s, "/portal/deliveries/"+addressed(own.ID)).must(t, http.StatusOK)
	f.portalGet(s, "/portal/deliveries/"+addressed(shared.Endpoint.ID)).must(t, http.StatusNotFound)
}

// TestPortalReadOnlySessionChangesNothing: no write controls are shown,
// and a write sent anyway is refused with 403.
func TestPortalReadOnlySessionChangesNothing(t *testing.T) {
	t.Parallel()
	f := newPortalFixture(t, e2etest.Backends()["sqlite"](t), nil)
	mine := f.endpoint("contact", "Contact CRM")
	dlv := f.submit("contact", 1)[0]
	f.failAll(dlv)
	s := f.portalSession([]string{"contact"}, true)
	f.portalGet(s, "/portal/endpoints").must(t, http.StatusOK).contains(t, mine.ID, "read-only").lacks(t, "/disable", "/rotate-secret", "Delete…")
	f.portalGet(s, "/portal/deliveries/"+dlv).must(t, http.StatusOK).lacks(t, `class="replay"`)
	f.portalGet(s, "/portal/deliveries?state=failed").must(t, http.StatusOK).lacks(t, "/deliveries/replay")
	before := f.snapshot(mine.ID, dlv)
	for _, path := range []string{"/endpoints/" + mine.ID + "/disable", "/endpoints/" + mine.ID + "/rotate-secret", "/deliveries/" + dlv + "/replay"} {
		f.portalPost(s, "/portal"+path, nil).must(t, http.StatusForbidden).contains(t, "This session can only look")
	}
	if after := f.snapshot(mine.ID, dlv); after != before {
		t.Errorf("a read-only session changed the store:\nbefore %s\nafter  %s", before, after)
	}
}

// TestPortalLinkOpensOneSession: the cookie it sets, and every way a link
// or a session fails: used twice, expired, unknown, a session past its
// end.
func TestPortalLinkOpensOneSession(t *testing.T) {
	t.Parallel()
	f := newPortalFixture(t, e2etest.Backends()["sqlite"](t), nil)
	f.endpoint("contact", "Contact CRM")
	now := time.Now()
	raw := f.link([]string{"contact"}, false, time.Hour, 30*time.Minute, now)

	first := f.do(req{path: "/portal/start?link=" + raw}).must(t, http.StatusSeeOther)
	c := first.portalCookieOf()
	if c == nil {
		t.Fatal("the first use set no cookie")
	}
	if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteNoneMode || c.Path != "/portal" {
		t.Errorf("cookie %q: HttpOnly, Secure, SameSite=None and Path=/portal are all wanted", first.header.Get("Set-Cookie"))
	}
	if d := c.Expires.Sub(now.Add(30 * time.Minute)); d < -2*time.Second || d > 2*time.Second {
		t.Errorf("the cookie expires at %s, want the session's end, about %s", c.Expires, now.Add(30*time.Minute))
	}
	if strings.Contains(f.logs.String(), raw) || strings.Contains(f.logs.String(), c.Value) {
		t.Error("the log holds the link or the session's secret")
	}

	expiredLink := f.link([]string{"contact"}, false, time.Hour, time.Hour, now.Add(-2*time.Hour))
	for name, link := range map[string]string{
		"used twice": raw, "expired": expiredLink, "unknown": access.Mint(access.PortalLinkPrefix), "not a link": "hello",
	} {
		p := f.do(req{path: "/portal/start?link=" + url.QueryEscape(link)}).must(t, http.StatusNotFound)
		p.contains(t, "This link does not open the portal", "used already")
		if p.portalCookieOf() != nil {
			t.Errorf("a link %s set a cookie", name)
		}
	}

	// A session past its end: redeemed two hours ago for one hour.
	stale := f.link([]string{"contact"}, false, 3*time.Hour, time.Hour, now.Add(-2*time.Hour))
	rawSession, _, err := access.RedeemPortalLink(t.Context(), f.store, stale, now.Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	p := f.portalGet(session{cookie: rawSession}, "/portal/endpoints").must(t, http.StatusUnauthorized)
	p.contains(t, "Your portal session has ended").lacks(t, "Contact CRM")
	if c := p.portalCookieOf(); c == nil || c.MaxAge >= 0 {
		t.Errorf("the ended session's cookie is not cleared: %v", p.header.Values("Set-Cookie"))
	}
	f.portalGet(session{}, "/portal/endpoints").must(t, http.StatusUnauthorized).contains(t, "needs a portal session")
	// The console's session cookie is not the portal's.
	f.do(req{path: "/portal/endpoints", cookie: rawSession}).must(t, http.StatusUnauthorized)
}

// TestPortalRevokedSessionEnds: revoking the link ends the session it
// became at its next request, a read or a write, as an ended session
// ends: 401 and the cookie cleared, with nothing changed. Another
// session lives on.
func TestPortalRevokedSessionEnds(t *testing.T) {
	t.Parallel()
	for name, open := range e2etest.Backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newPortalFixture(t, open(t), nil)
			mine := f.endpoint("contact", "Contact CRM")
			dlv := f.submit("contact", 1)[0]
			other := f.portalSession([]string{"contact"}, false)
			s := f.portalSession([]string{"contact"}, false)
			f.portalGet(s, "/portal/endpoints").must(t, http.StatusOK).contains(t, "Contact CRM")
			sess, err := access.PortalSession(t.Context(), f.store, s.cookie, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.store.PortalLinkRevoke(t.Context(), sess.LinkID, time.Now()); err != nil {
				t.Fatal(err)
			}
			before := f.snapshot(mine.ID, dlv)
			for _, p := range []page{
				f.portalGet(s, "/portal/endpoints"),
				f.portalPost(s, "/portal/endpoints/"+mine.ID+"/disable", nil),
			} {
				p.must(t, http.StatusUnauthorized).contains(t, "Your portal session has ended").lacks(t, "Contact CRM")
				if c := p.portalCookieOf(); c == nil || c.MaxAge >= 0 {
					t.Errorf("the revoked session's cookie is not cleared: %v", p.header.Values("Set-Cookie"))
				}
			}
			if after := f.snapshot(mine.ID, dlv); after != before {
				t.Errorf("a revoked session changed the store:\nbefore %s\nafter  %s", before, after)
			}
			f.portalGet(other, "/portal/endpoints").must(t, http.StatusOK).contains(t, "Contact CRM")
		})
	}
}

// TestPortalFormsAreCSRFProtected: a form without the session's token, or
// sent from another site, changes nothing.
func TestPortalFormsAreCSRFProtected(t *testing.T) {
	t.Parallel()
	f := newPortalFixture(t, e2etest.Backends()["sqlite"](t), nil)
	mine := f.endpoint("contact", "Contact CRM")
	s := f.portalSession([]string{"contact"}, false)
	cookie := console.PortalCookieName + "=" + s.cookie
	f.do(req{path: "/portal/endpoints/" + mine.ID + "/disable", form: url.Values{"csrf": {"forged"}}, header: map[string]string{"Cookie": cookie}}).
		must(t, http.StatusForbidden).contains(t, "security token")
	f.do(req{path: "/portal/endpoints/" + mine.ID + "/disable", form: url.Values{"csrf": {s.csrf}},
		header: map[string]string{"Cookie": cookie, "Sec-Fetch-Site": "cross-site"}}).must(t, http.StatusForbidden)
	if e, err := f.store.EndpointGet(t.Context(), mine.ID); err != nil || e.DisabledAt != nil {
		t.Errorf("a refused form disabled the endpoint (%v)", err)
	}
}

// TestPortalFramingAndBrand: frame-ancestors from the options (and
// X-Frame-Options only when nothing may frame it), the brand's name, and
// the accent colour in a stylesheet of its own.
func TestPortalFramingAndBrand(t *testing.T) {
	t.Parallel()
	store := e2etest.Backends()["sqlite"](t)
	closed := newPortalFixture(t, store, nil)
	p := closed.do(req{path: "/portal/endpoints"})
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none';") || p.header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("by default the portal may be framed: CSP %q, X-Frame-Options %q", csp, p.header.Get("X-Frame-Options"))
	}
	open := newPortalFixture(t, store, func(o *console.PortalOptions) {
		o.FrameAncestors = []string{"https://forms.example.com", "http://localhost:8080"}
		o.BrandName, o.AccentColor = "Acme <Forms>", "#7c3aed"
	})
	p = open.do(req{path: "/portal/endpoints"}).must(t, http.StatusUnauthorized)
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors https://forms.example.com http://localhost:8080;") || p.header.Get("X-Frame-Options") != "" {
		t.Errorf("the configured origins may not frame the portal: CSP %q, X-Frame-Options %q", csp, p.header.Get("X-Frame-Options"))
	}
	p.contains(t, "Acme &lt;Forms&gt;", `href="/portal/static/brand.css"`)
	if p := open.do(req{path: "/portal/static/console.css"}).must(t, http.StatusOK); !strings.Contains(p.body, "--accent:") {
		t.Errorf("the portal's stylesheet is not the console's:\n%.200s", p.body)
	}
	css := open.do(req{path: "/portal/static/brand.css"}).must(t, http.StatusOK)
	if !strings.Contains(css.body, "--accent: #7c3aed;") || !strings.HasPrefix(css.header.Get("Content-Type"), "text/css") {
		t.Errorf("brand.css = %q (%s)", css.body, css.header.Get("Content-Type"))
	}

	for _, bad := range []func(*console.PortalOptions){
		func(o *console.PortalOptions) { o.AccentColor = "red;} body {display:none" },
		func(o *console.PortalOptions) { o.FrameAncestors = []string{"https://a.example.com; script-src *"} },
	} {
		opts := console.PortalOptions{Store: store, Transports: open.transports}
		bad(&opts)
		if _, err := console.NewPortal(opts); err == nil {
			t.Errorf("NewPortal(%+v) took a value that could inject into CSS or a header", opts)
		}
	}
}

// TestPortalAddsAndEditsEndpointsWithinItsScope: an endpoint is added
// with the API's rules and the plugin's check, only for the scope's
// forms, its secret shown once; an edit cannot move it out of the scope.
func TestPortalAddsAndEditsEndpointsWithinItsScope(t *testing.T) {
	t.Parallel()
	f := newPortalFixture(t, e2etest.Backends()["sqlite"](t), nil)
	f.endpoint("contact", "Contact CRM") // its forms carry the CSRF token
	s := f.portalSession([]string{"contact", "signup"}, false)
	f.portalGet(s, "/portal/endpoints/new").must(t, http.StatusOK).contains(t, `value="contact"`, `value="signup"`).lacks(t, "billing", `name="rate_limit"`)

	count := func() int {
		eps, err := f.store.EndpointList(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(eps)
	}
	before := count()
	for _, tt := range []struct {
		name string
		form url.Values
		want string
	}{
		{"no URL", url.Values{"form_ids": {"contact"}}, "The URL is required"},
		{"a URL with a password", url.Values{"url": {"https://u:p@hooks.example.com/"}, "form_ids": {"contact"}}, "user name or password"},
		{"no form", url.Values{"url": {"https://hooks.example.com/a"}}, "hoose at least one of your forms"},
		{"a form outside the scope", url.Values{"url": {"https://hooks.example.com/a"}, "form_ids": {"contact", "billing"}}, "hoose at least one of your forms"},
		{"a bad event type", url.Values{"url": {"https://hooks.example.com/a"}, "form_ids": {"contact"}, "event_types": {"no spaces!"}}, "is not an event type"},
		// The plugin's own guard, asked as the API asks it.
		{"a reserved header", url.Values{"url": {"https://hooks.example.com/a"}, "form_ids": {"contact"}, "headers": {"Host: evil.example.com"}}, "the transport sets it"},
		{"a header line without a colon", url.Values{"url": {"https://hooks.example.com/a"}, "form_ids": {"contact"}, "headers": {"X-Key k3y"}}, "Name: value"},
		{"a loopback target", url.Values{"url": {"http://127.0.0.1:9/hook"}, "form_ids": {"contact"}}, "transport refused this URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.portalPost(s, "/portal/endpoints/new", tt.form).must(t, http.StatusBadRequest).contains(t, tt.want, "Nothing was changed")
		})
	}
	if n := count(); n != before {
		t.Fatalf("refused forms added %d endpoints", n-before)
	}

	p := f.portalPost(s, "/portal/endpoints/new", url.Values{"url": {"https://hooks.example.com/new?token=s3cret"}, "form_ids": {"signup"},
		"event_types": {"submission.received, form.published"}, "description": {"Signups"}, "headers": {"X-Api-Key: k3y-s3cret\r\nX-Team: forms"}}).must(t, http.StatusCreated)
	secret := regexp.MustCompile(`id="new-secret" type="text" readonly value="(whsec_[^"]+)"`).FindStringSubmatch(p.body)
	id := regexp.MustCompile(`<code>(ep_[0-9a-f]{32})</code> added`).FindStringSubmatch(p.body)
	if secret == nil || id == nil {
		t.Fatalf("the answer shows no new endpoint and secret:\n%s", p.body)
	}
	e, err := f.store.EndpointGet(t.Context(), id[1])
	if err != nil {
		t.Fatal(err)
	}
	if e.URL != "https://hooks.example.com/new?token=s3cret" || !slices.Equal(e.FormIDs, []string{"signup"}) ||
		!slices.Equal(e.EventTypes, []string{"submission.received", "form.published"}) || e.Description != "Signups" ||
		len(e.Headers) != 2 || e.Headers[0].Name != "X-Api-Key" || e.Headers[0].Reveal() != "k3y-s3cret" {
		t.Errorf("stored %+v", e)
	}
	f.portalGet(s, "/portal/endpoints").must(t, http.StatusOK).contains(t, e.ID, "X-Api-Key").lacks(t, secret[1], "s3cret")

	// The edit form hides the URL's secret and the headers' values; an
	// empty URL and a masked value keep what is stored, and a header left
	// out goes.
	f.portalGet(s, "/portal/endpoints/"+e.ID+"/edit").must(t, http.StatusOK).contains(t, "Signups", "X-Api-Key: [redacted]").lacks(t, "s3cret")
	f.portalPost(s, "/portal/endpoints/"+e.ID+"/edit", url.Values{"form_ids": {"signup", "contact"}, "description": {"Both"},
		"headers": {"X-Api-Key: [redacted]"}}).must(t, http.StatusSeeOther)
	if e, _ = f.store.EndpointGet(t.Context(), e.ID); e.URL != "https://hooks.example.com/new?token=s3cret" || e.Description != "Both" || len(e.FormIDs) != 2 || len(e.EventTypes) != 0 ||
		len(e.Headers) != 1 || e.Headers[0].Reveal() != "k3y-s3cret" {
		t.Errorf("after the edit: %+v", e)
	}
	if strings.Contains(f.logs.String(), "k3y-s3cret") {
		t.Error("a header's value is in the log")
	}
	f.portalPost(s, "/portal/endpoints/"+e.ID+"/edit", url.Values{"form_ids": {"billing"}}).must(t, http.StatusBadRequest).contains(t, "hoose at least one of your forms")
	if e, _ = f.store.EndpointGet(t.Context(), e.ID); len(e.FormIDs) != 2 {
		t.Errorf("an edit moved the endpoint out of the scope: %v", e.FormIDs)
	}
}
