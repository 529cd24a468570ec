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
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	oaerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/authlimit"
	"github.com/hymical/hymical/server/faceopts"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite"
)

// unexercised are the documented (route, status) pairs that no request
// here can get from a real server, each with why; a route of "*" stands
// for every route. Every other pair the document lists must be seen by
// TestOpenAPIDocument on one backend or the other.
var unexercised = map[string]string{
	// A server bug, or a store failure that is not one of its sentinels:
	// a real store does not fail so on demand.
	"* 500": "needs a bug or a store failing outside its sentinels",
	// A read writes nothing, so a full disk does not refuse it; its 503 is
	// a database that does not answer in time (timeout), on PostgreSQL one
	// short of connections (storage_busy), or one that is stopped
	// (storage_unavailable). The first two cannot be caused on demand, and
	// the last needs a PostgreSQL of the test's own, which
	// TestADatabaseAwayAnswers503AndLosesNothing stops for every route it
	// asks. Every other write route's 503 is exercised here: storage_full,
	// on a SQLite file that has run out of pages.
	"GET /v1/endpoints 503":                "a read: only a hung or starved database",
	"GET /v1/endpoints/{id} 503":           "a read: only a hung or starved database",
	"GET /v1/deliveries 503":               "a read: only a hung or starved database",
	"GET /v1/deliveries/{id} 503":          "a read: only a hung or starved database",
	"GET /v1/deliveries/{id}/attempts 503": "a read: only a hung or starved database",
	"GET /v1/deliveries/{id}/replays 503":  "a read: only a hung or starved database",
	"GET /v1/deliveries/{id}/payload 503":  "a read: only a hung or starved database",
	// One replay rewrites a small delivery row in place and adds a small
	// audit row, which fit in pages the tables already have, so a file
	// out of pages still takes it; a bulk replay of many is exercised.
	"POST /v1/deliveries/{id}/replay 503": "a small write: fits in pages already there",
	// A test event is a small event row and one delivery row.
	"POST /v1/endpoints/{id}/test 503": "a small write: fits in pages already there",
	"GET /v1/tokens 503":               "a read: only a hung or starved database",
	"POST /v1/tokens 503":              "a small write: fits in pages already there",
	"DELETE /v1/tokens/{id} 503":       "a small write: fits in pages already there",
	"POST /v1/portal/sessions 503":     "a small write: fits in pages already there",
	"GET /v1/portal/sessions 503":      "a read: only a hung or starved database",
	// Revoking rewrites the link and its session in place.
	"DELETE /v1/portal/sessions/{id} 503": "a small write: fits in pages already there",
}

