package api_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/server/access"
	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/authlimit"
	"github.com/hymical/hymical/storage"
)

// scopeWorld is a server with the credentials of the access table: the
// admin token and five scoped tokens, four of them for form "a".
type scopeWorld struct {
	*fixture
	receiver string
	tokens   map[string]string // role → bearer token
	cells    int
}

// The roles of the access table, in its column order.
var roles = []string{"admin", "scoped read-write", "scoped read-only", "other scope", "expired", "revoked"}

func newScopeWorld(t *testing.T, b backend, edit func(*api.Options)) *scopeWorld {
	t.Helper()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// JSON, so the table's one request helper can read every answer.
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	})
	f := newFixture(t, b, func(o *api.Options) {
		o.Metrics = metrics
		if edit != nil {
			edit(o)
		}
	})
	receiver := loopbackReceiver(t)
	w := &scopeWorld{fixture: f, receiver: receiver, tokens: map[string]string{"admin": adminToken}}
	w.tokens["scoped read-write"] = w.token([]string{"a"}, false, time.Hour, 0)
	w.tokens["scoped read-only"] = w.token([]string{"a"}, true, time.Hour, 0)
	w.tokens["other scope"] = w.token([]string{"b"}, false, time.Hour, 0)
	w.tokens["expired"] = w.token([]string{"a"}, false, time.Hour, 2*time.Hour)
	revoked := w.token([]string{"a"}, false, time.Hour, 0)
	t0, err := access.Authenticate(t.Context(), f.store, revoked, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.admin("DELETE", "/v1/tokens/"+t0.ID, nil).must(t, http.StatusOK)
	w.tokens["revoked"] = revoked
	return w
}

