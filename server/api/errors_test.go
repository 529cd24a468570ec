package api_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/storage/sqlite"
)

// TestRefusedRequests sends every kind of bad request to every route that
// can get one, checks each answer's status, code and that its message says
// what was wrong, and then checks that none of them wrote a row.
func TestRefusedRequests(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, func(o *api.Options) { o.MaxBodyBytes = 4096 })
		epID, _ := f.createEndpoint(map[string]any{"url": "https://hooks.example.com/in", "description": "kept"})
		before := f.admin("GET", "/v1/endpoints/"+epID, nil).must(t, http.StatusOK)
		ep := "/v1/endpoints/" + epID
		sub := "/v1/forms/contact/submissions"
		big := `{"data":"` + strings.Repeat("x", 5000) + `"}`

		for _, tc := range []struct {
			name         string
			method, path string
			body         any
			header       map[string]string
			status       int
			code         string
			says         string // a part of the message
		}{
			// Ingest of a submission.
			{"submission: malformed JSON", "POST", sub, `{"email":`, nil, 400, "invalid_json", "ends in the middle"},
			{"submission: a syntax error", "POST", sub, `{"email" "a"}`, nil, 400, "invalid_json", "not valid JSON"},
			{"submission: trailing data", "POST", sub, `{"a":1} {"b":2}`, nil, 400, "trailing_data", "exactly one JSON object"},
			{"submission: an array", "POST", sub, `[1,2]`, nil, 422, "invalid_body", "must be a JSON object, got an array"},
			{"submission: a string", "POST", sub, `"hello"`, nil, 422, "invalid_body", "got a string"},
			{"submission: null", "POST", sub, `null`, nil, 422, "invalid_body", "got null"},
			{"submission: an empty body", "POST", sub, ``, nil, 400, "empty_body", "empty"},
			{"submission: over the body limit", "POST", sub, big, nil, 413, "body_too_large", "4096 bytes"},
			{"submission: a form post", "POST", sub, `email=a`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type", "application/json"},
			{"submission: a bad form id", "POST", "/v1/forms/bad%20form/submissions", `{}`, nil, 422, "invalid_form_id", "not a form id"},
			{"submission: a form id with a colon", "POST", "/v1/forms/a:b/submissions", `{}`, nil, 422, "invalid_form_id", "not a form id"},
			{"submission: an idempotency key with a space", "POST", sub, `{}`, map[string]string{"Idempotency-Key": "a b"}, 400, "invalid_idempotency_key", "printable ASCII"},
			{"submission: an overlong idempotency key", "POST", sub, `{}`, map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, 400, "invalid_idempotency_key", "limit is 255"},

			// Ingest of a generic event.
			{"event: an unknown field", "POST", "/v1/events", `{"type":"a.b","payload":{},"extra":1}`, nil, 400, "unknown_field", `"extra"`},
			{"event: a number for the type", "POST", "/v1/events", `{"type":5,"payload":{}}`, nil, 400, "wrong_type", `"type" must be a string`},
			{"event: no type", "POST", "/v1/events", `{"payload":{}}`, nil, 422, "invalid_event_type", "type is required"},
			{"event: a bad type", "POST", "/v1/events", `{"type":"a b","payload":{}}`, nil, 422, "invalid_event_type", "not an event type"},
			{"event: the reserved submission type", "POST", "/v1/events", `{"type":"submission.received","payload":{}}`, nil, 422, "invalid_event_type", "/v1/forms/{form_id}/submissions"},
			{"event: a type of the server's own", "POST", "/v1/events", `{"type":"hymical.endpoint.disabled","payload":{}}`, nil, 422, "invalid_event_type", "the server's own events"},
			{"event: an array payload", "POST", "/v1/events", `{"type":"a.b","payload":[1]}`, nil, 422, "invalid_body", "payload must be a JSON object, got an array"},
			{"event: no payload", "POST", "/v1/events", `{"type":"a.b"}`, nil, 422, "invalid_body", "got nothing"},
			{"event: a bad form id", "POST", "/v1/events", `{"type":"a.b","form_id":"x y","payload":{}}`, nil, 422, "invalid_form_id", "form_id"},
			{"event: an array body", "POST", "/v1/events", `[]`, nil, 400, "wrong_type", "must be a JSON object"},

			// Endpoint creation.
			{"create: an ftp URL", "POST", "/v1/endpoints", `{"url":"ftp://example.com/in"}`, nil, 422, "invalid_url", `scheme "ftp"`},
			{"create: a javascript URL", "POST", "/v1/endpoints", `{"url":"javascript:alert(1)"}`, nil, 422, "invalid_url", `scheme "javascript"`},
			{"create: credentials in the URL", "POST", "/v1/endpoints", `{"url":"https://user:hunter2@example.com/in"}`, nil, 422, "invalid_url", "user name or password"},
			{"create: a relative URL", "POST", "/v1/endpoints", `{"url":"example.com/in"}`, nil, 422, "invalid_url", "no scheme"},
			{"create: no host", "POST", "/v1/endpoints", `{"url":"https:///in"}`, nil, 422, "invalid_url", "no host"},
			{"create: a URL that does not parse", "POST", "/v1/endpoints", `{"url":"https://example.com/%zz"}`, nil, 422, "invalid_url", "does not parse"},
			{"create: spaces around the URL", "POST", "/v1/endpoints", `{"url":" https://example.com/in"}`, nil, 422, "invalid_url", "white space"},
			{"create: no URL", "POST", "/v1/endpoints", `{"description":"x"}`, nil, 422, "invalid_url", "url is required"},
			{"create: an unknown transport", "POST", "/v1/endpoints", `{"url":"https://example.com/in","transport":"smtp"}`, nil, 422, "unknown_transport", "the loaded transports are http"},
			{"create: the metadata address", "POST", "/v1/endpoints", `{"url":"http://169.254.169.254/latest/meta-data/"}`, nil, 422, "transport_refused", "link-local"},
			{"create: a private address", "POST", "/v1/endpoints", `{"url":"http://10.1.2.3/in"}`, nil, 422, "transport_refused", "private"},
			{"create: config the http transport does not take", "POST", "/v1/endpoints", `{"url":"https://example.com/in","config":{"method":"PUT"}}`, nil, 422, "transport_refused", "takes no endpoint config"},
			{"create: an empty event type", "POST", "/v1/endpoints", `{"url":"https://example.com/in","event_types":[""]}`, nil, 422, "invalid_event_type", "event_types[0]"},
			{"create: form_ids as a string", "POST", "/v1/endpoints", `{"url":"https://example.com/in","form_ids":"contact"}`, nil, 400, "wrong_type", `"form_ids" must be an array of strings`},
			{"create: config with a number", "POST", "/v1/endpoints", `{"url":"https://example.com/in","config":{"a":1}}`, nil, 400, "wrong_type", "config"},
			{"create: a secret of its own", "POST", "/v1/endpoints", `{"url":"https://example.com/in","secret":"whsec_x"}`, nil, 400, "unknown_field", "rotate-secret"},
			{"create: trailing data", "POST", "/v1/endpoints", `{"url":"https://example.com/in"}x`, nil, 400, "trailing_data", "exactly one"},
			{"create: a long description", "POST", "/v1/endpoints", map[string]any{"url": "https://example.com/in", "description": strings.Repeat("d", 1025)}, nil, 422, "invalid_request", "description"},
			{"create: over the body limit", "POST", "/v1/endpoints", big, nil, 413, "body_too_large", "limit"},

			// Endpoint changes.
			{"patch: a javascript URL", "PATCH", ep, `{"url":"javascript:alert(1)"}`, nil, 422, "invalid_url", "scheme"},
			{"patch: a private address", "PATCH", ep, `{"url":"http://192.168.1.1/"}`, nil, 422, "transport_refused", "private"},
			{"patch: an unknown transport", "PATCH", ep, `{"transport":"carrier-pigeon"}`, nil, 422, "unknown_transport", "http"},
			{"patch: an empty transport", "PATCH", ep, `{"transport":""}`, nil, 422, "unknown_transport", "must not be empty"},
			{"patch: disabled as a field", "PATCH", ep, `{"disabled":true}`, nil, 400, "unknown_field", "/disable"},
			{"patch: an empty body", "PATCH", ep, ``, nil, 400, "empty_body", "url, transport"},
			{"patch: an unknown endpoint", "PATCH", "/v1/endpoints/ep_missing", `{"description":"x"}`, nil, 404, "not_found", `endpoint "ep_missing"`},
			{"get: an unknown endpoint", "GET", "/v1/endpoints/ep_missing", nil, nil, 404, "not_found", "does not exist"},
			{"disable: an unknown endpoint", "POST", "/v1/endpoints/ep_missing/disable", nil, nil, 404, "not_found", "ep_missing"},
			{"enable: an unknown endpoint", "POST", "/v1/endpoints/ep_missing/enable", nil, nil, 404, "not_found", "ep_missing"},
			{"rotate: an unknown endpoint", "POST", "/v1/endpoints/ep_missing/rotate-secret", nil, nil, 404, "not_found", "ep_missing"},
			{"rotate: a body with fields", "POST", ep + "/rotate-secret", `{"grace":"1h"}`, nil, 400, "unknown_field", "grace"},
			{"list endpoints: a query parameter it does not take", "GET", "/v1/endpoints?state=failed", nil, nil, 400, "invalid_parameter", `"state"; this route takes only limit, cursor`},
			{"list endpoints: a page too large", "GET", "/v1/endpoints?limit=5000", nil, nil, 400, "invalid_parameter", `limit "5000" is not a whole number from 1 to 500`},
			{"delete: an unknown endpoint", "DELETE", "/v1/endpoints/ep_missing", nil, nil, 404, "not_found", "ep_missing"},
			{"delete: a query parameter it does not take", "DELETE", ep + "?cascade=true", nil, nil, 400, "invalid_parameter", `"cascade"; this route takes only force`},

			// Deliveries.
			{"list: a bad state", "GET", "/v1/deliveries?state=lost", nil, nil, 400, "invalid_parameter", "state"},
			{"list: a bad created_after", "GET", "/v1/deliveries?created_after=yesterday", nil, nil, 400, "invalid_parameter", "created_after"},
			{"list: a bad created_before", "GET", "/v1/deliveries?created_before=2024-13-01T00:00:00Z", nil, nil, 400, "invalid_parameter", "created_before"},
			{"list: an empty range", "GET", "/v1/deliveries?created_after=2024-06-01T00:00:00Z&created_before=2024-05-01T00:00:00Z", nil, nil, 400, "invalid_parameter", "not before created_before"},
			{"list: limit 0", "GET", "/v1/deliveries?limit=0", nil, nil, 400, "invalid_parameter", "limit"},
			{"list: limit too large", "GET", "/v1/deliveries?limit=501", nil, nil, 400, "invalid_parameter", "1 to 500"},
			{"list: limit not a number", "GET", "/v1/deliveries?limit=ten", nil, nil, 400, "invalid_parameter", "limit"},
			{"list: a made-up cursor", "GET", "/v1/deliveries?cursor=page2", nil, nil, 400, "invalid_parameter", "cursor"},
			{"list: an unknown parameter", "GET", "/v1/deliveries?stat=failed", nil, nil, 400, "invalid_parameter", `"stat"`},
			{"list: a parameter given twice", "GET", "/v1/deliveries?state=failed&state=delivered", nil, nil, 400, "invalid_parameter", "2 times"},
			{"list: an overlong endpoint_id", "GET", "/v1/deliveries?endpoint_id=" + strings.Repeat("e", 200), nil, nil, 400, "invalid_parameter", "endpoint_id"},
			{"get: an unknown delivery", "GET", "/v1/deliveries/dlv_missing", nil, nil, 404, "not_found", `delivery "dlv_missing"`},
			{"attempts: an unknown delivery", "GET", "/v1/deliveries/dlv_missing/attempts", nil, nil, 404, "not_found", "dlv_missing"},
			{"replays: an unknown delivery", "GET", "/v1/deliveries/dlv_missing/replays", nil, nil, 404, "not_found", "dlv_missing"},
			{"replay: an unknown delivery", "POST", "/v1/deliveries/dlv_missing/replay", nil, nil, 404, "not_found", "dlv_missing"},
			{"replay: a body with fields", "POST", "/v1/deliveries/dlv_missing/replay", `{"force":true}`, nil, 400, "unknown_field", "force"},
			{"bulk replay: pending", "POST", "/v1/deliveries/replay", `{"state":"pending"}`, nil, 422, "invalid_request", "failed (the default) or delivered"},
			{"bulk replay: a negative limit", "POST", "/v1/deliveries/replay", `{"limit":-1}`, nil, 422, "invalid_request", "limit"},
			{"bulk replay: a limit too large", "POST", "/v1/deliveries/replay", `{"limit":1001}`, nil, 422, "invalid_request", "1 to 1000"},
			{"bulk replay: a string limit", "POST", "/v1/deliveries/replay", `{"limit":"ten"}`, nil, 400, "wrong_type", `"limit" must be an integer`},
			{"bulk replay: a bad created_after", "POST", "/v1/deliveries/replay", `{"created_after":"last week"}`, nil, 422, "invalid_request", "created_after"},
			{"bulk replay: an unknown field", "POST", "/v1/deliveries/replay", `{"states":["failed"]}`, nil, 400, "unknown_field", "states"},

			// Routing.
			{"an unknown route", "GET", "/v1/nothing", nil, nil, 404, "not_found", "no route"},
			{"an unversioned route", "GET", "/endpoints", nil, nil, 404, "not_found", "/v1"},
			{"a method the route does not take", "DELETE", "/v1/endpoints", nil, nil, 405, "method_not_allowed", "allowed: GET, HEAD, POST"},
			{"GET on the ingest route", "GET", sub, nil, nil, 405, "method_not_allowed", "POST"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				token := adminToken
				r := f.send(req{method: tc.method, path: tc.path, token: token, body: tc.body, header: tc.header})
				if r.status != tc.status {
					t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.raw)
				}
				code, msg := r.errorCode(t)
				if code != tc.code || !strings.Contains(msg, tc.says) {
					t.Fatalf("error %s %q, want code %s saying %q", code, msg, tc.code, tc.says)
				}
				if strings.Contains(msg, "hunter2") {
					t.Fatal("the message quotes the password from the URL")
				}
				if tc.status == http.StatusMethodNotAllowed && r.header.Get("Allow") == "" {
					t.Fatal("405 without an Allow header")
				}
			})
		}

		// Nothing half-written: no event, delivery or replay rows, the one
		// endpoint made above and no other, and it is unchanged.
		for table, want := range map[string]int{
			"webhook_endpoints": 1, "webhook_events": 0, "webhook_deliveries": 0, "webhook_delivery_replays": 0,
		} {
			if n := f.count(table); n != want {
				t.Errorf("%s has %d rows after only refused requests, want %d", table, n, want)
			}
		}
		after := f.admin("GET", "/v1/endpoints/"+epID, nil).must(t, http.StatusOK)
		if string(after.raw) != string(before.raw) {
			t.Errorf("refused PATCHes changed the endpoint:\nbefore %s\nafter  %s", before.raw, after.raw)
		}
	})
}

