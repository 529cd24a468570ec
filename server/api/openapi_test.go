package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	oaerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/authlimit"
	"github.com/hymical/hymical/storage"
)

// unexercised are the documented statuses no test here can make the real
// server answer, each with why. Every other (route, status) pair the
// document lists must be seen by TestOpenAPIDocument.
var unexercised = map[int]string{
	// A server bug or a store failure that is not one of its sentinels;
	// a real store does not fail on demand.
	http.StatusInternalServerError: "needs a failing store or a bug",
	// The database not answering within the request's deadline, or a
	// transport plugin that does not answer its Validate call: neither
	// real part can be made to hang on demand. /readyz's 503 is exercised.
	http.StatusServiceUnavailable: "needs a hung database or plugin (except /readyz)",
}

// exempt says whether the pair need not be seen.
func exempt(route string, status int) bool {
	if route == "GET /readyz" && status == http.StatusServiceUnavailable {
		return false
	}
	_, ok := unexercised[status]
	return ok
}

// openAPI is the document as the server serves it, parsed.
type openAPI struct {
	raw   []byte
	doc   libopenapi.Document
	model *v3.Document
}

func loadOpenAPI(t *testing.T, raw []byte) openAPI {
	t.Helper()
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		t.Fatalf("the OpenAPI document does not parse: %v", err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("the OpenAPI document does not build: %v", err)
	}
	return openAPI{raw: raw, doc: doc, model: &m.Model}
}

// operations maps "METHOD /path" to the statuses the document lists.
func (o openAPI) operations() map[string][]int {
	out := map[string][]int{}
	for path, item := range o.model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			var codes []int
			for code := range op.Responses.Codes.KeysFromOldest() {
				var n int
				if _, err := fmt.Sscan(code, &n); err == nil {
					codes = append(codes, n)
				}
			}
			out[strings.ToUpper(method)+" "+path] = codes
		}
	}
	return out
}

// contract sends requests to a real server and checks each request and
// answer against the document, recording which (route, status) pairs it saw.
type contract struct {
	t    *testing.T
	api  openAPI
	v    validator.Validator
	seen map[string]bool
}

func newContract(t *testing.T, o openAPI) *contract {
	t.Helper()
	v, errs := validator.NewValidator(o.doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errors.Join(errs...))
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("the document breaks the OpenAPI 3.1 schema: %s: %s", e.Message, e.Reason)
		}
		t.FailNow()
	}
	return &contract{t: t, api: o, v: v, seen: map[string]bool{}}
}

// call is one request: route is a documented "METHOD /template", with
// its {params} filled from the document's examples unless given.
type call struct {
	route  string
	params map[string]string
	query  string
	token  string
	header map[string]string
	// host replaces the Host header.
	host string
	// body is sent as is when a string, as JSON otherwise; nil sends none.
	body any
	// contentType replaces application/json; "-" sends none.
	contentType string
	// refused says the document itself rejects this request (a value out
	// of its schema): the validator must find it, as a client generated
	// from the document would never send it.
	refused bool
	want    int
}