// loopbackReceiver is a real receiver on loopback that takes everything.
func loopbackReceiver(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// token makes a scoped token in the store, made ago and valid for life
// from then: ago past life makes an expired one, as the API cannot.
func (w *scopeWorld) token(forms []string, readOnly bool, life, ago time.Duration) string {
	w.t.Helper()
	scope, err := access.NewScope(forms, readOnly)
	if err != nil {
		w.t.Fatal(err)
	}
	made := time.Now().Add(-ago)
	secret, _, err := access.NewToken(w.t.Context(), w.store, "test", scope, made.Add(life), made)
	if err != nil {
		w.t.Fatal(err)
	}
	return secret
}

// cell is what one cell of the table works on: an endpoint of form a
// that only its own event type reaches, a failed delivery to it, a scoped
// token and a portal link.
type cell struct{ endpoint, delivery, token, link string }

func (w *scopeWorld) newCell() cell {
	w.t.Helper()
	w.cells++
	typ := fmt.Sprintf("cell.n%d", w.cells)
	ep, _ := w.createEndpoint(map[string]any{"url": w.receiver + "/hook", "form_ids": []string{"a"}, "event_types": []string{typ}})
	r := w.send(req{method: "POST", path: "/v1/events", token: ingestKey,
		body: map[string]any{"type": typ, "form_id": "a", "payload": map[string]any{"n": w.cells}}}).must(w.t, http.StatusAccepted)
	dlv := r.list("deliveries")
	if len(dlv) != 1 {
		w.t.Fatalf("the cell's event fanned out to %v, want one delivery", dlv)
	}
	d := dlv[0].(string)
	settle(w.t, w.store, map[string]storage.OutcomeKind{d: storage.OutcomePermanent})
	tok := w.token([]string{"a"}, false, time.Hour, 0)
	t0, err := access.Authenticate(w.t.Context(), w.store, tok, time.Now())
	if err != nil {
		w.t.Fatal(err)
	}
	scope, err := access.NewScope([]string{"a"}, false)
	if err != nil {
		w.t.Fatal(err)
	}
	_, link, err := access.NewPortalLink(w.t.Context(), w.store, scope, time.Minute, time.Hour, time.Now())
	if err != nil {
		w.t.Fatal(err)
	}
	return cell{endpoint: ep, delivery: d, token: t0.ID, link: link.ID}
}

// accessRow is one route of the table: the request it sends, on a fresh
// cell, and the status each role must get.
type accessRow struct {
	request func(c cell) req
	want    [6]int
}

func path(p string) func(cell) req {
	method, p, _ := strings.Cut(p, " ")
	return func(c cell) req {
		p := strings.NewReplacer("{endpoint}", c.endpoint, "{delivery}", c.delivery, "{token}", c.token, "{link}", c.link).Replace(p)
		var body any
		if method != "GET" && method != "DELETE" {
			body = map[string]any{}
		}
		return req{method: method, path: p, body: body}
	}
}

func withBody(p string, body map[string]any) func(cell) req {
	build := path(p)
	return func(c cell) req {
		r := build(c)
		b := map[string]any{}
		for k, v := range body {
			if v == "{endpoint}" {
				v = c.endpoint
			}
			b[k] = v
		}
		r.body = b
		return r
	}
}

// The statuses of a scoped route for the roles that can open it: the
// admin and a read-write token of the scope succeed, a read-only one
// may read, another scope's token meets a missing id.
func scopedRead(ok int) [6]int  { return [6]int{ok, ok, ok, 404, 401, 401} }
func scopedWrite(ok int) [6]int { return [6]int{ok, ok, 403, 404, 401, 401} }
func adminOnly(ok int) [6]int   { return [6]int{ok, 403, 403, 403, 401, 401} }

var everyone = [6]int{200, 200, 200, 200, 200, 200}

// accessTable is every route the API registers. A route without a row
// fails TestAccessTable: say who may call it.
func accessTable(receiver string) map[string]accessRow {
	return map[string]accessRow{
		"GET /healthz":         {path("GET /healthz"), everyone},
		"GET /readyz":          {path("GET /readyz"), everyone},
		"GET /v1/openapi.json": {path("GET /v1/openapi.json"), everyone},
		"GET /metrics":         {path("GET /metrics"), adminOnly(200)},

		"POST /v1/forms/{form_id}/submissions": {withBody("POST /v1/forms/a/submissions", map[string]any{"email": "x@example.com"}), adminOnly(202)},
		"POST /v1/events":                      {withBody("POST /v1/events", map[string]any{"type": "nobody.listens", "form_id": "a", "payload": map[string]any{}}), adminOnly(202)},

		// Another scope's token may not create an endpoint of form a.
		"POST /v1/endpoints":                    {withBody("POST /v1/endpoints", map[string]any{"url": receiver + "/new", "form_ids": []string{"a"}, "event_types": []string{"nobody.listens"}}), [6]int{201, 201, 403, 403, 401, 401}},
		"GET /v1/endpoints":                     {path("GET /v1/endpoints"), [6]int{200, 200, 200, 200, 401, 401}},
		"GET /v1/endpoints/{id}":                {path("GET /v1/endpoints/{endpoint}"), scopedRead(200)},
		"PATCH /v1/endpoints/{id}":              {withBody("PATCH /v1/endpoints/{endpoint}", map[string]any{"description": "changed"}), scopedWrite(200)},
		"DELETE /v1/endpoints/{id}":             {path("DELETE /v1/endpoints/{endpoint}"), scopedWrite(200)},
		"POST /v1/endpoints/{id}/disable":       {path("POST /v1/endpoints/{endpoint}/disable"), scopedWrite(200)},
		"POST /v1/endpoints/{id}/enable":        {path("POST /v1/endpoints/{endpoint}/enable"), scopedWrite(200)},
		"POST /v1/endpoints/{id}/rotate-secret": {path("POST /v1/endpoints/{endpoint}/rotate-secret"), scopedWrite(200)},

		"POST /v1/endpoints/{id}/test":     {path("POST /v1/endpoints/{endpoint}/test"), scopedWrite(202)},
		"GET /v1/deliveries/{id}/payload":  {path("GET /v1/deliveries/{delivery}/payload"), scopedRead(200)},
		"GET /v1/event-types":              {path("GET /v1/event-types"), [6]int{200, 200, 200, 200, 401, 401}},
		"GET /v1/deliveries":               {path("GET /v1/deliveries?endpoint_id={endpoint}"), scopedRead(200)},
		"POST /v1/deliveries/replay":       {withBody("POST /v1/deliveries/replay", map[string]any{"endpoint_id": "{endpoint}"}), scopedWrite(200)},
		"GET /v1/deliveries/{id}":          {path("GET /v1/deliveries/{delivery}"), scopedRead(200)},
		"GET /v1/deliveries/{id}/attempts": {path("GET /v1/deliveries/{delivery}/attempts"), scopedRead(200)},
		"POST /v1/deliveries/{id}/replay":  {path("POST /v1/deliveries/{delivery}/replay"), scopedWrite(200)},
		"GET /v1/deliveries/{id}/replays":  {path("GET /v1/deliveries/{delivery}/replays"), scopedRead(200)},
		"POST /v1/tokens":                  {withBody("POST /v1/tokens", map[string]any{"forms": []string{"a"}, "expires_in": "1h"}), adminOnly(201)},
		"GET /v1/tokens":                   {path("GET /v1/tokens"), adminOnly(200)},
		"DELETE /v1/tokens/{id}":           {path("DELETE /v1/tokens/{token}"), adminOnly(200)},
		"POST /v1/portal/sessions":         {withBody("POST /v1/portal/sessions", map[string]any{"forms": []string{"a"}, "ttl": "1h"}), adminOnly(201)},
		"GET /v1/portal/sessions":          {path("GET /v1/portal/sessions"), adminOnly(200)},
		"DELETE /v1/portal/sessions/{id}":  {path("DELETE /v1/portal/sessions/{link}"), adminOnly(200)},
	}
}

const accessDoc = "../../docs/access.md"

// TestAccessTable sends every route the API registers with each kind of
// credential, each on an endpoint and a delivery of its own, on both
// stores, and checks the status of every cell. The observed table is
// docs/access.md (rewrite it with -update).
func TestAccessTable(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		observed = map[string]map[string][6]int{}
	)
	forEachBackend(t, func(t *testing.T, b backend) {
		// Every expired and revoked cell is a failure; none may be refused
		// for the earlier ones.
		w := newScopeWorld(t, b, func(o *api.Options) {
			o.AuthLimiter = authlimit.MustNew(authlimit.Config{Failures: 1 << 20, Logger: o.Logger})
		})
		h, err := api.New(api.Options{Store: w.store, Transports: loopbackHost, AdminToken: adminToken})
		if err != nil {
			t.Fatal(err)
		}
		table := accessTable(w.receiver)
		got := map[string][6]int{}
		for _, route := range api.RoutePatterns(h) {
			row, ok := table[route]
			if !ok {
				t.Errorf("route %q has no row in accessTable: say who may call it (public, ingest, admin only or scoped)", route)
				continue
			}
			var cells [6]int
			for i, role := range roles {
				r := row.request(w.newCell())
				r.token = w.tokens[role]
				resp := w.send(r)
				cells[i] = resp.status
				if resp.status != row.want[i] {
					t.Errorf("%s as %s: %d, want %d: %s", route, role, resp.status, row.want[i], resp.raw)
				}
			}
			got[route] = cells
		}
		mu.Lock()
		observed[t.Name()] = got
		mu.Unlock()
	})
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		var doc string
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range observed {
				if !yield(k) {
					return
				}
			}
		}) {
			md := accessMarkdown(observed[name])
			if doc == "" {
				doc = md
			} else if md != doc {
				t.Errorf("the stores answer differently:\n%s\n%s", doc, md)
			}
		}
		checkAccessDoc(t, doc)
	})
}