// A loopback receiver is refused by a plugin host that was not told to
// allow it: the http plugin's own SSRF guard answers, through the API.
func TestLoopbackEndpointRefusedWithoutAllowList(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, func(o *api.Options) { o.Transports = strictHost })
		for _, url := range []string{"http://127.0.0.1:8080/hook", "http://[::1]/hook", "http://0.0.0.0/"} {
			r := f.admin("POST", "/v1/endpoints", map[string]any{"url": url}).must(t, http.StatusUnprocessableEntity)
			code, msg := r.errorCode(t)
			if code != "transport_refused" || !strings.Contains(msg, "allowed_networks") {
				t.Fatalf("%s: %s %q, want transport_refused naming allowed_networks", url, code, msg)
			}
		}
		if n := f.count("webhook_endpoints"); n != 0 {
			t.Fatalf("%d endpoints written for refused targets", n)
		}
		// The same URL is fine where the operator allowed loopback.
		allowed := newFixture(t, b, nil)
		allowed.createEndpoint(map[string]any{"url": "http://127.0.0.1:8080/hook"})
	})
}

func TestBodyLimitWithoutContentLength(t *testing.T) {
	f := newFixture(t, backends["sqlite"], func(o *api.Options) { o.MaxBodyBytes = 100 })
	// A chunked body has no Content-Length to refuse up front; the reader
	// stops it at the limit.
	body := strings.NewReader(`{"a":"` + strings.Repeat("x", 200) + `"}`)
	hr, err := http.NewRequestWithContext(t.Context(), "POST", f.srv.URL+"/v1/forms/contact/submissions", struct{ *strings.Reader }{body})
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+ingestKey)
	resp, err := f.srv.Client().Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || hr.ContentLength != 0 {
		t.Fatalf("status %d (content length %d), want 413 for a chunked body over the limit", resp.StatusCode, hr.ContentLength)
	}
	if n := f.count("webhook_events"); n != 0 {
		t.Fatalf("%d events written from a refused body", n)
	}
}

