package console

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/hymical/hymical/server/access"
	"github.com/hymical/hymical/server/authlimit"
	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/server/faceopts"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

// PortalPrefix is where the portal is mounted: the pages a form owner
// opens with a portal link, scoped to the link's forms.
const PortalPrefix = "/portal"

// PortalCookieName is the portal's session cookie, apart from the
// console's: its value is the raw portal session secret (hymps_…), of
// which the store keeps only the SHA-256.
const PortalCookieName = "hymical_portal"

// DefaultBrandName is the portal's heading when PortalOptions.BrandName is
// empty.
const DefaultBrandName = "Webhooks"

// PortalStore is what the portal needs: the console's reads and changes,
// and the portal links and sessions of package access.
type PortalStore interface {
	Store
	access.Store
}

// PortalOptions configure the handler NewPortal builds.
type PortalOptions struct {
	// Store holds the delivery state and the portal's sessions; required.
	Store PortalStore
	// Transports checks a new or changed endpoint with its plugin, as the
	// API does; required.
	Transports Transports
	// FrameAncestors is the CSP frame-ancestors source list: the origins
	// that may embed the portal in a frame. Empty means 'none'. Check it
	// with faceopts.CheckFrameAncestors.
	FrameAncestors []string
	// BrandName heads every page; empty means DefaultBrandName.
	BrandName string
	// AccentColor is the colour of links and buttons, #rgb or #rrggbb;
	// empty keeps the console's. Check it with faceopts.CheckAccentColor.
	AccentColor string
	// AuthLimiter, TraceURL, SecretRotationGrace, Logger and
	// OperatorEndpoint are the console's (see Options).
	AuthLimiter         *authlimit.Limiter
	TraceURL            telemetry.TraceURLTemplate
	SecretRotationGrace time.Duration
	Logger              *slog.Logger
	OperatorEndpoint    string
}

// portalFace is what makes a handler the portal.
type portalFace struct {
	store          PortalStore
	frameAncestors string
	base           portalBase
	brandCSS       []byte
}

// portalBase is what the portal's pages show of its brand.
type portalBase struct {
	Brand string
	// BrandCSS says a stylesheet with the accent colour is linked.
	BrandCSS bool
}

// NewPortal checks opts and returns the portal's handler, to be mounted at
// PortalPrefix + "/". It is the console's handler with another face: the
// same pages, each showing and changing only what the session's scope
// holds.
func NewPortal(opts PortalOptions) (http.Handler, error) {
	if opts.Store == nil || opts.Transports == nil {
		return nil, errors.New("portal: PortalOptions.Store and PortalOptions.Transports are required")
	}
	if err := faceopts.CheckFrameAncestors(opts.FrameAncestors); err != nil {
		return nil, fmt.Errorf("portal: frame ancestors: %w", err)
	}
	if err := faceopts.CheckAccentColor(opts.AccentColor); err != nil {
		return nil, fmt.Errorf("portal: accent colour: %w", err)
	}
	h, err := newHandler(Options{
		Store:      opts.Store,
		Transports: opts.Transports,
		// Never compared: the portal reads no admin token (see
		// identifyPortal). Set so that newHandler's check passes.
		AdminTokenDigest:    sha256.Sum256([]byte("portal: no admin token")),
		AuthLimiter:         opts.AuthLimiter,
		Actor:               "portal",
		TraceURL:            opts.TraceURL,
		SecretRotationGrace: opts.SecretRotationGrace,
		SessionTTL:          faceopts.DefaultSessionTTL,
		Logger:              opts.Logger,
		OperatorEndpoint:    opts.OperatorEndpoint,
	})
	if err != nil {
		return nil, err
	}
	brand := strings.TrimSpace(opts.BrandName)
	if brand == "" {
		brand = DefaultBrandName
	}
	face := &portalFace{store: opts.Store, frameAncestors: strings.Join(opts.FrameAncestors, " "), base: portalBase{Brand: brand}}
	if opts.AccentColor != "" {
		face.base.BrandCSS = true
		face.brandCSS = fmt.Appendf(nil, ":root { --accent: %s; --busy: %s; }\n", opts.AccentColor, opts.AccentColor)
	}
	h.portal, h.prefix, h.log = face, PortalPrefix, h.log.With("face", "portal")
	static, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, fmt.Errorf("portal: embedded assets: %w", err)
	}
	h.static = http.StripPrefix(PortalPrefix+"/static/", http.FileServerFS(static))
	h.mux = http.NewServeMux()
	h.routes()
	return h, nil
}

