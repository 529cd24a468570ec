package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/hymical/hymical/server/access"
	"github.com/hymical/hymical/server/authlimit"
	"github.com/hymical/hymical/storage"
)

// CookieName is the console's session cookie. Its value is an opaque random
// session id, never the admin token.
const CookieName = "hymical_console"

// CSRFField is the hidden form field that carries a session's CSRF token.
const CSRFField = "csrf"

// Bounds on what the console keeps and accepts.
const (
	// maxSessions caps live sessions; past it the ones closest to expiry
	// are dropped, so a login loop cannot grow the table without end.
	maxSessions = 1000
	// maxFormBytes bounds a form post; the console's forms are tiny.
	maxFormBytes = 64 << 10
)

// session is one login.
type session struct {
	// csrf is the token every form of the session carries back.
	csrf string
	// operator is the name given at login, for the replay audit.
	operator string
	expires  time.Time
}

// sessions are the live logins, kept in the store so that a login holds
// on every server sharing the database, whichever one a load balancer
// sends the next request to. The store sees only the SHA-256 of a
// session id, so a copy of the database opens no session.
type sessions struct {
	store storage.ConsoleSessions
	ttl   time.Duration
	max   int
}

func newSessions(store storage.ConsoleSessions, ttl time.Duration, max int) *sessions {
	return &sessions{store: store, ttl: ttl, max: max}
}

// create starts a session and returns its id, for the cookie.
func (ss *sessions) create(ctx context.Context, operator string, now time.Time) (string, *session, error) {
	id, err := randomToken()
	if err != nil {
		return "", nil, err
	}
	csrf, err := randomToken()
	if err != nil {
		return "", nil, err
	}
	s := &session{csrf: csrf, operator: operator, expires: now.Add(ss.ttl)}
	_, err = ss.store.ConsoleSessionCreate(ctx, storage.ConsoleSessionCreateParams{
		Session: storage.ConsoleSession{Hash: sha256.Sum256([]byte(id)), CSRF: csrf, Operator: operator, ExpiresAt: s.expires},
		Max:     ss.max, Now: now,
	})
	if err != nil {
		return "", nil, fmt.Errorf("console: storing the login: %w", err)
	}
	return id, s, nil
}

// get returns the live session with this id, nil when there is none.
// An error is the store's: it says nothing about the id.
func (ss *sessions) get(ctx context.Context, id string, now time.Time) (*session, error) {
	if id == "" {
		return nil, nil
	}
	cs, err := ss.store.ConsoleSessionGet(ctx, sha256.Sum256([]byte(id)), now)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("console: reading the login: %w", err)
	}
	return &session{csrf: cs.CSRF, operator: cs.Operator, expires: cs.ExpiresAt}, nil
}

func (ss *sessions) end(ctx context.Context, id string) error {
	if err := ss.store.ConsoleSessionEnd(ctx, sha256.Sum256([]byte(id))); err != nil {
		return fmt.Errorf("console: ending the login: %w", err)
	}
	return nil
}

func randomToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("console: reading random bytes: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// tokenOK compares a presented token with the admin token's digest in
// time that depends on neither.
func (h *handler) tokenOK(token string) bool {
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], h.digest[:]) == 1
}

// authResult is who made a request.
type authResult struct {
	// session is the cookie's login; nil for a bearer request.
	session *session
	// sessionID is the cookie's value, for logout.
	sessionID string
	// bearer: the request carried the admin token itself, which a browser
	// never adds on its own, so it needs no CSRF token.
	bearer   bool
	operator string
	// stale: the request carried a session cookie of no live session (the
	// server restarted, or the session ended), which should be cleared.
	stale bool
	// scope is a portal session's forms; nil for the operator, who sees
	// everything.
	scope *access.Scope
}

// authenticate says who made r: a bearer token wins over a cookie. A
// result with neither a session nor bearer set means nobody is logged in;
// the error is set when an Authorization header was sent and is wrong,
// which is worth saying rather than sending to the login form, and when
// the client address has had too many failures: then nothing r carries
// is looked at.
//
// A wrong bearer token and a session cookie of no live session both count
// as failures in the limiter the API shares: a session id is as much a
// credential as the token. A page clears a stale cookie (see page), so a
// browser pays one failure after a restart, not one per page.
func (h *handler) authenticate(r *http.Request) (authResult, *pageError) {
	var (
		a    authResult
		perr *pageError
	)
	wait := h.limiter.CheckRequest(r, func() authlimit.Outcome {
		var out authlimit.Outcome
		a, perr, out = h.identify(r)
		return out
	})
	if wait > 0 {
		return authResult{}, errTooManyFailures(wait)
	}
	return a, perr
}

