package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/hymical/hymical/server/access"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/storage"
)

// Bounds of what an admin may hand out. A scoped token is given to
// somebody else's systems, so it cannot be made to last for ever: a year
// at most, renewed by making another. A portal session is a person at a
// browser: a day at most; the embedding product makes a new link when it
// needs one.
const (
	maxTokenLifetime   = 365 * 24 * time.Hour
	maxPortalSession   = 24 * time.Hour
	portalLinkTTL      = 10 * time.Minute
	portalStartPath    = "/portal/start"
	portalLinkQueryKey = "link"
)

func tokenName(id string) string { return fmt.Sprintf("token %q", clip(id)) }

func portalLinkName(id string) string { return fmt.Sprintf("portal link %q", clip(id)) }

// newScope reads a request's forms into a scope, answering a bad one with
// what is wrong with it.
func newScope(forms []string, readOnly bool) (access.Scope, error) {
	s, err := access.NewScope(forms, readOnly)
	if err != nil {
		return s, refuse(apiwire.CodeInvalidRequest, "forms: %s; give between 1 and %d distinct form ids",
			strings.TrimPrefix(err.Error(), "scope: "), storage.MaxAccessForms)
	}
	return s, nil
}

// POST /v1/tokens
//
// The answer carries the token's secret, this once: only its SHA-256 is
// stored.
func (h *handler) createToken(w http.ResponseWriter, r *http.Request) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	var req apiwire.TokenCreate
	if err := decodeObject(body, &req, false); err != nil {
		return err
	}
	scope, err := newScope(req.Forms, req.ReadOnly)
	if err != nil {
		return err
	}
	if len(req.Name) > storage.MaxAccessNameBytes {
		return refuse(apiwire.CodeInvalidRequest, "name is %d bytes long; the most is %d", len(req.Name), storage.MaxAccessNameBytes)
	}
	now := h.now()
	var expires time.Time
	switch {
	case (req.ExpiresIn == "") == (req.ExpiresAt == nil):
		return refuse(apiwire.CodeInvalidRequest, "give exactly one of expires_in (a duration such as \"720h\") and expires_at (an RFC 3339 time): a scoped token always expires, at most %s after it is made", maxTokenLifetime)
	case req.ExpiresAt != nil:
		expires = *req.ExpiresAt
	default:
		d, err := time.ParseDuration(strings.TrimSpace(req.ExpiresIn))
		if err != nil {
			return refuse(apiwire.CodeInvalidRequest, "expires_in %q is not a duration; write it as \"720h\" or \"90m\"", clip(req.ExpiresIn))
		}
		expires = now.Add(d)
	}
	if !expires.After(now) || expires.Sub(now) > maxTokenLifetime {
		return refuse(apiwire.CodeInvalidRequest, "the token would expire at %s; give a time after now and at most %s from now, and make a new token when it runs out",
			expires.UTC().Format(time.RFC3339), maxTokenLifetime)
	}
	secret, t, err := access.NewToken(r.Context(), h.store, req.Name, scope, expires, now)
	if err != nil {
		return storeError(err, "the token")
	}
	w.Header().Set("Location", "/v1/tokens/"+t.ID)
	writeJSON(w, http.StatusCreated, apiwire.TokenCreated{Token: viewToken(t), Secret: secret})
	return nil
}