// exempt says why the pair need not be seen, or "" when it must be.
func exempt(route string, status int) string {
	if why, ok := unexercised[fmt.Sprintf("%s %d", route, status)]; ok {
		return why
	}
	return unexercised[fmt.Sprintf("* %d", status)]
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

// checkCoverage fails for every documented status not seen on either
// backend and not exempt, and for an exemption of a pair the document
// does not list or that a request got after all.
func checkCoverage(t *testing.T, o openAPI, seen map[string]bool) {
	t.Helper()
	ops := o.operations()
	for _, route := range slices.Sorted(maps.Keys(ops)) {
		for _, status := range ops[route] {
			if !seen[fmt.Sprintf("%s %d", route, status)] && exempt(route, status) == "" {
				t.Errorf("%s documents %d, but no request here got it: exercise it, or add it to unexercised with why", route, status)
			}
		}
	}
	for _, pair := range slices.Sorted(maps.Keys(unexercised)) {
		i := strings.LastIndex(pair, " ")
		route := pair[:i]
		status, err := strconv.Atoi(pair[i+1:])
		if err != nil {
			t.Fatalf("unexercised has %q, not \"METHOD /path status\"", pair)
		}
		if route == "*" {
			continue
		}
		if !slices.Contains(ops[route], status) {
			t.Errorf("unexercised exempts %q, which the document does not list: drop it", pair)
		}
		if seen[pair] {
			t.Errorf("unexercised exempts %q, but a request here got it: drop it", pair)
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

// TestOpenAPIErrorCodes holds the document's list of error codes (the enum
// of ErrorResponse's code) equal to apiwire's. TestOpenAPIDocument then
// checks every error answer's code against that enum.
func TestOpenAPIErrorCodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, backends["sqlite"], nil)
	raw := f.send(req{method: "GET", path: "/v1/openapi.json"}).must(t, http.StatusOK).raw
	var doc struct {
		Components struct {
			Schemas struct {
				ErrorResponse struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []apiwire.Code
								}
							}
						}
					}
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	documented := doc.Components.Schemas.ErrorResponse.Properties.Error.Properties.Code.Enum
	if len(documented) == 0 {
		t.Fatal("components.schemas.ErrorResponse.properties.error.properties.code has no enum: list apiwire.Codes() there")
	}
	want := apiwire.Codes()
	for i, c := range documented {
		if !slices.Contains(want, c) {
			t.Errorf("server/api/openapi.json lists the error code %q, which apiwire does not declare: drop it", c)
		}
		if slices.Contains(documented[:i], c) {
			t.Errorf("server/api/openapi.json lists the error code %q twice", c)
		}
	}
	for _, c := range want {
		if !slices.Contains(documented, c) {
			t.Errorf("apiwire declares the error code %q, which server/api/openapi.json does not list in ErrorResponse's code enum: add it", c)
		}
	}
}

// TestOpenAPIDocument drives every route of a real server over a real
// store, on each backend, through its successes and its refusals, and checks
// every request and answer against the document served at
// /v1/openapi.json; on SQLite it also fills the database's file to make
// every write route answer 503 storage_full. It fails for a documented
// status no request got on either backend, unless unexercised says why.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	raw := newFixture(t, backends["sqlite"], nil).send(req{method: "GET", path: "/v1/openapi.json"}).must(t, http.StatusOK).raw
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	record := func(c *contract) {
		mu.Lock()
		defer mu.Unlock()
		maps.Copy(seen, c.seen)
	}
	t.Run("drive", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, b backend) {
			c := newContract(t, loadOpenAPI(t, raw))
			c.exercise(t, b)
			c.exerciseEveryRoute(t, b)
			c.exerciseAccess(t, b)
			record(c)
		})
		t.Run("sqlite-full", func(t *testing.T) {
			t.Parallel()
			c := newContract(t, loadOpenAPI(t, raw))
			c.exerciseFullDisk(t)
			record(c)
		})
	})
	if t.Failed() {
		return
	}
	checkCoverage(t, loadOpenAPI(t, raw), seen)
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
	big := `{"description":"` + strings.Repeat("a", faceopts.DefaultMaxBodyBytes) + `"}`

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
	// A secret-named query parameter is masked in every view, and
	// url_masked says so.
	r := c.do(f, call{route: create, token: A, body: map[string]any{"url": receiver.URL + "/?token=hunter2", "form_ids": []string{"other"}, "signature_scheme": "v1a"}, want: 201})
	if masked := r.list("url_masked"); len(masked) != 1 || masked[0] != "query:token" || strings.Contains(string(r.raw), "hunter2") {
		t.Errorf("an endpoint URL with a token: %s, want it masked and url_masked [query:token]", r.raw)
	}
	c.do(f, call{route: create, token: A, body: map[string]any{"url": receiver.URL, "secret": "mine"}, refused: true, want: 400})
	c.do(f, call{route: create, token: A, body: big, refused: true, want: 413})
	c.do(f, call{route: create, token: A, body: `{"url":"x"}`, contentType: "text/plain", refused: true, want: 415})
	c.do(f, call{route: create, token: A, body: map[string]any{"url": "ftp://hooks.example.com/"}, want: 422})

	// An Idempotency-Key makes a create safe to send again.
	const list = "GET /v1/endpoints"
	idem := map[string]string{"Idempotency-Key": "endpoint-7"}
	keyedBody := map[string]any{"url": receiver.URL + "/keyed", "form_ids": []string{"keyed"}}
	first := c.do(f, call{route: create, token: A, header: idem, body: keyedBody, want: 201})
	again := c.do(f, call{route: create, token: A, header: idem, body: keyedBody, want: 200})
	keyed := first.str("id")
	if again.header.Get("Idempotent-Replayed") != "true" || again.str("id") != keyed || again.str("secret") != first.str("secret") {
		t.Errorf("a repeated create answered %s, Idempotent-Replayed %q; want endpoint %s with its secret, marked replayed",
			again.raw, again.header.Get("Idempotent-Replayed"), keyed)
	}
	r = c.do(f, call{route: create, token: A, header: idem, body: map[string]any{"url": receiver.URL + "/else"}, want: 422})
	if code, _ := r.errorCode(t); code != "idempotency_key_reused" {
		t.Errorf("a key reused for another endpoint: code %s, want idempotency_key_reused", code)
	}

	// Three endpoints, a page of two: next_cursor leads to the last.
	page := c.do(f, call{route: list, token: A, query: "limit=2", want: 200})
	next, _ := page.body["next_cursor"].(string)
	if len(page.list("endpoints")) != 2 || next == "" {
		t.Fatalf("the first page of two of three endpoints: %s", page.raw)
	}
	page = c.do(f, call{route: list, token: A, query: "limit=2&cursor=" + next, want: 200})
	if len(page.list("endpoints")) != 1 || page.body["next_cursor"] != nil {
		t.Fatalf("the last page of three endpoints: %s", page.raw)
	}
	c.do(f, call{route: list, token: A, want: 200})
	c.do(f, call{route: list, token: A, query: "limit=0", refused: true, want: 400})
	c.do(f, call{route: list, token: A, query: "cursor=" + next[:10], refused: true, want: 400})
	// The validator lets undeclared query parameters pass; the server does not.
	r = c.do(f, call{route: list, token: A, query: "bogus=1", want: 400})
	if _, msg := r.errorCode(t); !strings.Contains(msg, "bogus") || !strings.Contains(msg, "limit, cursor") {
		t.Errorf("an unknown parameter: %q, want it named with what the route takes", msg)
	}
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
	// A keyed rotation answers a repeat with the secret it made, refuses
	// the key on another endpoint, and says so once a later rotation has
	// replaced that secret.
	const rotate = "POST /v1/endpoints/{id}/rotate-secret"
	rotKey := map[string]string{"Idempotency-Key": "rotate-1"}
	rot := c.do(f, call{route: rotate, token: A, params: one, header: rotKey, want: 200})
	rotAgain := c.do(f, call{route: rotate, token: A, params: one, header: rotKey, want: 200})
	if rotAgain.header.Get("Idempotent-Replayed") != "true" || rotAgain.str("secret") != rot.str("secret") {
		t.Errorf("a repeated keyed rotation answered %s (Idempotent-Replayed %q), want the first secret again", rotAgain.raw, rotAgain.header.Get("Idempotent-Replayed"))
	}
	c.do(f, call{route: rotate, token: A, params: map[string]string{"id": keyed}, header: rotKey, want: 422})
	c.do(f, call{route: rotate, token: A, params: one, want: 200})
	c.do(f, call{route: rotate, token: A, params: one, header: rotKey, want: 409})

	// A test event goes to this endpoint alone; a keyed repeat sends
	// nothing. (Not to ep: it is ordered now, and the test delivery would
	// hold its submissions below back.)
	const test = "POST /v1/endpoints/{id}/test"
	testKey := map[string]string{"Idempotency-Key": "test-1"}
	probed := c.do(f, call{route: create, token: A, body: map[string]any{"url": receiver.URL + "/probed", "form_ids": []string{"probed"}}, want: 201}).str("id")
	tested := c.do(f, call{route: test, token: A, params: map[string]string{"id": probed}, header: testKey, want: 202})
	if tested.str("endpoint_id") != probed || tested.str("state") != "pending" || tested.header.Get("Location") != "/v1/deliveries/"+tested.str("id") {
		t.Errorf("a test event answered %s (Location %q), want a pending delivery to %s", tested.raw, tested.header.Get("Location"), probed)
	}
	if r := c.do(f, call{route: test, token: A, params: map[string]string{"id": probed}, header: testKey, want: 200}); r.header.Get("Idempotent-Replayed") != "true" || r.str("id") != tested.str("id") {
		t.Errorf("a repeated keyed test answered %s (Idempotent-Replayed %q), want delivery %s again", r.raw, r.header.Get("Idempotent-Replayed"), tested.str("id"))
	}
	c.do(f, call{route: test, token: A, want: 404})
	c.do(f, call{route: test, token: A, params: one, header: map[string]string{"Idempotency-Key": "has space"}, refused: true, want: 400})
	c.do(f, call{route: test, token: A, params: one, body: map[string]any{"force": true}, refused: true, want: 400})
	c.do(f, call{route: test, token: A, params: one, body: big, refused: true, want: 413})
	c.do(f, call{route: test, token: A, params: one, body: `{}`, contentType: "text/plain", refused: true, want: 415})
	const payload = "GET /v1/deliveries/{id}/payload"
	if r := c.do(f, call{route: payload, token: A, params: map[string]string{"id": tested.str("id")}, want: 200}); !strings.Contains(string(r.raw), `"test":true`) {
		t.Errorf("the test delivery's payload is %s, want the hymical.test body", r.raw)
	}
	c.do(f, call{route: payload, token: A, want: 404})
	if r := c.do(f, call{route: "GET /v1/event-types", token: A, want: 200}); len(r.list("event_types")) == 0 {
		t.Errorf("the event-type catalog is empty: %s", r.raw)
	}

	// Ingest.
	const submit = "POST /v1/forms/{form_id}/submissions"
	key := map[string]string{"Idempotency-Key": "order-42"}
	r = c.do(f, call{route: submit, token: I, header: key, body: map[string]any{"email": "a@example.com"}, want: 202})
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
	// JSON that parses but that receivers cannot be trusted to read: the
	// document cannot say so, the server refuses it, naming where.
	r = c.do(f, call{route: submit, token: I, body: `{"email":"a@example.com","name":"\ud800"}`, want: 400})
	if code, msg := r.errorCode(t); code != "lone_surrogate" || !strings.Contains(msg, "at byte 33") || !strings.Contains(msg, "$.name") {
		t.Errorf("a lone surrogate: %s %q, want lone_surrogate at byte 33 of $.name", code, msg)
	}

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
	page = c.do(f, call{route: "GET /v1/deliveries", token: A, query: "limit=1", want: 200})
	next, _ = page.body["next_cursor"].(string)
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
	// A keyed replay is made once: a repeat answers with the delivery as
	// it is now, without replaying it again (a plain replay of the pending
	// delivery would be 409), and the key on another delivery is refused.
	repKey := map[string]string{"Hymical-Operator": "alice", "Idempotency-Key": "replay-1"}
	c.do(f, call{route: replay, token: A, params: one, header: repKey, want: 200})
	if r := c.do(f, call{route: replay, token: A, params: one, header: repKey, want: 200}); r.header.Get("Idempotent-Replayed") != "true" || r.str("state") != "pending" {
		t.Errorf("a repeated keyed replay answered %s (Idempotent-Replayed %q), want the pending delivery, marked replayed", r.raw, r.header.Get("Idempotent-Replayed"))
	}
	c.do(f, call{route: replay, token: A, params: one, want: 409})
	c.do(f, call{route: replay, token: A, params: map[string]string{"id": "dlv_00000000000000000000000000000000"}, header: repKey, want: 422})
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

	c.deleteEndpoints(t, f, receiver.URL, keyed, keyedBody, idem, ep)

	const bulk = "POST /v1/deliveries/replay"
	c.do(f, call{route: bulk, token: A, want: 200})
	c.do(f, call{route: bulk, token: A, body: map[string]any{"state": "delivered", "form_id": "contact", "created_after": "2020-01-01T00:00:00Z", "limit": 10}, want: 200})
	c.do(f, call{route: bulk, token: A, body: map[string]any{"limit": "ten"}, refused: true, want: 400})
	c.do(f, call{route: bulk, token: A, body: map[string]any{"limit": -1}, refused: true, want: 422})
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
		if method == "POST" || method == "PATCH" || method == "DELETE" {
			c.do(dev, call{route: route, body: body, contentType: "-", refused: true, want: 415})
		}
	}
}