// identify is authenticate without the limiter, saying what the limiter
// is to make of it.
func (h *handler) identify(r *http.Request) (authResult, *pageError, authlimit.Outcome) {
	if h.portal != nil {
		return h.identifyPortal(r)
	}
	if hdr := r.Header.Get("Authorization"); hdr != "" {
		scheme, token, _ := strings.Cut(hdr, " ")
		token = strings.TrimSpace(token)
		if !strings.EqualFold(scheme, "Bearer") || token == "" {
			return authResult{}, &pageError{Status: http.StatusUnauthorized, Title: "Not logged in",
				Message: "The Authorization header is not \"Bearer <token>\".",
				Advice:  "Send the admin token with the Bearer scheme, or log in with the form."}, authlimit.Absent
		}
		if h.insecure {
			return authResult{bearer: true, operator: storage.OperatorName(r.Header.Get("Hymical-Operator"))}, nil, authlimit.Absent
		}
		if !h.tokenOK(token) {
			return authResult{}, &pageError{Status: http.StatusUnauthorized, Title: "Not logged in",
				Message: "The bearer token is not this server's admin token.",
				Advice:  "Send the value of FORMS_SERVER_ADMIN_TOKEN, or log in with the form."}, authlimit.Failed
		}
		return authResult{bearer: true, operator: storage.OperatorName(r.Header.Get("Hymical-Operator"))}, nil, authlimit.Passed
	}
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" {
		return authResult{}, nil, authlimit.Absent
	}
	s, err := h.sessions.get(r.Context(), c.Value, h.now())
	if err != nil {
		// Neither a pass nor a failure: the database, not the cookie, is
		// at fault, and the limiter must not count it against the client.
		return authResult{}, storeError(err, "login"), authlimit.Absent
	}
	if s == nil {
		if h.insecure {
			return authResult{stale: true}, nil, authlimit.Absent
		}
		return authResult{stale: true}, nil, authlimit.Failed
	}
	return authResult{session: s, sessionID: c.Value, operator: s.operator}, nil, authlimit.Passed
}

// errTooManyFailures refuses a client address that has had too many
// failed authentications.
func errTooManyFailures(wait time.Duration) *pageError {
	retry := authlimit.RetryAfter(wait)
	return &pageError{Status: http.StatusTooManyRequests, Title: "Too many failed logins from your address",
		Message:    "Too many wrong tokens or unknown sessions came from your address (or, for a second at most, from many addresses the server has no room to tell apart), so the console (and the API) refuse it for now, even with the right token.",
		Advice:     fmt.Sprintf("Wait %s seconds, then log in again with the admin token.", retry),
		retryAfter: retry}
}

// actorFor is the replay audit's actor for a request.
func (h *handler) actorFor(a authResult) string {
	if a.operator == "" {
		return h.actor
	}
	return h.actor + ":" + a.operator
}

// pageFunc is a page or an action behind the login.
type pageFunc func(w http.ResponseWriter, r *http.Request, a authResult) error

// page guards a GET page: without a login it sends the browser to the
// login form, which comes back here afterwards.
func (h *handler) page(fn pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, perr := h.authenticate(r)
		if perr != nil {
			h.renderError(w, r, authResult{}, perr)
			return
		}
		if a.session == nil && !a.bearer {
			if h.portal != nil {
				if a.stale {
					http.SetCookie(w, portalCookie("", time.Time{}))
				}
				h.renderError(w, r, a, errPortalSession(a.stale))
				return
			}
			if a.stale {
				http.SetCookie(w, h.cookie("", -1))
			}
			http.Redirect(w, r, Prefix+"/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if err := fn(w, r, a); err != nil {
			h.fail(w, r, a, err)
		}
	}
}

// action guards a POST that changes something: it needs a login, a
// same-origin request, and, for a cookie session, the session's CSRF token
// in the form.
func (h *handler) action(fn pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := h.origin.Check(r); err != nil {
			h.renderError(w, r, authResult{}, errCrossOrigin())
			return
		}
		a, perr := h.authenticate(r)
		if perr != nil {
			h.renderError(w, r, authResult{}, perr)
			return
		}
		if a.session == nil && !a.bearer && h.portal != nil {
			// As page does: an ended or revoked session's cookie is
			// cleared whichever request meets it first.
			if a.stale {
				http.SetCookie(w, portalCookie("", time.Time{}))
			}
			h.renderError(w, r, authResult{}, errPortalSession(a.stale))
			return
		}
		if a.session == nil && !a.bearer {
			h.renderError(w, r, authResult{}, &pageError{Status: http.StatusUnauthorized, Title: "Not logged in",
				Message: "This action needs a login, and there is none: the session ended, the server restarted, or you logged out.",
				Advice:  "Log in again, then repeat the action.", Link: Prefix + "/login", LinkText: "Log in"})
			return
		}
		// Before the CSRF check: a read-only session's pages carry no
		// forms, so no token either, and the refusal should say why.
		if a.scope != nil && a.scope.ReadOnly {
			h.renderError(w, r, a, errReadOnly())
			return
		}
		if err := r.ParseForm(); err != nil {
			h.renderError(w, r, a, &pageError{Status: http.StatusBadRequest, Title: "Unreadable form",
				Message: "The form sent could not be read (it may be too large).", Advice: "Go back, reload the page and try again."})
			return
		}
		if a.session != nil {
			got := r.PostForm.Get(CSRFField)
			if subtle.ConstantTimeCompare([]byte(got), []byte(a.session.csrf)) != 1 {
				h.renderError(w, r, a, &pageError{Status: http.StatusForbidden, Title: "Action refused: the form's security token is missing or stale",
					Message: "Every console form carries a token tied to your login, so that another site cannot submit it for you (CSRF protection). This form's token was missing or belongs to an earlier login.",
					Advice:  "Go back, reload the page to get a fresh form, and try again. Nothing was changed."})
				return
			}
		}
		if err := fn(w, r, a); err != nil {
			h.fail(w, r, a, err)
		}
	}
}