func TestHealth(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		if r := f.send(req{method: "GET", path: "/healthz"}).must(t, http.StatusOK); r.str("status") != "ok" {
			t.Fatalf("healthz: %s", r.raw)
		}
		if r := f.send(req{method: "GET", path: "/readyz"}).must(t, http.StatusOK); r.str("status") != "ready" {
			t.Fatalf("readyz: %s", r.raw)
		}

		down := newFixture(t, b, func(o *api.Options) {
			o.Ready = func(context.Context) error { return errors.New("the worker pool has not started") }
		})
		r := down.send(req{method: "GET", path: "/readyz"}).must(t, http.StatusServiceUnavailable)
		if code, msg := r.errorCode(t); code != "not_ready" || msg != "the worker pool has not started" {
			t.Fatalf("readyz with a failing Ready: %s %q", code, msg)
		}

		// A store that is gone: liveness holds, readiness does not.
		if err := f.store.Close(); err != nil {
			t.Fatal(err)
		}
		f.send(req{method: "GET", path: "/healthz"}).must(t, http.StatusOK)
		r = f.send(req{method: "GET", path: "/readyz"}).must(t, http.StatusServiceUnavailable)
		if code, msg := r.errorCode(t); code != "not_ready" || !strings.Contains(msg, "not reachable") {
			t.Fatalf("readyz on a closed store: %s %q", code, msg)
		}
	})
}