// accessMarkdown renders the observed table, routes sorted.
func accessMarkdown(got map[string][6]int) string {
	var b strings.Builder
	b.WriteString("| Route | " + strings.Join(roles, " | ") + " |\n|---|" + strings.Repeat("---|", len(roles)) + "\n")
	for _, route := range slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "| `%s` |", route)
		for _, s := range got[route] {
			fmt.Fprintf(&b, " %d |", s)
		}
		b.WriteString("\n")
	}
	return b.String()
}

const (
	tableBegin = "<!-- access table: generated by TestAccessTable, go test ./server/api -run TestAccessTable -update -->\n"
	tableEnd   = "<!-- end of access table -->\n"
)

// checkAccessDoc holds the table between the markers of docs/access.md to
// table, or writes it there with -update.
func checkAccessDoc(t *testing.T, table string) {
	t.Helper()
	raw, err := os.ReadFile(accessDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no access table between %q and %q", accessDoc, tableBegin, tableEnd)
	}
	inDoc := doc[i+len(tableBegin) : j]
	if inDoc == table {
		return
	}
	// -update is declared by the package's internal tests (views_test.go).
	if u := flag.Lookup("update"); u != nil && u.Value.String() == "true" {
		if err := os.WriteFile(accessDoc, []byte(doc[:i+len(tableBegin)]+table+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's access table is not what the server answers; run go test ./server/api -run TestAccessTable -update and review the diff. The server answers:\n%s", accessDoc, table)
}

// TestAScopedTokenCannotReachAnotherScope: a token of form b cannot see or
// touch form a's endpoint or delivery by id, by a list filter, by a
// replay or by a bulk replay. Each answers 404 with the body of a missing
// id, and nothing is written.
func TestAScopedTokenCannotReachAnotherScope(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		w := newScopeWorld(t, b, nil)
		c := w.newCell()
		other := w.tokens["other scope"]
		const missingEp, missingDlv = "ep_00000000000000000000000000000000", "dlv_00000000000000000000000000000000"
		epBefore, err := w.store.EndpointGet(t.Context(), c.endpoint)
		if err != nil {
			t.Fatal(err)
		}
		tables := []string{"webhook_deliveries", "webhook_delivery_attempts", "webhook_delivery_replays", "webhook_endpoints", "webhook_idempotency_keys"}
		before := map[string]int{}
		for _, tb := range tables {
			before[tb] = w.count(tb)
		}
		tries := []struct {
			req             req
			real, missingID string
		}{
			{req{method: "GET", path: "/v1/endpoints/{endpoint}"}, c.endpoint, missingEp},
			{req{method: "PATCH", path: "/v1/endpoints/{endpoint}", body: map[string]any{"form_ids": []string{"b"}}}, c.endpoint, missingEp},
			{req{method: "DELETE", path: "/v1/endpoints/{endpoint}?force=true"}, c.endpoint, missingEp},
			{req{method: "POST", path: "/v1/endpoints/{endpoint}/disable", body: map[string]any{}}, c.endpoint, missingEp},
			{req{method: "POST", path: "/v1/endpoints/{endpoint}/rotate-secret", body: map[string]any{}}, c.endpoint, missingEp},
			{req{method: "GET", path: "/v1/deliveries/{delivery}"}, c.delivery, missingDlv},
			{req{method: "GET", path: "/v1/deliveries/{delivery}/attempts"}, c.delivery, missingDlv},
			{req{method: "GET", path: "/v1/deliveries/{delivery}/replays"}, c.delivery, missingDlv},
			{req{method: "GET", path: "/v1/deliveries/{delivery}/payload"}, c.delivery, missingDlv},
			{req{method: "POST", path: "/v1/endpoints/{endpoint}/test", body: map[string]any{}}, c.endpoint, missingEp},
			{req{method: "POST", path: "/v1/deliveries/{delivery}/replay", body: map[string]any{}, header: map[string]string{"Idempotency-Key": "k1"}}, c.delivery, missingDlv},
			{req{method: "GET", path: "/v1/deliveries?endpoint_id={endpoint}"}, c.endpoint, missingEp},
			{req{method: "GET", path: "/v1/deliveries?form_id=a"}, "", ""},
			{req{method: "POST", path: "/v1/deliveries/replay", body: map[string]any{"endpoint_id": "{endpoint}"}}, c.endpoint, missingEp},
			{req{method: "POST", path: "/v1/deliveries/replay", body: map[string]any{"form_id": "a"}}, "", ""},
		}
		fill := strings.NewReplacer("{endpoint}", c.endpoint, "{delivery}", c.delivery)
		for _, try := range tries {
			r := try.req
			r.token = other
			r.path = fill.Replace(r.path)
			if m, ok := r.body.(map[string]any); ok && m["endpoint_id"] == "{endpoint}" {
				r.body = map[string]any{"endpoint_id": c.endpoint}
			}
			got := w.send(r)
			if got.status != http.StatusNotFound {
				t.Fatalf("%s %s %v: %d, want 404: %s", r.method, r.path, r.body, got.status, got.raw)
			}
			if try.real == "" {
				continue
			}
			// The same request for an id that does not exist.
			m := r
			m.path = strings.ReplaceAll(r.path, try.real, try.missingID)
			if body, ok := r.body.(map[string]any); ok && body["endpoint_id"] != nil {
				m.body = map[string]any{"endpoint_id": try.missingID}
			}
			m.header = nil
			missing := w.send(m).must(t, http.StatusNotFound)
			if want := strings.ReplaceAll(string(missing.raw), try.missingID, try.real); string(got.raw) != want {
				t.Errorf("%s %s: %s; a missing id answers %s", r.method, r.path, got.raw, want)
			}
		}
		// Unfiltered, it lists and replays none of form a's.
		if l := w.send(req{method: "GET", path: "/v1/deliveries", token: other}).must(t, http.StatusOK).list("deliveries"); len(l) != 0 {
			t.Errorf("another scope's token lists %d deliveries of form a", len(l))
		}
		if l := w.send(req{method: "GET", path: "/v1/endpoints", token: other}).must(t, http.StatusOK).list("endpoints"); len(l) != 0 {
			t.Errorf("another scope's token lists %d endpoints of form a", len(l))
		}
		if n := w.send(req{method: "POST", path: "/v1/deliveries/replay", token: other, body: map[string]any{}}).must(t, http.StatusOK).body["count"]; n != 0.0 {
			t.Errorf("another scope's bulk replay replayed %v", n)
		}
		for _, tb := range tables {
			if n := w.count(tb); n != before[tb] {
				t.Errorf("%s has %d rows after the refusals, %d before", tb, n, before[tb])
			}
		}
		ep, err := w.store.EndpointGet(t.Context(), c.endpoint)
		if err != nil || !ep.UpdatedAt.Equal(epBefore.UpdatedAt) || ep.DeletedAt != nil || ep.DisabledAt != nil || len(ep.Secrets) != len(epBefore.Secrets) {
			t.Errorf("form a's endpoint changed: %+v, %v", ep, err)
		}
		d, err := w.store.DeliveryGet(t.Context(), c.delivery)
		if err != nil || d.State != storage.StateFailed {
			t.Errorf("form a's delivery is %s, %v; want failed still", d.State, err)
		}
	})
}

// TestAScopeSeesItsEndpointsDeliveriesOnly: a scoped token's deliveries
// are those to its endpoints, its test deliveries included, and not the
// deliveries of its form's events to an endpoint of every form or to one
// that also names a form outside the scope: those answer 404 by id, are
// in no list, and its bulk replay leaves them.
func TestAScopeSeesItsEndpointsDeliveriesOnly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		w := newScopeWorld(t, b, nil)
		own := w.newCell() // form a's endpoint and a failed delivery to it
		const typ = "shared.note"
		everyForm, _ := w.createEndpoint(map[string]any{"url": w.receiver + "/every", "event_types": []string{typ}})
		aAndB, _ := w.createEndpoint(map[string]any{"url": w.receiver + "/ab", "form_ids": []string{"a", "b"}, "event_types": []string{typ}})
		r := w.send(req{method: "POST", path: "/v1/events", token: ingestKey,
			body: map[string]any{"type": typ, "form_id": "a", "payload": map[string]any{}}}).must(t, http.StatusAccepted)
		shared := map[string]storage.OutcomeKind{}
		for _, d := range r.list("deliveries") {
			shared[d.(string)] = storage.OutcomePermanent
		}
		if len(shared) != 2 {
			t.Fatalf("form a's event reached %v, want the endpoints %s and %s", shared, everyForm, aAndB)
		}
		settle(t, w.store, shared)
		test := w.send(req{method: "POST", path: "/v1/endpoints/" + own.endpoint + "/test", token: w.tokens["scoped read-write"]}).
			must(t, http.StatusAccepted).str("id")

		scoped := w.tokens["scoped read-write"]
		for id := range shared {
			w.send(req{method: "GET", path: "/v1/deliveries/" + id, token: scoped}).must(t, http.StatusNotFound)
			w.send(req{method: "POST", path: "/v1/deliveries/" + id + "/replay", token: scoped, body: map[string]any{}}).must(t, http.StatusNotFound)
		}
		w.send(req{method: "GET", path: "/v1/deliveries/" + test, token: scoped}).must(t, http.StatusOK)
		var listed []string
		for _, d := range w.send(req{method: "GET", path: "/v1/deliveries", token: scoped}).must(t, http.StatusOK).list("deliveries") {
			listed = append(listed, d.(map[string]any)["id"].(string))
		}
		slices.Sort(listed)
		want := []string{own.delivery, test}
		slices.Sort(want)
		if !slices.Equal(listed, want) {
			t.Errorf("the scoped token lists %v, want its endpoint's two: %v", listed, want)
		}
		if n := w.send(req{method: "POST", path: "/v1/deliveries/replay", token: scoped, body: map[string]any{"state": "failed"}}).
			must(t, http.StatusOK).body["count"]; n != 1.0 {
			t.Errorf("the scoped bulk replay replayed %v, want its own endpoint's one", n)
		}
		for id := range shared {
			if d, err := w.store.DeliveryGet(t.Context(), id); err != nil || d.State != storage.StateFailed {
				t.Errorf("delivery %s to an endpoint outside the scope is %s, %v after the scoped bulk replay; want failed", id, d.State, err)
			}
		}
	})
}