func (h *handler) portalRoutes() {
	p := PortalPrefix
	h.mux.HandleFunc("GET "+p+"/static/brand.css", h.serveBrand)
	h.mux.HandleFunc("GET "+p+"/static/", h.serveStatic)
	h.mux.HandleFunc("GET "+p+"/start", h.portalStart)
	h.mux.HandleFunc("GET "+p+"/{$}", h.page(func(w http.ResponseWriter, r *http.Request, _ authResult) error {
		http.Redirect(w, r, p+"/endpoints", http.StatusSeeOther)
		return nil
	}))
	h.mux.HandleFunc("GET "+p+"/deliveries", h.page(h.deliveries))
	h.mux.HandleFunc("POST "+p+"/deliveries/replay", h.action(h.replayMany))
	h.mux.HandleFunc("GET "+p+"/deliveries/{id}", h.page(h.delivery))
	h.mux.HandleFunc("POST "+p+"/deliveries/{id}/replay", h.action(h.replay))
	h.mux.HandleFunc("GET "+p+"/endpoints", h.page(h.endpoints))
	h.mux.HandleFunc("GET "+p+"/endpoints/new", h.page(h.newEndpointPage))
	h.mux.HandleFunc("POST "+p+"/endpoints/new", h.action(h.createEndpoint))
	h.mux.HandleFunc("GET "+p+"/endpoints/{id}/edit", h.page(h.editEndpointPage))
	h.mux.HandleFunc("POST "+p+"/endpoints/{id}/edit", h.action(h.updateEndpoint))
	h.mux.HandleFunc("POST "+p+"/endpoints/{id}/disable", h.action(h.disable))
	h.mux.HandleFunc("POST "+p+"/endpoints/{id}/enable", h.action(h.enable))
	h.mux.HandleFunc("POST "+p+"/endpoints/{id}/rotate-secret", h.action(h.rotate))
	h.mux.HandleFunc("POST "+p+"/endpoints/{id}/test", h.action(h.sendTest))
	h.mux.HandleFunc("GET "+p+"/endpoints/{id}/delete", h.page(h.confirmDelete))
	h.mux.HandleFunc("POST "+p+"/endpoints/{id}/delete", h.action(h.deleteEndpoint))
}

func (h *handler) serveBrand(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, _ = w.Write(h.portal.brandCSS)
}

// GET /portal/start?link=hympl_…
//
// Redeems the single-use link: the link is spent and a session made in one
// transaction, the session's secret goes into the cookie, and the browser
// goes on to the portal. A link that is unknown, used or expired gets the
// same 404 page (which of the three is not said, so links cannot be
// probed), and nothing is set. The link and the session count as
// credentials in the limiter the API shares.
func (h *handler) portalStart(w http.ResponseWriter, r *http.Request) {
	var (
		raw     string
		session storage.AccessToken
		err     error
	)
	link := r.URL.Query().Get("link")
	wait := h.limiter.CheckRequest(r, func() authlimit.Outcome {
		raw, session, err = access.RedeemPortalLink(r.Context(), h.portal.store, link, h.now())
		switch {
		case err == nil:
			return authlimit.Passed
		case errors.Is(err, access.ErrUnauthenticated):
			return authlimit.Failed
		}
		return authlimit.Absent
	})
	switch {
	case wait > 0:
		h.renderError(w, r, authResult{}, errTooManyFailures(wait))
		return
	case errors.Is(err, access.ErrUnauthenticated):
		h.renderError(w, r, authResult{}, &pageError{Status: http.StatusNotFound, Title: "This link does not open the portal",
			Message: "The link is unknown, was used already, or has expired: each portal link opens one session, once, within its time.",
			Advice:  "Go back to the product that sent you here and open the portal from it again, which makes a fresh link.", cause: err})
		return
	case err != nil:
		h.fail(w, r, authResult{}, err)
		return
	}
	h.log.Info("portal session started", "session", session.ID, "forms", len(session.Forms), "read_only", session.ReadOnly, "expires_at", session.ExpiresAt)
	http.SetCookie(w, portalCookie(raw, session.ExpiresAt))
	http.Redirect(w, r, PortalPrefix+"/", http.StatusSeeOther)
}

// portalCookie is the portal's session cookie. HttpOnly: no script reads
// it. SameSite=None with Secure: the portal is made to be embedded in a
// frame of another site, where a Lax or Strict cookie is not sent; None
// needs Secure, so browsers send it only over HTTPS (and to
// http://localhost and http://127.0.0.1, which they count as secure).
// What SameSite=None gives up, the CSRF token of every form and the
// cross-origin check of every POST keep. It expires with the session.
func portalCookie(value string, expires time.Time) *http.Cookie {
	c := &http.Cookie{
		Name: PortalCookieName, Value: value, Path: PortalPrefix,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteNoneMode,
	}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = expires.UTC()
	}
	return c
}