func (c *contract) do(f *fixture, cl call) response {
	c.t.Helper()
	method, path, ok := strings.Cut(cl.route, " ")
	if !ok {
		c.t.Fatalf("route %q is not METHOD /path", cl.route)
	}
	for name, v := range cl.params {
		path = strings.ReplaceAll(path, "{"+name+"}", v)
	}
	for _, name := range []string{"id", "form_id"} {
		path = strings.ReplaceAll(path, "{"+name+"}", map[string]string{"id": "nothing_here", "form_id": "contact"}[name])
	}
	url := f.srv.URL + path
	if cl.query != "" {
		url += "?" + cl.query
	}
	var body []byte
	switch b := cl.body.(type) {
	case nil:
	case string:
		body = []byte(b)
	default:
		var err error
		if body, err = json.Marshal(b); err != nil {
			c.t.Fatal(err)
		}
	}
	build := func() *http.Request {
		var rd io.Reader
		if cl.body != nil {
			rd = bytes.NewReader(body)
		}
		hr, err := http.NewRequestWithContext(c.t.Context(), method, url, rd)
		if err != nil {
			c.t.Fatal(err)
		}
		switch {
		case cl.contentType == "-":
		case cl.contentType != "":
			hr.Header.Set("Content-Type", cl.contentType)
		case cl.body != nil:
			hr.Header.Set("Content-Type", "application/json")
		}
		if cl.token != "" {
			hr.Header.Set("Authorization", "Bearer "+cl.token)
		}
		for k, v := range cl.header {
			hr.Header.Set(k, v)
		}
		if cl.host != "" {
			hr.Host = cl.host
		}
		return hr
	}
	resp, err := f.srv.Client().Do(build())
	if err != nil {
		c.t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	name := fmt.Sprintf("%s (want %d)", cl.route, cl.want)
	if resp.StatusCode != cl.want {
		c.t.Fatalf("%s: status %d: %s", name, resp.StatusCode, raw)
	}
	c.seen[fmt.Sprintf("%s %d", cl.route, resp.StatusCode)] = true

	okReq, reqErrs := c.v.ValidateHttpRequestSync(build())
	switch {
	case cl.refused && okReq:
		c.t.Errorf("%s: the document accepts a request the test sends as one it refuses", name)
	case !cl.refused && !okReq:
		for _, e := range reqErrs {
			c.t.Errorf("%s: the request breaks the document: %s: %s%s", name, e.Message, e.Reason, schemaErrors(e.SchemaValidationErrors))
		}
	}
	answer := &http.Response{StatusCode: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(raw)), Request: build()}
	if ok, errs := c.v.ValidateHttpResponse(build(), answer); !ok {
		for _, e := range errs {
			c.t.Errorf("%s: the answer %d breaks the document: %s: %s%s\n%s", name, resp.StatusCode, e.Message, e.Reason, schemaErrors(e.SchemaValidationErrors), raw)
		}
	}
	out := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(raw, &out.body)
	}
	return out
}

// schemaErrors lists where and why a body broke its schema.
func schemaErrors(errs []*oaerrors.SchemaValidationFailure) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n\t%s: %s", e.FieldPath, e.Reason)
	}
	return b.String()
}

// example is the request body the document gives as an example for an
// operation, so the generic checks send what a client would.
func (c *contract) example(route string) any {
	method, path, _ := strings.Cut(route, " ")
	item, ok := c.api.model.Paths.PathItems.Get(path)
	if !ok {
		return nil
	}
	op, ok := item.GetOperations().Get(strings.ToLower(method))
	if !ok || op.RequestBody == nil {
		return nil
	}
	mt, ok := op.RequestBody.Content.Get("application/json")
	if !ok || mt.Example == nil {
		c.t.Fatalf("%s: the request body has no example", route)
	}
	var v any
	if err := mt.Example.Decode(&v); err != nil {
		c.t.Fatal(err)
	}
	return v
}

// secured says whether the document lets a route take a token, whether
// only the admin token, and whether it may also be called without one.
func (c *contract) secured(route string) (secured, adminOnly, anonymous bool) {
	method, path, _ := strings.Cut(route, " ")
	item, _ := c.api.model.Paths.PathItems.Get(path)
	op, _ := item.GetOperations().Get(strings.ToLower(method))
	// Every operation states its security; an empty list is a public route.
	sec := op.Security
	if len(sec) == 0 {
		return false, false, true
	}
	adminOnly = true
	for _, req := range sec {
		if req.Requirements == nil || req.Requirements.Len() == 0 {
			anonymous = true
			continue
		}
		if _, ok := req.Requirements.Get("ingestKey"); ok {
			adminOnly = false
		}
	}
	return true, adminOnly, anonymous
}

// checkCoverage fails for every documented status not seen and not exempt.
func (c *contract) checkCoverage() {
	c.t.Helper()
	ops := c.api.operations()
	for _, route := range slices.Sorted(maps.Keys(ops)) {
		for _, status := range ops[route] {
			if !c.seen[fmt.Sprintf("%s %d", route, status)] && !exempt(route, status) {
				c.t.Errorf("%s documents %d, but no request here got it: exercise it, or add it to unexercised with why", route, status)
			}
		}
	}
}

