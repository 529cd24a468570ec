package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
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
		code   string
	}{
		{fmt.Errorf("sqlite: get delivery x: %w", storage.ErrNotFound), http.StatusNotFound, "not_found"},
		{fmt.Errorf("postgres: replay: %w: it is pending", storage.ErrNotTerminal), http.StatusConflict, "not_terminal"},
		{fmt.Errorf("postgres: create: %w: %s", storage.ErrConflict, leak), http.StatusConflict, "conflict"},
		{fmt.Errorf("sqlite: create: %w: %s", storage.ErrInvalid, leak), http.StatusUnprocessableEntity, "invalid_request"},
		{fmt.Errorf("postgres: list: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, "timeout"},
		{errors.New(leak), http.StatusInternalServerError, "internal"},
		{fmt.Errorf("wrapped: %w", errors.New(leak)), http.StatusInternalServerError, "internal"},
	} {
		got := storeError(tc.err, "delivery \"dlv_1\"")
		if got.Status != tc.status || got.Code != tc.code {
			t.Errorf("storeError(%v) = %d %s, want %d %s", tc.err, got.Status, got.Code, tc.status, tc.code)
		}
		if strings.Contains(got.Message, "SELECT") || strings.Contains(got.Message, "password") {
			t.Errorf("storeError(%v) leaks the cause into its message: %s", tc.err, got.Message)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("storeError(%v) does not keep its cause for the log", tc.err)
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
