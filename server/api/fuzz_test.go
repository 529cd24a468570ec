package api_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite"
)

// The ingest fuzz targets drive the real handler, in process, over a real
// SQLite store in a temporary directory: one store per fuzzing process, so
// an input costs a request and, when accepted, one write. Their seeds run
// in every go test; explore with
//
//	go test -run '^$' -fuzz FuzzIngestSubmission ./server/api
//	go test -run '^$' -fuzz FuzzIngestEvent ./server/api
//
// What they hold for every input: the answer is never a 5xx; it is JSON, in
// the one error shape unless accepted; a refused request writes nothing; an
// accepted one writes exactly one event and its fan-out, carrying the data
// that was sent; a repeated idempotency key writes nothing and answers as
// before; and a request that is well formed by the API's documented rules
// is accepted: one JSON object that receivers can read (see checkJSON).

// ingestFuzz is the handler and the store behind it, plus what the fuzzing
// process has sent with an idempotency key so far, so a repeat of a key
// is judged against its first use.
type ingestFuzz struct {
	handler http.Handler
	store   storage.Store
	db      *sql.DB
	// firsts maps a scoped idempotency key to the accepted answer and the
	// request it was first used with.
	firsts map[string]keyUse
}

type keyUse struct {
	answer []byte
	same   func(other fuzzRequest) bool
}

type fuzzRequest struct {
	path, contentType, key string
	body                   []byte
}

func newIngestFuzz(f *testing.F) *ingestFuzz {
	f.Helper()
	path := filepath.Join(f.TempDir(), "fuzz.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background(), storage.MigrateParams{}); err != nil {
		f.Fatal(err)
	}
	// Two endpoints, so fan-out is checked: one takes every event, one
	// only the form "contact".
	for _, forms := range [][]string{nil, {"contact"}} {
		if _, err := s.EndpointCreate(context.Background(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{
			Transport: "http", URL: "https://receiver.example/in", FormIDs: forms,
			Secrets: []storage.Secret{storage.NewSecret("whsec_ZnV6emZ1enpmdXp6ZnV6emZ1eno=", nil)},
		}}); err != nil {
			f.Fatal(err)
		}
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	h, err := api.New(api.Options{
		Store: s, Transports: loopbackHost, AdminToken: adminToken, IngestKeys: []string{ingestKey},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		f.Fatal(err)
	}
	return &ingestFuzz{handler: h, store: s, db: db, firsts: map[string]keyUse{}}
}

func (z *ingestFuzz) count(t *testing.T) (events, deliveries int) {
	t.Helper()
	if err := z.db.QueryRow(`SELECT (SELECT count(*) FROM webhook_events), (SELECT count(*) FROM webhook_deliveries)`).Scan(&events, &deliveries); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return events, deliveries
}

// fuzzAnswer is the handler's answer to one request, decoded.
type fuzzAnswer struct {
	status     int
	raw        []byte
	replayed   bool
	eventID    string
	submission string
	deliveries []string
}

// serve sends r and checks what every answer must be, whatever the input:
// below 500, JSON, in the error shape unless accepted, and, when refused or
// repeated, without a row written.
func (z *ingestFuzz) serve(t *testing.T, r fuzzRequest) fuzzAnswer {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "http://hymical.test"+r.path, bytes.NewReader(r.body))
	req.Header.Set("Authorization", "Bearer "+ingestKey)
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.key != "" {
		req.Header.Set(api.HeaderIdempotencyKey, r.key)
	}
	eventsBefore, deliveriesBefore := z.count(t)
	rec := httptest.NewRecorder()
	z.handler.ServeHTTP(rec, req)
	res := rec.Result()
	raw, _ := io.ReadAll(res.Body)
	a := fuzzAnswer{status: res.StatusCode, raw: raw, replayed: res.Header.Get(api.HeaderIdempotentReplayed) == "true"}

	if a.status >= 500 {
		t.Fatalf("%+v answered %d: %s", r, a.status, raw)
	}
	eventsAfter, deliveriesAfter := z.count(t)
	if a.status != http.StatusAccepted && (eventsAfter != eventsBefore || deliveriesAfter != deliveriesBefore) {
		t.Fatalf("%+v answered %d but wrote %d events and %d deliveries: %s", r, a.status,
			eventsAfter-eventsBefore, deliveriesAfter-deliveriesBefore, raw)
	}
	// The one answer that is not the API's own: the mux's redirect of a
	// path that is not clean ("//", "/./"), to the cleaned path.
	if (a.status == http.StatusMovedPermanently || a.status == http.StatusTemporaryRedirect || a.status == http.StatusPermanentRedirect) &&
		res.Header.Get("Location") != "" {
		return a
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%+v answered %d with Content-Type %q: %s", r, a.status, ct, raw)
	}
	switch a.status {
	case http.StatusAccepted, http.StatusOK:
		var body apiwire.IngestResult
		if err := json.Unmarshal(raw, &body); err != nil || body.EventID == "" {
			t.Fatalf("%+v answered %d without an event id: %s", r, a.status, raw)
		}
		if (a.status == http.StatusOK) != a.replayed || (a.replayed && r.key == "") {
			t.Fatalf("%+v answered %d with %s %v", r, a.status, api.HeaderIdempotentReplayed, a.replayed)
		}
		a.eventID, a.submission, a.deliveries = body.EventID, body.SubmissionID, body.Deliveries
		if a.status == http.StatusAccepted && (eventsAfter != eventsBefore+1 || deliveriesAfter != deliveriesBefore+len(a.deliveries)) {
			t.Fatalf("%+v was accepted with %d deliveries but wrote %d events and %d deliveries", r, len(a.deliveries),
				eventsAfter-eventsBefore, deliveriesAfter-deliveriesBefore)
		}
	default:
		var e apiwire.ErrorResponse
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("%+v answered %d outside the error shape: %s", r, a.status, raw)
		}
	}
	return a
}

