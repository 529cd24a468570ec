package console_test

import (
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/sdk/webhook"

	"github.com/hymical/hymical/server/console"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

const adminToken = "test-admin-token-0123456789abcdef0123"

// fixture is the real console on a real loopback server over a fresh,
// migrated SQLite store. The console only calls Store methods that the
// conformance suite proves on both backends, so SQLite is enough here.
type fixture struct {
	t     *testing.T
	store storage.Store
	srv   *httptest.Server
	logs  *syncbuf.Buffer
	// transports is the plugin host the add and edit pages ask.
	transports console.Transports
}

func newFixture(t *testing.T, edit func(*console.Options)) *fixture {
	t.Helper()
	return newFixtureOn(t, e2etest.Backends()["sqlite"](t), edit)
}

// newFixtureOn serves a console of its own over store.
func newFixtureOn(t *testing.T, store storage.Store, edit func(*console.Options)) *fixture {
	t.Helper()
	logs := &syncbuf.Buffer{}
	trace, err := telemetry.ParseTraceURLTemplate("https://traces.example.com/trace/{trace_id}")
	if err != nil {
		t.Fatal(err)
	}
	host, err := pluginHost()
	if err != nil {
		t.Fatalf("start the http plugin: %v", err)
	}
	opts := console.Options{
		Store:            store,
		Transports:       host,
		AdminTokenDigest: sha256.Sum256([]byte(adminToken)),
		TraceURL:         trace,
		Logger:           slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&opts)
	}
	h, err := console.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(console.Prefix+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &fixture{t: t, store: store, srv: srv, logs: logs, transports: host}
}

// page is one answer.
type page struct {
	status int
	header http.Header
	body   string
}

// req is one request: form is sent as a urlencoded POST body.
type req struct {
	method, path string
	form         url.Values
	cookie       string
	header       map[string]string
}

// do sends r without following redirects, so tests see them.
func (f *fixture) do(r req) page {
	f.t.Helper()
	var body io.Reader
	if r.form != nil {
		body = strings.NewReader(r.form.Encode())
	}
	method := r.method
	if method == "" {
		method = http.MethodGet
		if r.form != nil {
			method = http.MethodPost
		}
	}
	hr, err := http.NewRequestWithContext(f.t.Context(), method, f.srv.URL+r.path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if r.form != nil {
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if r.cookie != "" {
		// Set by hand: the cookie is Secure, and a cookie jar would not
		// send it over the test server's plain http.
		hr.AddCookie(&http.Cookie{Name: console.CookieName, Value: r.cookie})
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	client := *f.srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(hr)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return page{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

func (p page) must(t *testing.T, status int) page {
	t.Helper()
	if p.status != status {
		t.Fatalf("status %d, want %d:\n%s", p.status, status, p.body)
	}
	return p
}

func (p page) contains(t *testing.T, want ...string) page {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(p.body, w) {
			t.Errorf("page lacks %q:\n%s", w, p.body)
		}
	}
	return p
}

func (p page) lacks(t *testing.T, unwanted ...string) page {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(p.body, w) {
			t.Errorf("page shows %q:\n%s", w, p.body)
		}
	}
	return p
}

// sessionCookie returns the session cookie a response set.
func (p page) sessionCookie() *http.Cookie {
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == console.CookieName {
			return c
		}
	}
	return nil
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login logs in with the admin token as operator and returns a session:
// its cookie value and its CSRF token, read from the overview's forms.
func (f *fixture) login(operator string) session {
	f.t.Helper()
	p := f.do(req{path: "/console/login", form: url.Values{"token": {adminToken}, "operator": {operator}, "next": {"/console/"}}}).must(f.t, http.StatusSeeOther)
	c := p.sessionCookie()
	if c == nil {
		f.t.Fatalf("login set no session cookie: %v", p.header)
	}
	s := session{cookie: c.Value}
	m := csrfField.FindStringSubmatch(f.do(req{path: "/console/", cookie: s.cookie}).must(f.t, http.StatusOK).body)
	if m == nil {
		f.t.Fatal("the overview has no form with a CSRF token")
	}
	s.csrf = m[1]
	return s
}

type session struct{ cookie, csrf string }

// get fetches a page in session s.
func (f *fixture) get(s session, path string) page {
	f.t.Helper()
	return f.do(req{path: path, cookie: s.cookie})
}

// post sends a form in session s with its CSRF token.
func (f *fixture) post(s session, path string, form url.Values) page {
	f.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", s.csrf)
	return f.do(req{path: path, form: form, cookie: s.cookie})
}

// endpoint registers an endpoint for form directly in the store.
func (f *fixture) endpoint(form, description string) storage.Endpoint {
	f.t.Helper()
	secret, err := webhook.NewSecret()
	if err != nil {
		f.t.Fatal(err)
	}
	e, err := f.store.EndpointCreate(f.t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{
		Transport: "http", URL: "https://hooks.example.com/" + form, FormIDs: []string{form}, Description: description,
		Config: map[string]string{}, Secrets: []storage.Secret{storage.NewSecret(secret, nil)},
	}})
	if err != nil {
		f.t.Fatal(err)
	}
	return e.Endpoint
}

// submit makes n submissions of form, each fanning out to the one
// endpoint registered for it, and returns their delivery ids, oldest first.
func (f *fixture) submit(form string, n int) []string {
	f.t.Helper()
	var ids []string
	for i := range n {
		ev, err := event.Submission(form, []byte(fmt.Sprintf(`{"n":%d}`, i)), time.Now())
		if err != nil {
			f.t.Fatal(err)
		}
		res, err := f.store.EventCreate(f.t.Context(), ev)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, d := range res.Deliveries {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// outcome is what settle records for one delivery.
type outcome struct {
	kind    storage.OutcomeKind
	status  int
	err     string
	traceID string
}

// settle claims every due delivery and completes those in outcomes as
// given (failing the retryable ones for good: the allowance is 1); the
// others are released to pending unspent.
func (f *fixture) settle(outcomes map[string]outcome) {
	f.t.Helper()
	ctx := f.t.Context()
	claims, err := f.store.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 1000, Lease: time.Minute})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, c := range claims {
		o, ok := outcomes[c.Delivery.ID]
		if !ok {
			if _, err := f.store.DeliveryRelease(ctx, storage.DeliveryReleaseParams{DeliveryID: c.Delivery.ID, Token: c.Token}); err != nil {
				f.t.Fatal(err)
			}
			continue
		}
		now := time.Now()
		if _, _, err := f.store.DeliveryComplete(ctx, storage.DeliveryCompleteParams{
			DeliveryID: c.Delivery.ID, Token: c.Token, Outcome: o.kind, HTTPStatus: o.status, Error: o.err,
			StartedAt: now.Add(-120 * time.Millisecond), FinishedAt: now, TraceID: o.traceID, MaxCycleAttempts: 1,
		}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// failAll fails the given deliveries for good with a 400.
func (f *fixture) failAll(ids ...string) {
	f.t.Helper()
	m := map[string]outcome{}
	for _, id := range ids {
		m[id] = outcome{kind: storage.OutcomePermanent, status: 400, err: "receiver answered 400 Bad Request"}
	}
	f.settle(m)
}

func (f *fixture) state(id string) storage.DeliveryState {
	f.t.Helper()
	d, err := f.store.DeliveryGet(f.t.Context(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return d.State
}