// GET /v1/tokens
func (h *handler) listTokens(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	ts, err := h.store.TokenList(r.Context())
	if err != nil {
		return storeError(err, "the tokens")
	}
	out := apiwire.TokenList{Tokens: make([]apiwire.Token, 0, len(ts))}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, viewToken(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// DELETE /v1/tokens/{id}
//
// Revoking is idempotent: a revoked token answers with when it was first
// revoked. The next request with it is refused, by every process sharing
// the database, since none caches tokens.
func (h *handler) revokeToken(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := h.emptyBody(w, r); err != nil {
		return err
	}
	t, err := h.store.TokenRevoke(r.Context(), id, h.now())
	if err != nil {
		return storeError(err, tokenName(id))
	}
	writeJSON(w, http.StatusOK, viewToken(t))
	return nil
}

// POST /v1/portal/sessions
//
// The answer is a link that opens the portal once, within portalLinkTTL,
// into a session that lasts the request's ttl. Its host is the one this
// request was sent to (Host header, https when it came over TLS): the
// config has no public URL, so give the link to a browser that reaches
// the server by the same name as the caller did.
func (h *handler) createPortalSession(w http.ResponseWriter, r *http.Request) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	var req apiwire.PortalSessionCreate
	if err := decodeObject(body, &req, false); err != nil {
		return err
	}
	scope, err := newScope(req.Forms, req.ReadOnly)
	if err != nil {
		return err
	}
	ttl, err := time.ParseDuration(strings.TrimSpace(req.TTL))
	if err != nil || ttl <= 0 || ttl > maxPortalSession {
		return refuse(apiwire.CodeInvalidRequest, "ttl %q is not a duration from 1s to %s; write it as \"1h\" or \"30m\"", clip(req.TTL), maxPortalSession)
	}
	now := h.now()
	secret, made, err := access.NewPortalLink(r.Context(), h.store, scope, portalLinkTTL, ttl, now)
	if errors.Is(err, storage.ErrInvalid) {
		return refuse(apiwire.CodeInvalidRequest, "the portal link was refused: %v", err)
	}
	if err != nil {
		return storeError(err, "the portal link")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	link := url.URL{Scheme: scheme, Host: r.Host, Path: portalStartPath,
		RawQuery: url.Values{portalLinkQueryKey: {secret}}.Encode()}
	writeJSON(w, http.StatusCreated, apiwire.PortalSession{ID: made.ID, URL: link.String(), ExpiresAt: made.ExpiresAt.UTC()})
	return nil
}

// portalLinkCursorPattern is a portal link's id, which is what a cursor of
// GET /v1/portal/sessions is.
var portalLinkCursorPattern = regexp.MustCompile(`^acc_[0-9a-f]{32}$`)

// GET /v1/portal/sessions
//
// Lists the links, not the sessions: a session is known by the link it
// came from, and revoked with it. Paged like GET /v1/endpoints, since a
// product may make a link each time a customer opens its page.
func (h *handler) listPortalLinks(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "limit", "cursor")
	if err != nil {
		return err
	}
	limit, cursor, err := page(q, portalLinkCursorPattern)
	if err != nil {
		return err
	}
	// One more than the page tells whether there is a next page.
	ls, err := h.store.PortalLinkList(r.Context(), storage.PortalLinkListParams{Before: cursor, Limit: limit + 1})
	if err != nil {
		return storeError(err, "the portal links")
	}
	out := apiwire.PortalLinkList{Links: make([]apiwire.PortalLink, 0, min(len(ls), limit))}
	for i, l := range ls {
		if i == limit {
			next := ls[limit-1].ID
			out.NextCursor = &next
			break
		}
		out.Links = append(out.Links, viewPortalLink(l))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// DELETE /v1/portal/sessions/{id}
//
// Revokes the link and the session it became, as DELETE /v1/tokens/{id}
// revokes a token: idempotent, and held by every process sharing the
// database at the session's next request, since none caches sessions.
func (h *handler) revokePortalLink(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := h.emptyBody(w, r); err != nil {
		return err
	}
	l, err := h.store.PortalLinkRevoke(r.Context(), id, h.now())
	if err != nil {
		return storeError(err, portalLinkName(id))
	}
	writeJSON(w, http.StatusOK, viewPortalLink(l))
	return nil
}

func viewPortalLink(l storage.PortalLink) apiwire.PortalLink {
	v := apiwire.PortalLink{ID: l.ID, Forms: l.Forms, ReadOnly: l.ReadOnly,
		ExpiresAt: l.ExpiresAt.UTC(), CreatedAt: l.CreatedAt.UTC(),
		UsedAt: utcPtr(l.UsedAt), SessionExpiresAt: utcPtr(l.SessionExpiresAt), RevokedAt: utcPtr(l.RevokedAt)}
	if v.Forms == nil {
		v.Forms = []string{}
	}
	return v
}

func viewToken(t storage.AccessToken) apiwire.Token {
	v := apiwire.Token{ID: t.ID, Name: t.Name, Forms: t.Forms, ReadOnly: t.ReadOnly,
		ExpiresAt: t.ExpiresAt.UTC(), CreatedAt: t.CreatedAt.UTC()}
	if v.Forms == nil {
		v.Forms = []string{}
	}
	v.RevokedAt = utcPtr(t.RevokedAt)
	return v
}
