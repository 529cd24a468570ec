package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/authlimit"
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
// a bearer token guessed nothing.
func (a authenticator) check(r *http.Request, who access) (authlimit.Outcome, error) {
	if a.insecure {
		return authlimit.Absent, nil
	}
	token, err := bearer(r)
	if err != nil {
		return authlimit.Absent, err
	}
	switch a.identify(token) {
	case roleAdmin:
		return authlimit.Passed, nil
	case roleIngest:
		if who == ingest {
			return authlimit.Passed, nil
		}
		return authlimit.Passed, &apiError{Code: apiwire.CodeForbidden,
			Message: "an ingest key may only submit forms and events; this route needs the admin token"}
	}
	return authlimit.Failed, &apiError{Code: apiwire.CodeUnauthorized,
		Message: "the bearer token is not valid for this server; check the token you configured for this client"}
}

// authorize checks r's credentials for a route open to who, unless its
// client address has had too many failures: then it sets Retry-After
// and refuses with 429 without looking at the token, so a guess that
// happens to be right cannot be told from a wrong one.
func (h *handler) authorize(w http.ResponseWriter, r *http.Request, who access) error {
	if h.insecure {
		return nil
	}
	var err error
	wait := h.limiter.Check(r.RemoteAddr, func() authlimit.Outcome {
		var out authlimit.Outcome
		out, err = h.auth.check(r, who)
		return out
	})
	if wait > 0 {
		retry := authlimit.RetryAfter(wait)
		w.Header().Set("Retry-After", retry)
		return &apiError{Code: apiwire.CodeTooManyFailedAuthentications,
			Message: fmt.Sprintf("too many requests from your address had a wrong token (or, for a second at most, from many addresses the limiter has no room for); every request that needs a token is refused for the next %s seconds (Retry-After), even with the right one: wait, then send the token configured for this client", retry)}
	}
	return err
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