// TestOpenAPIRoutes holds the document and the mux to each other: every
// registered pattern is documented and every documented operation is
// registered.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, backends["sqlite"], nil)
	raw := f.send(req{method: "GET", path: "/v1/openapi.json"}).must(t, http.StatusOK).raw
	ops := loadOpenAPI(t, raw).operations()
	h, err := api.New(api.Options{Store: f.store, Transports: loopbackHost, AdminToken: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	registered := api.RoutePatterns(h)
	if len(registered) == 0 {
		t.Fatal("no routes registered")
	}
	for _, p := range registered {
		if _, ok := ops[p]; !ok {
			t.Errorf("route %q is served but missing from server/api/openapi.json: document it", p)
		}
	}
	for op := range ops {
		if !slices.Contains(registered, op) {
			t.Errorf("server/api/openapi.json documents %q, which the server does not serve", op)
		}
	}
}

// TestOpenAPIDocument drives every route of a real server over a real
// store, on each backend, through its successes and its refusals, and checks
// every request and answer against the document served at
// /v1/openapi.json. It fails for a documented status no request got.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		raw := newFixture(t, b, nil).send(req{method: "GET", path: "/v1/openapi.json"}).must(t, http.StatusOK).raw
		c := newContract(t, loadOpenAPI(t, raw))
		c.exercise(t, b)
		c.exerciseEveryRoute(t, b)
		c.checkCoverage()
	})
}