// deleteEndpoints walks DELETE /v1/endpoints/{id} through its answers on
// keyed, the endpoint the Idempotency-Key idem created from keyedBody, and
// then every route about it through 410: a deleted endpoint takes no
// change, no replay, and its key creates nothing. operator is an endpoint a
// server may not delete when it is endpoints.operator_endpoint.
func (c *contract) deleteEndpoints(t *testing.T, f *fixture, receiverURL, keyed string, keyedBody map[string]any, idem map[string]string, operator string) {
	const A, I = adminToken, ingestKey
	const del = "DELETE /v1/endpoints/{id}"
	one := map[string]string{"id": keyed}
	big := `{"description":"` + strings.Repeat("a", faceopts.DefaultMaxBodyBytes) + `"}`

	// A pending delivery makes the endpoint busy.
	dlv := c.do(f, call{route: "POST /v1/forms/{form_id}/submissions", params: map[string]string{"form_id": "keyed"}, token: I,
		body: map[string]any{"email": "b@example.com"}, want: 202}).list("deliveries")
	if len(dlv) != 1 {
		t.Fatalf("a submission for form keyed fanned out to %v, want one delivery", dlv)
	}
	r := c.do(f, call{route: del, token: A, params: one, want: 409})
	if code, msg := r.errorCode(t); code != "endpoint_busy" || !strings.Contains(msg, "1 pending") || !strings.Contains(msg, "force=true") {
		t.Errorf("deleting a busy endpoint: %s %q, want endpoint_busy counting 1 pending and naming force=true", code, msg)
	}
	operatorServer := newFixtureOn(t, f.store, f.count, func(o *api.Options) { o.OperatorEndpoint = operator })
	r = c.do(operatorServer, call{route: del, token: A, params: map[string]string{"id": operator}, query: "force=true", want: 409})
	if code, _ := r.errorCode(t); code != "operator_endpoint" {
		t.Errorf("deleting the operator endpoint: code %s, want operator_endpoint", code)
	}
	c.do(f, call{route: del, token: A, want: 404})
	c.do(f, call{route: del, token: A, params: one, query: "force=yes", refused: true, want: 400})
	c.do(f, call{route: del, token: A, params: one, body: map[string]any{"force": true}, refused: true, want: 400})
	c.do(f, call{route: del, token: A, params: one, body: big, refused: true, want: 413})
	c.do(f, call{route: del, token: A, params: one, body: `{}`, contentType: "text/plain", refused: true, want: 415})

	r = c.do(f, call{route: del, token: A, params: one, query: "force=true", body: map[string]any{}, want: 200})
	if r.str("id") != keyed || r.body["failed_pending"] != 1.0 || r.body["failed_processing"] != 0.0 {
		t.Errorf("the forced delete answered %s, want %s with 1 failed pending delivery", r.raw, keyed)
	}
	d, err := f.store.DeliveryGet(t.Context(), dlv[0].(string))
	if err != nil || d.State != storage.StateFailed {
		t.Fatalf("the deleted endpoint's pending delivery is %+v, %v; want failed", d, err)
	}

	// Gone, to every route about it.
	c.do(f, call{route: del, token: A, params: one, want: 410})
	c.do(f, call{route: "GET /v1/endpoints/{id}", token: A, params: one, want: 410})
	c.do(f, call{route: "PATCH /v1/endpoints/{id}", token: A, params: one, body: map[string]any{"description": "back"}, want: 410})
	for _, action := range []string{"disable", "enable", "rotate-secret", "test"} {
		c.do(f, call{route: "POST /v1/endpoints/{id}/" + action, token: A, params: one, want: 410})
	}
	c.do(f, call{route: "POST /v1/deliveries/{id}/replay", token: A, params: map[string]string{"id": d.ID}, want: 410})
	r = c.do(f, call{route: "POST /v1/endpoints", token: A, header: idem, body: keyedBody, want: 410})
	if code, msg := r.errorCode(t); code != "endpoint_deleted" || !strings.Contains(msg, "new key") {
		t.Errorf("a create repeated after its endpoint was deleted: %s %q, want endpoint_deleted asking for a new key", code, msg)
	}
	// Its deliveries stay readable; it leaves the list.
	page := c.do(f, call{route: "GET /v1/deliveries", token: A, query: "endpoint_id=" + keyed, want: 200})
	if len(page.list("deliveries")) != 1 {
		t.Errorf("the deleted endpoint's deliveries: %s, want its one delivery", page.raw)
	}
	for _, e := range c.do(f, call{route: "GET /v1/endpoints", token: A, want: 200}).list("endpoints") {
		if e.(map[string]any)["id"] == keyed {
			t.Errorf("the deleted endpoint %s is still listed", keyed)
		}
	}
}