func TestReadyzWantsAMigratedDatabase(t *testing.T) {
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "fresh.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logs := &syncbuf.Buffer{}
	h, err := api.New(api.Options{Store: s, Transports: loopbackHost, AdminToken: adminToken,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	f := &fixture{t: t, srv: srv}
	r := f.send(req{method: "GET", path: "/readyz"}).must(t, http.StatusServiceUnavailable)
	if code, msg := r.errorCode(t); code != "not_ready" || !strings.Contains(msg, "hymical migrate") {
		t.Fatalf("readyz on an unmigrated database: %s %q", code, msg)
	}
	// The operator reading the log sees why, not an empty error.
	if out := logs.String(); strings.Contains(out, "error=<nil>") || !strings.Contains(out, "run `hymical migrate`") {
		t.Fatalf("the log of a failed /readyz does not say why:\n%s", out)
	}
}

// Addresses that reach a private network by another form (NAT64, 6to4,
// IPv4-compatible) or sit in another special-purpose range are refused at
// creation too, each naming its range and the setting that allows it.
func TestSpecialPurposeEndpointsRefusedWithoutAllowList(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, func(o *api.Options) { o.Transports = strictHost })
		for url, want := range map[string]string{
			"http://[64:ff9b::a00:5]/hook": "leads to 10.0.0.5",
			"http://[2002:a00:5::1]/hook":  "leads to 10.0.0.5",
			"http://[::a00:5]/hook":        "leads to 10.0.0.5",
			"http://[fec0::1]/hook":        "fec0::/10, site-local",
			"http://198.18.0.1/hook":       "198.18.0.0/15, benchmarking (RFC 2544)",
		} {
			r := f.admin("POST", "/v1/endpoints", map[string]any{"url": url}).must(t, http.StatusUnprocessableEntity)
			code, msg := r.errorCode(t)
			if code != "transport_refused" || !strings.Contains(msg, want) || !strings.Contains(msg, "webhook.allowed_networks") {
				t.Errorf("%s: %s %q, want transport_refused saying %q and naming webhook.allowed_networks", url, code, msg, want)
			}
		}
		if n := f.count("webhook_endpoints"); n != 0 {
			t.Fatalf("%d endpoints written for refused targets", n)
		}
	})
}