type loginData struct {
	base
	Next  string
	Error string
	// LoggedOut confirms a logout.
	LoggedOut bool
}

// GET /console/login
func (h *handler) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	data := loginData{base: h.base(authResult{}, "", "Log in"), Next: next, LoggedOut: r.URL.Query().Get("done") == "logout"}
	a, perr := h.authenticate(r)
	switch {
	case perr != nil && perr.Status == http.StatusTooManyRequests:
		h.refuseLogin(w, data, perr)
		return
	case a.session != nil:
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	case a.stale:
		http.SetCookie(w, h.cookie("", -1))
	}
	h.render(w, http.StatusOK, "login", data)
}

// refuseLogin shows the login form with a refusal of the limiter.
func (h *handler) refuseLogin(w http.ResponseWriter, data loginData, perr *pageError) {
	w.Header().Set("Retry-After", perr.retryAfter)
	data.Error = perr.Message + " " + perr.Advice
	h.render(w, perr.Status, "login", data)
}

// POST /console/login
//
// The login form needs no CSRF token (there is no session yet to tie one
// to), but it must come from the console's own origin, so another site
// cannot log a browser into this console.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := h.origin.Check(r); err != nil {
		h.renderError(w, r, authResult{}, errCrossOrigin())
		return
	}
	data := loginData{base: h.base(authResult{}, "", "Log in")}
	if err := r.ParseForm(); err != nil {
		data.Error = "The form sent could not be read. Reload the page and try again."
		h.render(w, http.StatusBadRequest, "login", data)
		return
	}
	data.Next = safeNext(r.PostForm.Get("next"))
	ok := false
	wait := h.limiter.CheckRequest(r, func() authlimit.Outcome {
		switch {
		case h.insecure:
			ok = true
			return authlimit.Absent
		case h.tokenOK(r.PostForm.Get("token")):
			ok = true
			return authlimit.Passed
		}
		return authlimit.Failed
	})
	if wait > 0 {
		h.refuseLogin(w, data, errTooManyFailures(wait))
		return
	}
	if !ok {
		// The limiter warns once when an address is refused; each
		// wrong token is only worth a debug line.
		h.log.Debug("console login with a wrong token", "client", h.limiter.Client(r))
		data.Error = "That is not this server's admin token. Enter the value of FORMS_SERVER_ADMIN_TOKEN (or the token `hymical serve` printed when it started without one)."
		h.render(w, http.StatusUnauthorized, "login", data)
		return
	}
	id, _, err := h.sessions.create(r.Context(), storage.OperatorName(r.PostForm.Get("operator")), h.now())
	if err != nil {
		h.fail(w, r, authResult{}, err)
		return
	}
	http.SetCookie(w, h.cookie(id, int(h.sessions.ttl.Seconds())))
	http.Redirect(w, r, data.Next, http.StatusSeeOther)
}

// cookie is the session cookie. Secure: browsers send it only over HTTPS,
// and to http://localhost and http://127.0.0.1, which they count as
// secure; so behind anything but loopback the console needs TLS (a
// reverse proxy that terminates it is fine). HttpOnly: no script reads
// it. SameSite=Strict: no other site's link or form carries it.
func (h *handler) cookie(value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: CookieName, Value: value, Path: Prefix, MaxAge: maxAge,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	}
}

// POST /console/logout
func (h *handler) logout(w http.ResponseWriter, r *http.Request, a authResult) error {
	if a.sessionID != "" {
		if err := h.sessions.end(r.Context(), a.sessionID); err != nil {
			return err
		}
	}
	http.SetCookie(w, h.cookie("", -1))
	http.Redirect(w, r, Prefix+"/login?done=logout", http.StatusSeeOther)
	return nil
}

// safeNext keeps a post-login redirect inside the console, so the login
// form cannot be used to send someone elsewhere.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix+"/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix + "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(path.Clean(u.Path)+"/", Prefix+"/") {
		return Prefix + "/"
	}
	return next
}