// TestScopedTokensMakeOnlyTheirOwn: an endpoint a scoped token creates or
// changes names one or more of its forms and no other.
func TestScopedTokensMakeOnlyTheirOwn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		w := newScopeWorld(t, b, nil)
		rw := w.tokens["scoped read-write"]
		c := w.newCell()
		for _, bad := range []req{
			{method: "POST", path: "/v1/endpoints", body: map[string]any{"url": w.receiver}},
			{method: "POST", path: "/v1/endpoints", body: map[string]any{"url": w.receiver, "form_ids": []string{"a", "b"}}},
			{method: "PATCH", path: "/v1/endpoints/" + c.endpoint, body: map[string]any{"form_ids": []string{}}},
			{method: "PATCH", path: "/v1/endpoints/" + c.endpoint, body: map[string]any{"form_ids": []string{"b"}}},
		} {
			bad.token = rw
			before := w.count("webhook_endpoints")
			r := w.send(bad).must(t, http.StatusForbidden)
			if code, msg := r.errorCode(t); code != "form_out_of_scope" || !strings.Contains(msg, "a") {
				t.Errorf("%s %s %v: %s %q, want form_out_of_scope naming the token's forms", bad.method, bad.path, bad.body, code, msg)
			}
			if w.count("webhook_endpoints") != before {
				t.Errorf("%s %s wrote an endpoint", bad.method, bad.path)
			}
		}
		ep, err := w.store.EndpointGet(t.Context(), c.endpoint)
		if err != nil || !slices.Equal(ep.FormIDs, []string{"a"}) {
			t.Errorf("the endpoint's forms are %v, %v; want [a]", ep.FormIDs, err)
		}
		// A test event has no form; the token that may send it reads its
		// delivery, another scope's token does not.
		sent := w.send(req{method: "POST", path: "/v1/endpoints/" + c.endpoint + "/test", token: rw, body: map[string]any{}}).must(t, http.StatusAccepted)
		w.send(req{method: "GET", path: "/v1/deliveries/" + sent.str("id"), token: rw}).must(t, http.StatusOK)
		w.send(req{method: "GET", path: "/v1/deliveries/" + sent.str("id"), token: w.tokens["other scope"]}).must(t, http.StatusNotFound)
		// A read-only token is told so.
		r := w.send(req{method: "POST", path: "/v1/endpoints/" + c.endpoint + "/disable", token: w.tokens["scoped read-only"], body: map[string]any{}}).must(t, http.StatusForbidden)
		if code, msg := r.errorCode(t); code != "read_only_token" || !strings.Contains(msg, "read-only") {
			t.Errorf("a read-only token's write: %s %q, want read_only_token", code, msg)
		}
		// A scoped token's Idempotency-Key is its own: the admin's key
		// does not hand it the admin's endpoint and secret.
		key := map[string]string{"Idempotency-Key": "shared-key"}
		body := map[string]any{"url": w.receiver + "/k", "form_ids": []string{"a"}}
		first := w.send(req{method: "POST", path: "/v1/endpoints", token: adminToken, body: body, header: key}).must(t, http.StatusCreated)
		second := w.send(req{method: "POST", path: "/v1/endpoints", token: rw, body: body, header: key}).must(t, http.StatusCreated)
		if first.str("id") == second.str("id") || second.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("the admin's key answered the scoped token with the admin's endpoint %s", first.str("id"))
		}
	})
}

