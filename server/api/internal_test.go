package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/devmode"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite/sqlitetest"
)

func TestTokenEqualComparesDigests(t *testing.T) {
	want := sha256.Sum256([]byte("s3cret-admin-token"))
	for _, tc := range []struct {
		presented string
		match     bool
	}{
		{"s3cret-admin-token", true},
		{"s3cret-admin-tokeN", false},
		{"s3cret-admin-token ", false},
		{"s3cret", false}, // a prefix: a length-dependent compare would stop early
		{"", false},
		{strings.Repeat("x", 10000), false},
	} {
		if got := tokenEqual(tc.presented, want); got != tc.match {
			t.Errorf("tokenEqual(%q) = %v, want %v", clip(tc.presented), got, tc.match)
		}
	}
}

func TestAuthenticatorKeepsOnlyDigests(t *testing.T) {
	a, err := newAuthenticator("admin-token-value", []string{"ingest-one", "ingest-two"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if dump := fmt.Sprintf("%v %+v %#v", a, a, a); strings.Contains(dump, "admin-token-value") || strings.Contains(dump, "ingest-one") {
		t.Fatal("the authenticator holds a token in clear")
	}
	for _, tc := range []struct {
		token string
		want  role
	}{
		{"admin-token-value", roleAdmin},
		{"ingest-one", roleIngest},
		{"ingest-two", roleIngest},
		{"ingest-three", roleNone},
		{"", roleNone},
	} {
		if got := a.identify(tc.token); got != tc.want {
			t.Errorf("identify(%q) = %v, want %v", tc.token, got, tc.want)
		}
	}
}

func TestStoreErrorMapsSentinelsAndHidesTheRest(t *testing.T) {
	leak := "SELECT secrets FROM webhook_endpoints WHERE id = 'x': password authentication failed for user hymical"
	for _, tc := range []struct {
		err    error
		status int
		code   apiwire.Code
	}{
		{fmt.Errorf("sqlite: get delivery x: %w", storage.ErrNotFound), http.StatusNotFound, "not_found"},
		{fmt.Errorf("postgres: replay: %w: it is pending", storage.ErrNotTerminal), http.StatusConflict, "not_terminal"},
		{fmt.Errorf("postgres: create: %w: %s", storage.ErrConflict, leak), http.StatusConflict, "conflict"},
		{fmt.Errorf("sqlite: create: %w: %s", storage.ErrInvalid, leak), http.StatusUnprocessableEntity, "invalid_request"},
		{fmt.Errorf("postgres: list: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, "timeout"},
		{fmt.Errorf("postgres: create event: %w: %s", storage.ErrNoSpace, leak), http.StatusServiceUnavailable, "storage_full"},
		{fmt.Errorf("postgres: create event: %w: %s", storage.ErrResources, leak), http.StatusServiceUnavailable, "storage_busy"},
		{fmt.Errorf("postgres: list endpoints: %w: %s", storage.ErrUnavailable, leak), http.StatusServiceUnavailable, "storage_unavailable"},
		{errors.New(leak), http.StatusInternalServerError, "internal"},
		{fmt.Errorf("wrapped: %w", errors.New(leak)), http.StatusInternalServerError, "internal"},
	} {
		got := storeError(tc.err, "delivery \"dlv_1\"")
		if got.status() != tc.status || got.Code != tc.code {
			t.Errorf("storeError(%v) = %d %s, want %d %s", tc.err, got.status(), got.Code, tc.status, tc.code)
		}
		if strings.Contains(got.Message, "SELECT") || strings.Contains(got.Message, "password") {
			t.Errorf("storeError(%v) leaks the cause into its message: %s", tc.err, got.Message)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("storeError(%v) does not keep its cause for the log", tc.err)
		}
		// Every 503 of the store is a passing condition: the client is
		// told when to try again.
		if got.status() == http.StatusServiceUnavailable && got.RetryAfter <= 0 {
			t.Errorf("storeError(%v) = 503 %s without Retry-After", tc.err, got.Code)
		}
	}
}

// A store error that reaches fail without going through storeError is
// still a 503 with Retry-After when it passes, and a 500 otherwise.
func TestFailAnswersPassingStoreErrorsAs503(t *testing.T) {
	h := &handler{log: slog.New(slog.DiscardHandler), storeHealth: &StoreHealth{}}
	for _, tc := range []struct {
		err    error
		status int
		code   apiwire.Code
	}{
		{fmt.Errorf("postgres: event create: %w: connection refused", storage.ErrUnavailable), http.StatusServiceUnavailable, apiwire.CodeStorageUnavailable},
		{fmt.Errorf("postgres: event create: %w", storage.ErrResources), http.StatusServiceUnavailable, apiwire.CodeStorageBusy},
		{fmt.Errorf("postgres: event create: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, apiwire.CodeTimeout},
		{errors.New("a bug"), http.StatusInternalServerError, apiwire.CodeInternal},
	} {
		w := httptest.NewRecorder()
		h.fail(w, httptest.NewRequest("GET", "/v1/endpoints", nil), tc.err)
		var body apiwire.ErrorResponse
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if w.Code != tc.status || body.Error.Code != tc.code {
			t.Errorf("fail(%v) answered %d %s, want %d %s", tc.err, w.Code, body.Error.Code, tc.status, tc.code)
		}
		if ra := w.Header().Get("Retry-After"); (tc.status == http.StatusServiceUnavailable) != (ra != "") {
			t.Errorf("fail(%v) answered %d with Retry-After %q", tc.err, w.Code, ra)
		}
	}
}

// A dev-mode refusal keeps its code only when apiwire sends that code with
// the same status; anything else is the server's bug, answered as one.
func TestDevmodeRefusalKeepsOnlyAPICodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		ref  devmode.Refusal
		want apiwire.Code
	}{
		{"an API code with its status", devmode.Refusal{Status: http.StatusMisdirectedRequest, Code: "misdirected_request", Message: "use 127.0.0.1"}, apiwire.CodeMisdirectedRequest},
		{"a code the API does not have", devmode.Refusal{Status: http.StatusForbidden, Code: "browser_refused", Message: "refused for the browser"}, apiwire.CodeInternal},
		{"an API code with another status", devmode.Refusal{Status: http.StatusBadRequest, Code: "misdirected_request", Message: "refused for the host"}, apiwire.CodeInternal},
	} {
		got := devmodeRefusal(&tc.ref)
		if got.Code != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
		if tc.want == apiwire.CodeInternal && strings.Contains(got.Message, tc.ref.Message) {
			t.Errorf("%s: the internal error passes on the refusal's message %q", tc.name, got.Message)
		}
	}
}

func TestOperatorActorIsBoundedAndSanitised(t *testing.T) {
	for _, tc := range []struct{ header, want string }{
		{"", "api"},
		{"alice@example.com", "api:alice@example.com"},
		{"  Zoë Müller ", "api:Zoë Müller"},
		{"eve\nlevel=ERROR msg=forged", "api:eve_level_ERROR msg_forged"},
		{"\x00\x01", "api"},
		{"bob\xff", "api:bob"},
		{strings.Repeat("a", 500), "api:" + strings.Repeat("a", maxOperatorBytes)},
		{strings.Repeat("é", 100), "api:" + strings.Repeat("é", maxOperatorBytes/2)},
	} {
		if got := operatorActor(tc.header); got != tc.want {
			t.Errorf("operatorActor(%q) = %q, want %q", tc.header, got, tc.want)
		}
	}
}

func TestEndpointViewHidesSecretsInConfig(t *testing.T) {
	e := storage.Endpoint{ID: "ep_1", Transport: "redis", Config: map[string]string{
		"url":      "redis://:s3cret@redis.internal:6379/0",
		"password": "s3cret",
		"stream":   "forms",
	}}
	v := viewEndpoint(e, time.Now())
	for k, val := range v.Config {
		if strings.Contains(val, "s3cret") {
			t.Errorf("config %s shown as %q", k, val)
		}
	}
	if v.Config["stream"] != "forms" || !strings.Contains(v.Config["url"], "redis.internal") {
		t.Errorf("non-secret config lost: %v", v.Config)
	}
}

// The API's own checks refuse deep nesting long before the store's limit;
// what still reaches the store and is refused there is answered with the
// store's reason, not only "breaks a rule".
func TestIngestErrorGivesTheStoresReason(t *testing.T) {
	store := sqlitetest.New(t)
	data := strings.Repeat(`{"a":`, 9998) + "{}" + strings.Repeat("}", 9998)
	ev, err := event.Submission("contact", json.RawMessage(data), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.EventCreate(t.Context(), ev)
	if !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("EventCreate of a payload 10001 levels deep: %v, want ErrInvalid", err)
	}
	var ae *apiError
	if !errors.As(ingestError(err, ev, "the submission"), &ae) {
		t.Fatal("not an apiError")
	}
	if ae.status() != http.StatusUnprocessableEntity || ae.Code != apiwire.CodeInvalidBody ||
		!strings.Contains(ae.Message, "exceeded max depth, at byte") || !strings.Contains(ae.Message, "the delivery store refused the submission") {
		t.Fatalf("answer %d %s %q, want 422 invalid_body giving the store's reason", ae.status(), ae.Code, ae.Message)
	}
	if strings.Contains(ae.Message, "sqlite") {
		t.Fatalf("the answer carries the driver's words: %q", ae.Message)
	}
}

func TestStoreHealthReportsNoSpaceUntilAWriteSucceeds(t *testing.T) {
	noSpace := fmt.Errorf("sqlite: create event: %w", storage.ErrNoSpace)
	var h StoreHealth
	if _, full := h.noSpace(time.Now()); full {
		t.Fatal("the zero StoreHealth reports the store full")
	}
	h.Observe(errors.New("connection refused"))
	if _, full := h.noSpace(time.Now()); full {
		t.Fatal("an error that is not about space reports the store full")
	}
	before := time.Now()
	h.Observe(noSpace)
	h.Observe(errors.New("connection refused"))
	since, full := h.noSpace(time.Now())
	if !full || since.Before(before) {
		t.Fatalf("after a write failed for lack of space: full %v since %v", full, since)
	}
	h.Observe(noSpace)
	if again, _ := h.noSpace(time.Now()); !again.Equal(since) {
		t.Fatalf("a second failure moved since from %v to %v; it is when the run of failures began", since, again)
	}
	if _, full := h.noSpace(time.Now().Add(noSpaceHold)); full {
		t.Fatalf("still full %s after the last failure with nothing written since; the hold is over", noSpaceHold)
	}
	h.Observe(nil)
	if _, full := h.noSpace(time.Now()); full {
		t.Fatal("a write that succeeded did not clear it")
	}
}

// A refused query parameter names the parameter and what the route takes,
// in full, even for a route that takes none.
func TestQueryRefusalSaysWhatTheRouteTakes(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		allowed []string
		want    string
	}{
		{"limit=1", nil, `unknown query parameter "limit"; this route takes no query parameters, so leave the query string out`},
		{"page=2", []string{"limit", "cursor"}, `unknown query parameter "page"; this route takes only limit, cursor`},
		{"limit=1&limit=2", []string{"limit"}, `query parameter "limit" is given 2 times; give it once`},
	} {
		r, _ := http.NewRequest("GET", "/v1/x?"+tc.raw, nil)
		_, err := query(r, tc.allowed...)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Message != tc.want {
			t.Errorf("query(%q, %v) = %v, want the message %q", tc.raw, tc.allowed, err, tc.want)
		}
	}
}