// exercise walks each route through its own successes and refusals.
func (c *contract) exercise(t *testing.T, b backend) {
	receiver := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(receiver.Close)
	var notReady atomic.Bool
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, "hymical_attempts_total 1\n")
	})
	f := newFixture(t, b, func(o *api.Options) {
		o.Metrics = metrics
		o.Ready = func(context.Context) error {
			if notReady.Load() {
				return errors.New("the test says so")
			}
			return nil
		}
	})
	const A, I = adminToken, ingestKey
	big := `{"description":"` + strings.Repeat("a", api.DefaultMaxBodyBytes) + `"}`

	// Probes and this document.
	c.do(f, call{route: "GET /healthz", want: 200})
	c.do(f, call{route: "GET /readyz", want: 200})
	notReady.Store(true)
	c.do(f, call{route: "GET /readyz", want: 503})
	c.do(f, call{route: "GET /metrics", token: A, want: 200})
	c.do(f, call{route: "GET /v1/openapi.json", want: 200})

	// Endpoints.
	const create = "POST /v1/endpoints"
	ep := c.do(f, call{route: create, token: A, body: map[string]any{"url": receiver.URL + "/hook", "form_ids": []string{"contact"}, "rate_limit": 5, "retry_schedule": []string{"1s"}}, want: 201}).str("id")
	c.do(f, call{route: create, token: A, body: map[string]any{"url": receiver.URL, "form_ids": []string{"other"}, "signature_scheme": "v1a"}, want: 201})
	c.do(f, call{route: create, token: A, body: map[string]any{"url": receiver.URL, "secret": "mine"}, refused: true, want: 400})
	c.do(f, call{route: create, token: A, body: big, refused: true, want: 413})
	c.do(f, call{route: create, token: A, body: `{"url":"x"}`, contentType: "text/plain", refused: true, want: 415})
	c.do(f, call{route: create, token: A, body: map[string]any{"url": "ftp://hooks.example.com/"}, want: 422})

	c.do(f, call{route: "GET /v1/endpoints", token: A, want: 200})
	// The validator lets undeclared query parameters pass; the server does not.
	c.do(f, call{route: "GET /v1/endpoints", token: A, query: "limit=1", want: 400})
	one := map[string]string{"id": ep}
	c.do(f, call{route: "GET /v1/endpoints/{id}", token: A, params: one, want: 200})
	c.do(f, call{route: "GET /v1/endpoints/{id}", token: A, want: 404})

	const patch = "PATCH /v1/endpoints/{id}"
	c.do(f, call{route: patch, token: A, params: one, body: map[string]any{"description": "CRM", "rate_limit": nil, "ordered": true}, want: 200})
	c.do(f, call{route: patch, token: A, params: one, body: map[string]any{"description": 5}, refused: true, want: 400})
	c.do(f, call{route: patch, token: A, body: map[string]any{"description": "x"}, want: 404})
	c.do(f, call{route: patch, token: A, params: one, body: big, refused: true, want: 413})
	c.do(f, call{route: patch, token: A, params: one, body: `{}`, contentType: "text/plain", refused: true, want: 415})
	c.do(f, call{route: patch, token: A, params: one, body: map[string]any{"url": "ftp://hooks.example.com/"}, want: 422})

	for _, route := range []string{"POST /v1/endpoints/{id}/disable", "POST /v1/endpoints/{id}/enable", "POST /v1/endpoints/{id}/rotate-secret"} {
		c.do(f, call{route: route, token: A, params: one, want: 200})
		c.do(f, call{route: route, token: A, params: one, body: map[string]any{}, want: 200})
		c.do(f, call{route: route, token: A, want: 404})
		c.do(f, call{route: route, token: A, params: one, body: map[string]any{"disabled": true}, refused: true, want: 400})
		c.do(f, call{route: route, token: A, params: one, body: big, refused: true, want: 413})
		c.do(f, call{route: route, token: A, params: one, body: `{}`, contentType: "text/plain", refused: true, want: 415})
	}

	// Ingest.
	const submit = "POST /v1/forms/{form_id}/submissions"
	key := map[string]string{"Idempotency-Key": "order-42"}
	r := c.do(f, call{route: submit, token: I, header: key, body: map[string]any{"email": "a@example.com"}, want: 202})
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("a new submission is marked as replayed")
	}
	r = c.do(f, call{route: submit, token: I, header: key, body: map[string]any{"email": "a@example.com"}, want: 200})
	if r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a repeated Idempotency-Key is not marked as replayed: %v", r.header)
	}
	dlv := r.list("deliveries")
	if len(dlv) != 1 {
		t.Fatalf("the submission fanned out to %v, want one delivery", dlv)
	}
	c.do(f, call{route: submit, token: I, header: map[string]string{"Idempotency-Key": "has space"}, body: map[string]any{}, refused: true, want: 400})
	c.do(f, call{route: submit, token: I, body: big, want: 413})
	c.do(f, call{route: submit, token: I, body: `{}`, contentType: "text/plain", refused: true, want: 415})
	c.do(f, call{route: submit, token: I, body: `[1]`, refused: true, want: 422})

	const events = "POST /v1/events"
	ev := map[string]any{"type": "form.published", "form_id": "contact", "payload": map[string]any{"title": "Contact us"}}
	c.do(f, call{route: events, token: I, header: key, body: ev, want: 202})
	c.do(f, call{route: events, token: A, header: key, body: ev, want: 200})
	c.do(f, call{route: events, token: I, body: `{"type":`, refused: true, want: 400})
	c.do(f, call{route: events, token: I, body: big, refused: true, want: 413})
	c.do(f, call{route: events, token: I, body: `{}`, contentType: "text/plain", refused: true, want: 415})
	c.do(f, call{route: events, token: I, body: map[string]any{"type": "hymical.endpoint.disabled", "payload": map[string]any{}}, want: 422})

	// Deliveries.
	id := dlv[0].(string)
	one = map[string]string{"id": id}
	c.do(f, call{route: "GET /v1/deliveries", token: A, query: "limit=1&form_id=contact", want: 200})
	page := c.do(f, call{route: "GET /v1/deliveries", token: A, query: "limit=1", want: 200})
	next, _ := page.body["next_cursor"].(string)
	if next == "" {
		t.Fatalf("the first page of one says there is no next: %s", page.raw)
	}
	c.do(f, call{route: "GET /v1/deliveries", token: A, query: "limit=1&cursor=" + next, want: 200})
	c.do(f, call{route: "GET /v1/deliveries", token: A, query: "state=lost", refused: true, want: 400})

	const replay = "POST /v1/deliveries/{id}/replay"
	c.do(f, call{route: replay, token: A, params: one, want: 409})
	settle(t, f.store, map[string]storage.OutcomeKind{id: storage.OutcomePermanent})
	for _, route := range []string{"GET /v1/deliveries/{id}", "GET /v1/deliveries/{id}/attempts", "GET /v1/deliveries/{id}/replays"} {
		c.do(f, call{route: route, token: A, params: one, want: 200})
		c.do(f, call{route: route, token: A, want: 404})
	}
	c.do(f, call{route: replay, token: A, params: one, header: map[string]string{"Hymical-Operator": "alice"}, want: 200})
	c.do(f, call{route: "GET /v1/deliveries/{id}/replays", token: A, params: one, want: 200})
	c.do(f, call{route: replay, token: A, want: 404})
	c.do(f, call{route: replay, token: A, params: one, body: map[string]any{"force": true}, refused: true, want: 400})
	c.do(f, call{route: replay, token: A, params: one, body: big, refused: true, want: 413})
	c.do(f, call{route: replay, token: A, params: one, body: `{}`, contentType: "text/plain", refused: true, want: 415})

	// Outside the document: a documented path with a method it does not
	// list (405, components.responses.MethodNotAllowed) and a path it does
	// not have (404). Their answers are still ErrorResponse.
	proxy, ok := c.api.model.Components.Schemas.Get("ErrorResponse")
	if !ok {
		t.Fatal("the document has no ErrorResponse schema")
	}
	sv := schema_validation.NewSchemaValidator()
	for _, u := range []struct {
		method, path string
		want         int
	}{{"PUT", "/v1/deliveries", 405}, {"GET", "/v1/nothing", 404}} {
		r := f.send(req{method: u.method, path: u.path, token: A}).must(t, u.want)
		if ok, errs := sv.ValidateSchemaBytes(proxy.Schema(), r.raw); !ok {
			t.Errorf("%s %s: the answer is not an ErrorResponse: %v", u.method, u.path, errs)
		}
		if u.want == 405 && r.header.Get("Allow") == "" {
			t.Errorf("%s %s: a 405 without Allow", u.method, u.path)
		}
	}

	const bulk = "POST /v1/deliveries/replay"
	c.do(f, call{route: bulk, token: A, want: 200})
	c.do(f, call{route: bulk, token: A, body: map[string]any{"state": "delivered", "form_id": "contact", "created_after": "2020-01-01T00:00:00Z", "limit": 10}, want: 200})
	c.do(f, call{route: bulk, token: A, body: map[string]any{"limit": -1}, refused: true, want: 400})
	c.do(f, call{route: bulk, token: A, body: big, refused: true, want: 413})
	c.do(f, call{route: bulk, token: A, body: `{}`, contentType: "text/plain", refused: true, want: 415})
	c.do(f, call{route: bulk, token: A, body: map[string]any{"state": "pending"}, refused: true, want: 422})
}

