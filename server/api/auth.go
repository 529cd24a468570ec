package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hymical/hymical/server/access"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/authlimit"
	"github.com/hymical/hymical/storage"
)

// minTokenLen is the admin token length below which New warns.
const minTokenLen = 32

// authenticator holds SHA-256 digests of the configured tokens, never the
// tokens themselves, so every comparison is between two 32-byte values and
// neither a token's length nor its content leaks through timing.
type authenticator struct {
	insecure bool
	admin    [sha256.Size]byte
	ingest   [][sha256.Size]byte
}

func newAuthenticator(adminToken string, ingestKeys []string, insecure bool) (authenticator, error) {
	a := authenticator{insecure: insecure}
	if insecure {
		return a, nil
	}
	if strings.TrimSpace(adminToken) == "" {
		return a, errors.New("api: the admin token is empty: set one (at least 32 random characters), or run in insecure dev mode on loopback only")
	}
	a.admin = sha256.Sum256([]byte(adminToken))
	for i, k := range ingestKeys {
		if strings.TrimSpace(k) == "" {
			return a, fmt.Errorf("api: ingest key %d of %d is empty: remove it or give it a value", i+1, len(ingestKeys))
		}
		if k == adminToken {
			return a, fmt.Errorf("api: ingest key %d of %d equals the admin token: give ingest clients their own key, so leaking one does not hand out admin rights", i+1, len(ingestKeys))
		}
		a.ingest = append(a.ingest, sha256.Sum256([]byte(k)))
	}
	return a, nil
}

// tokenEqual compares a presented token with a configured token's digest in
// time that depends on neither: both sides are SHA-256 digests of equal
// length, compared with crypto/subtle.
func tokenEqual(presented string, want [sha256.Size]byte) bool {
	got := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// role is what a presented token is.
type role int

const (
	roleNone role = iota
	roleIngest
	roleAdmin
)

// identify says which configured token, if any, was presented. Every
// ingest key is compared even after a match, so the time taken does not say
// which key matched.
func (a authenticator) identify(token string) role {
	if tokenEqual(token, a.admin) {
		return roleAdmin
	}
	matched := 0
	for _, k := range a.ingest {
		if tokenEqual(token, k) {
			matched = 1
		}
	}
	if matched == 1 {
		return roleIngest
	}
	return roleNone
}

// check authorises r for a route open to who, and says what the limiter
// is to make of it: a token that is none of ours is a failure; a valid
// ingest key on an admin route is refused but no guess; a request without
// a bearer token guessed nothing. scopedToken is what the store said of a
// token that is neither configured one (see handler.lookupScoped); it is
// only read when the token is neither.
func (a authenticator) check(r *http.Request, who reach, scopedToken scopedLookup) (authlimit.Outcome, *caller, error) {
	if a.insecure {
		return authlimit.Absent, nil, nil
	}
	token, err := bearer(r)
	if err != nil {
		return authlimit.Absent, nil, err
	}
	switch a.identify(token) {
	case roleAdmin:
		return authlimit.Passed, nil, nil
	case roleIngest:
		if who == ingest {
			return authlimit.Passed, nil, nil
		}
		return authlimit.Passed, nil, &apiError{Code: apiwire.CodeForbidden,
			Message: "an ingest key may only submit forms and events; this route needs the admin token"}
	}
	switch {
	case errors.Is(scopedToken.err, access.ErrUnauthenticated):
	case scopedToken.err != nil:
		// The store could not say: no guess was judged, so none is counted.
		return authlimit.Absent, nil, storeError(scopedToken.err, "the scoped token")
	default:
		t := scopedToken.token
		switch {
		case who == ingest:
			return authlimit.Passed, nil, &apiError{Code: apiwire.CodeForbidden,
				Message: "a scoped token cannot submit forms or events; ingest takes an ingest key or the admin token"}
		case who != scopedRoute:
			return authlimit.Passed, nil, &apiError{Code: apiwire.CodeForbidden,
				Message: "a scoped token opens only the endpoint and delivery routes of its forms; this route needs the admin token"}
		case t.ReadOnly && r.Method != http.MethodGet && r.Method != http.MethodHead:
			return authlimit.Passed, nil, &apiError{Code: apiwire.CodeReadOnlyToken,
				Message: fmt.Sprintf("this scoped token is read-only, so it may only GET; %s needs a token made without read_only", r.Method)}
		}
		return authlimit.Passed, &caller{tokenID: t.ID, scope: access.ScopeOf(t)}, nil
	}
	return authlimit.Failed, nil, errWrongToken()
}

// errWrongToken answers a token that opens nothing here. A scoped token
// that is unknown, expired or revoked gets the same answer as a mistyped
// admin token, so nobody learns which of those it is.
func errWrongToken() *apiError {
	return &apiError{Code: apiwire.CodeUnauthorized,
		Message: "the bearer token is not valid for this server; check the token you configured for this client"}
}

// scopedLookup is what the store said of a presented token: the scoped
// token it is, or access.ErrUnauthenticated, or the store's own error.
type scopedLookup struct {
	token storage.AccessToken
	err   error
}

// lookupScoped asks the store about a token that is neither configured
// one. It runs before the limiter's judgement, not inside it: the judge
// runs under the limiter's lock, which a database round trip must not
// hold. Every request looks the token up afresh (no cache), so a revoked
// token is refused at once by every process sharing the database; a
// token without access.TokenPrefix costs no lookup.
func (h *handler) lookupScoped(r *http.Request) scopedLookup {
	token, err := bearer(r)
	if err != nil || h.auth.identify(token) != roleNone {
		return scopedLookup{err: access.ErrUnauthenticated}
	}
	t, err := access.Authenticate(r.Context(), h.store, token, h.now())
	return scopedLookup{token: t, err: err}
}

// authorize checks r's credentials for a route open to who, unless its
// client address has had too many failures: then it sets Retry-After
// and refuses with 429 whatever the token, so a guess that happens to be
// right cannot be told from a wrong one. It returns r carrying its
// caller (see callerOf).
func (h *handler) authorize(w http.ResponseWriter, r *http.Request, who reach) (*http.Request, error) {
	if h.insecure {
		return r, nil
	}
	looked := h.lookupScoped(r)
	var (
		err error
		c   *caller
	)
	wait := h.limiter.CheckRequest(r, func() authlimit.Outcome {
		var out authlimit.Outcome
		out, c, err = h.auth.check(r, who, looked)
		return out
	})
	if wait > 0 {
		retry := authlimit.RetryAfter(wait)
		w.Header().Set("Retry-After", retry)
		return r, &apiError{Code: apiwire.CodeTooManyFailedAuthentications,
			Message: fmt.Sprintf("too many requests from your address had a wrong token (or, for a second at most, from many addresses the limiter has no room for); every request that needs a token is refused for the next %s seconds (Retry-After), even with the right one: wait, then send the token configured for this client", retry)}
	}
	if err != nil || c == nil {
		return r, err
	}
	return r.WithContext(withCaller(r.Context(), c)), nil
}

// bearer reads the token from "Authorization: Bearer <token>".
func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", &apiError{Code: apiwire.CodeUnauthorized,
			Message: "missing credentials: send \"Authorization: Bearer <token>\" with the admin token or an ingest key"}
	}
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", &apiError{Code: apiwire.CodeUnauthorized,
			Message: "the Authorization header is not \"Bearer <token>\"; send the token with the Bearer scheme"}
	}
	return token, nil
}