// exerciseFullDisk gets every write route's 503 storage_full from a real
// SQLite store whose file has run out of room: the store's writer may not
// grow the file past a cap (capped-N.db, see capWriterPages), and a ballast
// table fills every page under it. Each write below needs new pages: large
// bodies, and rows made large beforehand, which SQLite rewrites into new
// overflow pages before it frees the old ones. When the ballast is gone,
// the same writes succeed, so it was the disk that refused them.
func (c *contract) exerciseFullDisk(t *testing.T) {
	const pages = 1024 // 4 MiB
	path := filepath.Join(t.TempDir(), fmt.Sprintf("capped-%d.db", pages))
	store, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	migrate(t, store)
	disk := newBallast(t, path, pages)
	f := newFixtureOn(t, store, disk.count, nil)
	receiver := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(receiver.Close)
	const A, I = adminToken, ingestKey

	// An endpoint whose row spills into overflow pages: a hundred form ids
	// and event types of 128 bytes each.
	var forms, types []string
	for i := range 100 {
		forms = append(forms, fmt.Sprintf("form-%03d-%s", i, strings.Repeat("f", 119)))
		types = append(types, fmt.Sprintf("type-%03d-%s", i, strings.Repeat("t", 119)))
	}
	wide := map[string]any{"url": receiver.URL + "/hook", "form_ids": forms, "event_types": append(types[:99], "submission.received")}
	ep := c.do(f, call{route: "POST /v1/endpoints", token: A, body: wide, want: 201}).str("id")
	one := map[string]string{"id": ep}
	// Failed deliveries to replay in bulk: enough that their audit rows
	// need pages of their own.
	outcomes := map[string]storage.OutcomeKind{}
	for i := range 100 {
		r := f.submit(forms[0], map[string]any{"n": i}).must(t, http.StatusAccepted)
		outcomes[r.list("deliveries")[0].(string)] = storage.OutcomePermanent
	}
	settle(t, store, outcomes)
	// A second such endpoint, disabled, to enable: enabling an enabled
	// endpoint writes nothing.
	paused := map[string]string{"id": c.do(f, call{route: "POST /v1/endpoints", token: A, body: wide, want: 201}).str("id")}
	c.do(f, call{route: "POST /v1/endpoints/{id}/disable", token: A, params: paused, want: 200})

	pad := strings.Repeat("x", 256<<10)
	writes := []call{
		{route: "POST /v1/forms/{form_id}/submissions", params: map[string]string{"form_id": forms[0]}, token: I, body: map[string]any{"pad": pad}},
		{route: "POST /v1/events", token: I, body: map[string]any{"type": types[0], "payload": map[string]any{"pad": pad}}},
		{route: "POST /v1/endpoints", token: A, body: wide},
		{route: "PATCH /v1/endpoints/{id}", token: A, params: one, body: map[string]any{"description": "changed"}},
		{route: "POST /v1/endpoints/{id}/disable", token: A, params: one},
		{route: "POST /v1/endpoints/{id}/enable", token: A, params: paused},
		{route: "POST /v1/endpoints/{id}/rotate-secret", token: A, params: one},
		{route: "POST /v1/deliveries/replay", token: A, header: map[string]string{"Hymical-Operator": strings.Repeat("o", storage.MaxOperatorBytes)}},
		{route: "DELETE /v1/endpoints/{id}", token: A, params: one, query: "force=true"},
	}
	disk.fill()
	for _, w := range writes {
		w.want = http.StatusServiceUnavailable
		r := c.do(f, w)
		if code, msg := r.errorCode(t); code != "storage_full" || !strings.Contains(msg, "send it again later") || r.header.Get("Retry-After") != "30" {
			t.Errorf("%s on a full disk: %s %q, Retry-After %q; want storage_full, to send it again later, after 30 s",
				w.route, code, msg, r.header.Get("Retry-After"))
		}
	}
	disk.free()
	for _, w := range writes {
		w.want = http.StatusOK
		switch w.route {
		case "POST /v1/forms/{form_id}/submissions", "POST /v1/events":
			w.want = http.StatusAccepted
		case "POST /v1/endpoints":
			w.want = http.StatusCreated
		}
		c.do(f, w)
	}
}