// identifyPortal is identify for the portal: only its session cookie
// counts (never an Authorization header: a scoped API token is the API's),
// and a session's CSRF token is derived from its secret, so any server
// process sharing the database checks it without keeping sessions in
// memory.
func (h *handler) identifyPortal(r *http.Request) (authResult, *pageError, authlimit.Outcome) {
	c, err := r.Cookie(PortalCookieName)
	if err != nil || c.Value == "" {
		return authResult{}, nil, authlimit.Absent
	}
	t, err := access.PortalSession(r.Context(), h.portal.store, c.Value, h.now())
	switch {
	case errors.Is(err, access.ErrUnauthenticated):
		return authResult{stale: true}, nil, authlimit.Failed
	case err != nil:
		return authResult{}, storeError(err, "portal session"), authlimit.Absent
	}
	scope := access.ScopeOf(t)
	s := &session{csrf: portalCSRF(c.Value), operator: t.ID, expires: t.ExpiresAt}
	return authResult{session: s, sessionID: t.ID, operator: t.ID, scope: &scope}, nil, authlimit.Passed
}

// portalCSRF is a session's CSRF token: a hash of its secret under a label
// of its own, which a page of another site cannot know or compute.
func portalCSRF(secret string) string {
	sum := sha256.Sum256([]byte("hymical portal csrf\x00" + secret))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// errPortalSession answers a portal page asked for without a live session.
func errPortalSession(stale bool) *pageError {
	msg := "This page needs a portal session, and the request carried none."
	if stale {
		msg = "Your portal session has ended (sessions last a set time, and can be ended early), or its cookie is not one this server made."
	}
	return &pageError{Status: http.StatusUnauthorized, Title: "No portal session", Message: msg,
		Advice: "Open the portal again from the product that sent you here: it makes a fresh link."}
}

// errOutOfScope is what a portal session is told of anything outside its
// scope: storage.ErrNotFound, so the page is the one a missing id gets and
// ids of other forms cannot be probed.
var errOutOfScope = fmt.Errorf("outside the session's scope: %w", storage.ErrNotFound)

// scopeForms is the Forms filter of a store read for a: nil (everything)
// for the operator, the scope's forms for a portal session.
func scopeForms(a authResult) []string {
	if a.scope == nil {
		return nil
	}
	// Non-nil even if empty: an empty scope matches nothing.
	return append([]string{}, a.scope.Forms...)
}

// narrow limits a delivery filter to what a sees: the deliveries to the
// endpoints of its scope, not the operator endpoint's, as deliveryFor
// decides for one.
func (h *handler) narrow(a authResult, f *storage.DeliveryFilter) {
	if a.scope == nil {
		return
	}
	f.Forms = scopeForms(a)
	f.ExceptEndpointID = h.operatorEndpoint
}

// seesEndpoint says whether a may see and change e. The operator endpoint
// is the operator's alone, whatever forms it names.
func (h *handler) seesEndpoint(a authResult, e storage.Endpoint) bool {
	if a.scope == nil {
		return true
	}
	return a.scope.AllowsEndpoint(e) && (h.operatorEndpoint == "" || e.ID != h.operatorEndpoint)
}

// allow is the check a change of an endpoint makes on the endpoint it
// writes, for a (endpoint.Allow): endpointFor's check comes before the
// change, and this one holds against an admin moving the endpoint out of
// a's scope in between.
func (h *handler) allow(a authResult) endpoint.Allow {
	if a.scope == nil {
		return nil
	}
	return func(e storage.Endpoint) error {
		if !h.seesEndpoint(a, e) {
			return errOutOfScope
		}
		return nil
	}
}

// endpointFor reads endpoint id as a may see it: one outside a's scope is
// errOutOfScope.
func (h *handler) endpointFor(r *http.Request, a authResult, id string) (storage.Endpoint, error) {
	e, err := h.store.EndpointGet(r.Context(), id)
	if err != nil {
		return e, err
	}
	if !h.seesEndpoint(a, e) {
		return storage.Endpoint{}, errOutOfScope
	}
	return e, nil
}

// deliveryFor reads delivery id and its event as a may see them: a
// delivery to an endpoint outside a's scope is errOutOfScope, whatever
// its event's form (storage.DeliveryFilter.Forms is the same rule).
func (h *handler) deliveryFor(r *http.Request, a authResult, id string) (storage.Delivery, storage.Event, error) {
	d, err := h.store.DeliveryGet(r.Context(), id)
	if err != nil {
		return d, storage.Event{}, err
	}
	if a.scope != nil {
		if _, err := h.endpointFor(r, a, d.EndpointID); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				err = errOutOfScope
			}
			return storage.Delivery{}, storage.Event{}, err
		}
	}
	ev, err := h.store.EventGet(r.Context(), d.EventID)
	if err != nil {
		return storage.Delivery{}, ev, err
	}
	return d, ev, nil
}