// TestExpiredAndRevokedTokens: both answer 401 exactly as a wrong token,
// count toward the address's failure limit, and a revocation made through
// one server holds at once on another sharing the store.
func TestExpiredAndRevokedTokens(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		w := newScopeWorld(t, b, func(o *api.Options) {
			o.AuthLimiter = authlimit.MustNew(authlimit.Config{Failures: 3, Window: time.Hour, Logger: o.Logger})
		})
		wrong := w.send(req{method: "GET", path: "/v1/endpoints", token: access.TokenPrefix + "not-a-token"}).must(t, http.StatusUnauthorized)
		for _, role := range []string{"expired", "revoked"} {
			r := w.send(req{method: "GET", path: "/v1/endpoints", token: w.tokens[role]}).must(t, http.StatusUnauthorized)
			if string(r.raw) != string(wrong.raw) {
				t.Errorf("the %s token: %s, a wrong token: %s; want them alike", role, r.raw, wrong.raw)
			}
		}
		// Three failures against a limit of three: even the admin token is
		// refused now.
		w.send(req{method: "GET", path: "/v1/endpoints", token: adminToken}).must(t, http.StatusTooManyRequests)

		// Revoked through one server, refused by the next request to
		// another over the same store.
		other := newFixtureOn(t, w.store, w.count, nil)
		live := w.token([]string{"a"}, false, time.Hour, 0)
		other.send(req{method: "GET", path: "/v1/endpoints", token: live}).must(t, http.StatusOK)
		tok, err := access.Authenticate(t.Context(), w.store, live, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		third := newFixtureOn(t, w.store, w.count, nil)
		third.admin("DELETE", "/v1/tokens/"+tok.ID, nil).must(t, http.StatusOK)
		other.send(req{method: "GET", path: "/v1/endpoints", token: live}).must(t, http.StatusUnauthorized)
	})
}