// judgeKey checks an answer against the first use of its idempotency key
// and returns whether the request was the key's first use. scope is the
// key as the API scopes it.
func (z *ingestFuzz) judgeKey(t *testing.T, r fuzzRequest, scope string, a fuzzAnswer, same func(fuzzRequest) bool) (first bool) {
	t.Helper()
	prev, seen := z.firsts[scope]
	switch {
	case !seen:
		if a.status == http.StatusAccepted {
			z.firsts[scope] = keyUse{answer: a.raw, same: same}
		}
		return true
	case prev.same(r):
		if a.status != http.StatusOK || !bytes.Equal(a.raw, prev.answer) {
			t.Fatalf("%+v repeats the request its key was first used with, answered %d %s, want 200 %s", r, a.status, a.raw, prev.answer)
		}
	case a.status != http.StatusUnprocessableEntity || !strings.Contains(string(a.raw), "idempotency_key_reused"):
		t.Fatalf("%+v reuses its key for another request, answered %d %s, want 422 idempotency_key_reused", r, a.status, a.raw)
	}
	return false
}

// nameRule is the documented shape of a form id and an event type.
var nameRule = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// jsonContentType is the documented rule for Content-Type: absent, or a
// JSON media type.
func jsonContentType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// goodKey is the documented shape of an idempotency key; "" is no key.
func goodKey(k string) bool {
	if len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// isObject reports whether b is exactly one JSON object.
func isObject(b []byte) bool {
	t := bytes.TrimSpace(b)
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}

func sameJSONValue(a, b []byte) bool {
	decode := func(b []byte) (any, error) {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v any
		err := dec.Decode(&v)
		return v, err
	}
	va, errA := decode(a)
	vb, errB := decode(b)
	return errA == nil && errB == nil && reflect.DeepEqual(va, vb)
}

func (z *ingestFuzz) event(t *testing.T, id string) storage.Event {
	t.Helper()
	ev, err := z.store.EventGet(context.Background(), id)
	if err != nil {
		t.Fatalf("EventGet(%s) after it was accepted: %v", id, err)
	}
	if !json.Valid(ev.Payload) {
		t.Fatalf("event %s was stored with a payload that is not JSON: %q", id, ev.Payload)
	}
	return ev
}

var submissionIDRule = regexp.MustCompile(`^sub_[0-9a-f]{32}$`)

// wantFanOut is how many of the fixture's endpoints an event for form reaches.
func wantFanOut(form string) int {
	if form == "contact" {
		return 2
	}
	return 1
}

func FuzzIngestSubmission(f *testing.F) {
	for _, s := range []struct {
		form, contentType, key string
		body                   string
	}{
		{"contact", "application/json", "", `{"email":"a@example.com","n":1.5}`},
		{"contact", "", "order-42", `{"email":"a@example.com"}`},
		{"contact", "", "order-42", `{ "email" : "a@example.com" }`},
		{"contact", "", "order-42", `{"email":"b@example.com"}`},
		{"other", "application/json; charset=utf-8", "", `{"nested":{"a":[1,2,{"b":null}]},"s":"\u00e9\ud83d\ude00"}`},
		{"contact", "text/plain", "", `{"email":"a@example.com"}`},
		{"contact", "application/json", "", `[1,2]`},
		{"contact", "application/json", "", `{"a":1}{"b":2}`},
		{"contact", "application/json", "", `{"a":1} trailing`},
		{"contact", "application/json", "", `{"a":`},
		{"contact", "application/json", "", ``},
		{"contact", "application/json", "", `null`},
		{"contact", "application/json", "", `{"a":1e999}`},
		{"contact", "application/json", "", "{\"a\":\"\xff\xfe\"}"},
		{"contact", "application/json", "", "{\"a\":\"\\u0000\"}"},
		{"contact", "application/json", "", `{"a":"\ud800","b":"\ud83d\ude00"}`},
		{"contact", "application/json", "", strings.Repeat(`{"a":`, 64) + "1" + strings.Repeat("}", 64)},
		{"contact", "application/json", "", strings.Repeat(`[`, 65) + strings.Repeat("]", 65)},
		{"contact", "application/json", "", `{"email":"a@example.com","email":"b@example.com"}`},
		{"contact", "application/json", "", `{"items":[{"sku":1},{"sku":2,"\u0073ku":3}]}`},
		{"contact", "application/json", "", `{"a":{"k":1},"b":{"k":1},"K":1,"k":2}`},
		{"-bad", "", "", `{}`},
		{"a:b", "", "", `{}`},
		{"con tact", "", "", `{}`},
		{strings.Repeat("f", 129), "", "", `{}`},
		{"contact", "", "key with space", `{}`},
		{"contact", "", strings.Repeat("k", 256), `{}`},
		{"contact", "application/json;;", "", `{}`},
	} {
		f.Add(s.form, s.contentType, s.key, []byte(s.body))
	}
	z := newIngestFuzz(f)

	f.Fuzz(func(t *testing.T, form, contentType, key string, body []byte) {
		r := fuzzRequest{path: "/v1/forms/" + url.PathEscape(form) + "/submissions", contentType: contentType, key: key, body: body}
		a := z.serve(t, r)
		wellFormed := nameRule.MatchString(form) && jsonContentType(contentType) && goodKey(key) && isObject(body) && api.ReadableJSON(body)
		if key != "" && wellFormed {
			sameAs := func(o fuzzRequest) bool { return o.path == r.path && isObject(o.body) && sameJSONValue(o.body, body) }
			if !z.judgeKey(t, r, "submission:"+form+":"+key, a, sameAs) {
				return
			}
		}
		if wellFormed && a.status != http.StatusAccepted {
			t.Fatalf("a well-formed submission %+v was refused: %d %s", r, a.status, a.raw)
		}
		if a.status != http.StatusAccepted {
			return
		}
		if !wellFormed {
			t.Fatalf("%+v breaks the documented rules but was accepted: %s", r, a.raw)
		}
		if !submissionIDRule.MatchString(a.submission) || len(a.deliveries) != wantFanOut(form) {
			t.Fatalf("%+v accepted as submission %q with %d deliveries, want sub_<32 hex> and %d", r, a.submission, len(a.deliveries), wantFanOut(form))
		}
		ev := z.event(t, a.eventID)
		var stored struct {
			Type       string `json:"type"`
			Submission struct {
				ID     string          `json:"id"`
				FormID string          `json:"form_id"`
				Data   json.RawMessage `json:"data"`
			} `json:"submission"`
		}
		if err := json.Unmarshal(ev.Payload, &stored); err != nil {
			t.Fatalf("stored payload %q: %v", ev.Payload, err)
		}
		if ev.FormID != form || ev.SubmissionID != a.submission || stored.Type != "submission.received" ||
			stored.Submission.ID != a.submission || stored.Submission.FormID != form || !sameJSONValue(stored.Submission.Data, body) {
			t.Fatalf("%+v was stored as %+v with payload %s", r, ev, ev.Payload)
		}
	})
}

// eventShape is the documented body of POST /v1/events, decoded the strict
// way the API documents: no unknown fields, nothing after the object.
type eventShape struct {
	Type    string          `json:"type"`
	FormID  string          `json:"form_id"`
	Payload json.RawMessage `json:"payload"`
}

func decodeEventShape(body []byte) (eventShape, bool) {
	var e eventShape
	if !isObject(body) {
		return e, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return e, false
	}
	ok := nameRule.MatchString(e.Type) && e.Type != "submission.received" &&
		(e.FormID == "" || nameRule.MatchString(e.FormID)) && isObject(e.Payload)
	return e, ok
}

func FuzzIngestEvent(f *testing.F) {
	for _, s := range []struct {
		contentType, key string
		body             string
	}{
		{"application/json", "", `{"type":"form.published","form_id":"contact","payload":{"title":"Contact"}}`},
		{"", "", `{"type":"form.published","payload":{}}`},
		{"", "evt-1", `{"type":"form.deleted","form_id":"other","payload":{"a":[1]}}`},
		{"", "evt-1", `{"payload":{"a":[1]},"form_id":"other","type":"form.deleted"}`},
		{"", "evt-1", `{"type":"form.deleted","form_id":"other","payload":{"a":[2]}}`},
		{"", "", `{"type":"submission.received","payload":{}}`},
		{"", "", `{"type":"","payload":{}}`},
		{"", "", `{"type":"x","payload":[1]}`},
		{"", "", `{"type":"x","payload":null}`},
		{"", "", `{"type":"x"}`},
		{"", "", `{"type":"x","payload":{},"extra":1}`},
		{"", "", `{"type":"x","form_id":"a:b","payload":{}}`},
		{"", "", `{"type":"x","payload":{}} {}`},
		{"", "", `{"type":"x","payload":{"n":-1e400,"s":"\udc00"}}`},
		{"", "", `{"TYPE":"x","Payload":{}}`},
		{"", "", `{"type":"x","payload":{"a":1,"a":2}}`},
		{"", "", `{"type":"x","type":"y","payload":{}}`},
		{"", "", `{"type":1,"payload":{}}`},
		{"", "", `"just a string"`},
		{"application/xml", "", `{"type":"x","payload":{}}`},
	} {
		f.Add(s.contentType, s.key, []byte(s.body))
	}
	z := newIngestFuzz(f)

	f.Fuzz(func(t *testing.T, contentType, key string, body []byte) {
		r := fuzzRequest{path: "/v1/events", contentType: contentType, key: key, body: body}
		a := z.serve(t, r)
		shape, ok := decodeEventShape(body)
		wellFormed := ok && jsonContentType(contentType) && goodKey(key) && api.ReadableJSON(body)
		if key != "" && wellFormed {
			sameAs := func(o fuzzRequest) bool {
				other, ok := decodeEventShape(o.body)
				return ok && other.Type == shape.Type && other.FormID == shape.FormID && sameJSONValue(other.Payload, shape.Payload)
			}
			if !z.judgeKey(t, r, "event:"+key, a, sameAs) {
				return
			}
		}
		if wellFormed && a.status != http.StatusAccepted {
			t.Fatalf("a well-formed event %+v was refused: %d %s", r, a.status, a.raw)
		}
		if a.status != http.StatusAccepted {
			return
		}
		if !wellFormed {
			t.Fatalf("%+v breaks the documented rules but was accepted: %s", r, a.raw)
		}
		if a.submission != "" || len(a.deliveries) != wantFanOut(shape.FormID) {
			t.Fatalf("%+v accepted with submission %q and %d deliveries, want none and %d", r, a.submission, len(a.deliveries), wantFanOut(shape.FormID))
		}
		ev := z.event(t, a.eventID)
		var stored struct {
			Type  string `json:"type"`
			Event struct {
				ID     string          `json:"id"`
				FormID string          `json:"form_id"`
				Data   json.RawMessage `json:"data"`
			} `json:"event"`
		}
		if err := json.Unmarshal(ev.Payload, &stored); err != nil {
			t.Fatalf("stored payload %q: %v", ev.Payload, err)
		}
		if ev.Type != shape.Type || ev.FormID != shape.FormID || ev.SubmissionID != "" || stored.Type != shape.Type ||
			stored.Event.ID != a.eventID || stored.Event.FormID != shape.FormID || !sameJSONValue(stored.Event.Data, shape.Payload) {
			t.Fatalf("%+v was stored as %+v with payload %s", r, ev, ev.Payload)
		}
	})
}