// exerciseEveryRoute sends each documented operation what every route
// refuses alike: no token (401), an ingest key where the admin token is
// needed (403), a token from an address that guessed too often (429), and,
// in insecure dev mode, a foreign Host (421), a cross-site browser request
// (403) and a write without a JSON Content-Type (415).
func (c *contract) exerciseEveryRoute(t *testing.T, b backend) {
	f := newFixture(t, b, nil)
	dev := newFixture(t, b, func(o *api.Options) { o.Insecure, o.AdminToken, o.IngestKeys = true, "", nil })
	limited := newFixture(t, b, func(o *api.Options) {
		o.AuthLimiter = authlimit.MustNew(authlimit.Config{Failures: 1, Window: time.Hour, Logger: o.Logger})
	})
	c.do(limited, call{route: "GET /v1/endpoints", token: "guessed-token-0123456789abcdef", want: 401})

	_, port, err := net.SplitHostPort(dev.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.do(dev, call{route: "GET /metrics", want: 404})
	for _, route := range slices.Sorted(maps.Keys(c.api.operations())) {
		body := c.example(route)
		method, _, _ := strings.Cut(route, " ")
		secured, adminOnly, anonymous := c.secured(route)
		if secured {
			c.do(f, call{route: route, body: body, refused: !anonymous, want: 401})
			c.do(limited, call{route: route, token: adminToken, body: body, want: 429})
		}
		if adminOnly {
			c.do(f, call{route: route, token: ingestKey, body: body, want: 403})
		}
		c.do(dev, call{route: route, body: body, host: "rebound.example:" + port, refused: !anonymous, want: 421})
		c.do(dev, call{route: route, body: body, header: map[string]string{"Sec-Fetch-Site": "cross-site"}, refused: !anonymous, want: 403})
		if method == "POST" || method == "PATCH" {
			c.do(dev, call{route: route, body: body, contentType: "-", refused: true, want: 415})
		}
	}
}