// TestPortalLinksAreListedAndRevoked: the admin sees a link's use and its
// session's end, and revoking the link through one server ends the
// session at its next lookup, which a portal on another process makes.
func TestPortalLinksAreListedAndRevoked(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		made := f.admin("POST", "/v1/portal/sessions", map[string]any{"forms": []string{"a"}, "ttl": "2h"}).must(t, http.StatusCreated)
		id := made.str("id")
		u, err := url.Parse(made.str("url"))
		if err != nil || id == "" {
			t.Fatalf("the link: %s (%v)", made.raw, err)
		}
		unused := f.admin("GET", "/v1/portal/sessions", nil).must(t, http.StatusOK)
		if ls := unused.list("links"); len(ls) != 1 || ls[0].(map[string]any)["id"] != id || ls[0].(map[string]any)["used_at"] != nil {
			t.Fatalf("before use: %s, want link %s, unused", unused.raw, id)
		}
		opened := time.Now()
		cookie, _, err := access.RedeemPortalLink(t.Context(), f.store, u.Query().Get("link"), opened)
		if err != nil {
			t.Fatal(err)
		}
		used := f.admin("GET", "/v1/portal/sessions", nil).must(t, http.StatusOK).list("links")[0].(map[string]any)
		ends, err := time.Parse(time.RFC3339Nano, fmt.Sprint(used["session_expires_at"]))
		if err != nil || used["used_at"] == nil || ends.Sub(opened).Round(time.Minute) != 2*time.Hour || used["revoked_at"] != nil {
			t.Fatalf("after use: %v, want used, its session ending 2h after it was opened, not revoked", used)
		}

		other := newFixtureOn(t, f.store, f.count, nil)
		revoked := other.admin("DELETE", "/v1/portal/sessions/"+id, nil).must(t, http.StatusOK)
		if revoked.str("id") != id || revoked.str("revoked_at") == "" {
			t.Fatalf("revoked: %s, want link %s with revoked_at", revoked.raw, id)
		}
		if _, err := access.PortalSession(t.Context(), f.store, cookie, time.Now()); !errors.Is(err, access.ErrUnauthenticated) {
			t.Fatalf("the session after its link was revoked: %v, want ErrUnauthenticated", err)
		}
		missing := f.admin("DELETE", "/v1/portal/sessions/acc_nothing", nil).must(t, http.StatusNotFound)
		if msg := string(missing.raw); !strings.Contains(msg, `portal link \"acc_nothing\" does not exist`) {
			t.Errorf("an unknown link: %s, want it named", msg)
		}

		// A page at a time: two more links make three, newest first.
		for range 2 {
			f.admin("POST", "/v1/portal/sessions", map[string]any{"forms": []string{"a"}, "ttl": "1h"}).must(t, http.StatusCreated)
		}
		first := f.admin("GET", "/v1/portal/sessions?limit=2", nil).must(t, http.StatusOK)
		next, _ := first.body["next_cursor"].(string)
		ls := first.list("links")
		if len(ls) != 2 || next != ls[1].(map[string]any)["id"] {
			t.Fatalf("a page of 2 of 3 links: %s, want 2 and the last one's id as next_cursor", first.raw)
		}
		last := f.admin("GET", "/v1/portal/sessions?limit=2&cursor="+next, nil).must(t, http.StatusOK)
		if ls := last.list("links"); len(ls) != 1 || ls[0].(map[string]any)["id"] != id || last.body["next_cursor"] != nil {
			t.Fatalf("the page after %s: %s, want the first link %s alone and no next_cursor", next, last.raw, id)
		}
		f.admin("GET", "/v1/portal/sessions?cursor=ep_00000000000000000000000000000000", nil).must(t, http.StatusBadRequest)
	})
}
