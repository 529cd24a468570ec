// Package console is the operator console: server-rendered HTML pages,
// mounted at /console on the API's listener, to see how delivery is going,
// find a delivery and read its attempt history, replay terminal
// deliveries one by one or in bulk, and enable, disable, rotate the
// secret of, add, edit, send a test event to or delete endpoints.
//
// It owns the console's sessions (kept in the store, so a login holds on
// every server sharing it), its CSRF tokens and its templates and
// stylesheet (embedded, so the server needs no asset build). It changes delivery state only through the Store methods an
// operator's replay uses, and endpoints only through the shared changes in
// package server, so it cannot do anything the API could not. It never
// shows a signing secret, except the new one once, right after a rotation.
package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/hymical/hymical/server/authlimit"
	"github.com/hymical/hymical/server/devmode"
	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/server/faceopts"
	"github.com/hymical/hymical/server/retrypolicy"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

// Prefix is the path the console is mounted at. Every page is under
// Prefix + "/", and the session cookie is scoped to it.
const Prefix = "/console"

// DefaultActor is the replay audit's actor when Options.Actor is empty.
const DefaultActor = "console"

// Store is what the console needs of the delivery store: reading and
// replaying deliveries, adding and looking after endpoints, and storing a
// test event. Like the API's, it holds nothing that claims.
type Store interface {
	storage.Deliveries
	storage.Replays
	EventGet(ctx context.Context, id string) (storage.Event, error)
	EndpointList(ctx context.Context) ([]storage.Endpoint, error)
	EndpointListPage(ctx context.Context, p storage.EndpointListParams) ([]storage.Endpoint, error)
	EndpointLastErrors(ctx context.Context, ids []string) (map[string]string, error)
	EndpointGet(ctx context.Context, id string) (storage.Endpoint, error)
	EndpointUpdate(ctx context.Context, e storage.Endpoint) (storage.Endpoint, error)
	EndpointRotate(ctx context.Context, p storage.EndpointRotateParams) (storage.EndpointRotateResult, error)
	EndpointDelete(ctx context.Context, p storage.EndpointDeleteParams) (storage.EndpointDeleteResult, error)
	storage.ConsoleSessions
	EndpointCreate(ctx context.Context, p storage.EndpointCreateParams) (storage.EndpointCreateResult, error)
	EventCreate(ctx context.Context, e storage.Event) (storage.EventCreateResult, error)
}

// Options configure the handler New builds.
type Options struct {
	// Store holds every piece of delivery state; required.
	Store Store
	// Transports checks an endpoint the add and edit pages are about to
	// store with its plugin, as the API does (pluginhost.Host); required.
	Transports Transports
	// RetryBounds checks the retry schedule the operator sets for an
	// endpoint, as the API's RetryBounds does; nil means
	// retrypolicy.DefaultEndpointBounds. Give it the API's.
	RetryBounds endpoint.RetryBounds
	// AdminTokenDigest is the SHA-256 of the admin token: the console
	// compares digests in constant time and never holds the token itself.
	// Required unless Insecure.
	AdminTokenDigest [sha256.Size]byte
	// Insecure lets anyone in without the token (insecure dev mode). The
	// login page then only starts a session, and every page says so.
	Insecure bool
	// AuthLimiter counts wrong tokens and unknown session cookies per
	// client address and refuses an address that has had too many; give it
	// the API's, so the two share one count. Nil means a limiter of the
	// console's own with authlimit's defaults.
	AuthLimiter *authlimit.Limiter
	// Actor is the replay audit's actor, followed by ":" and the name an
	// operator gives at login; empty means DefaultActor.
	Actor string
	// TraceURL links an attempt's trace id to a tracing UI; the zero value
	// shows ids without links.
	TraceURL telemetry.TraceURLTemplate
	// SecretRotationGrace is how long a rotated-out secret keeps signing;
	// zero means faceopts.DefaultSecretRotationGrace. Give it the API's
	// value.
	SecretRotationGrace time.Duration
	// SessionTTL is how long a login lasts; zero means
	// faceopts.DefaultSessionTTL.
	SessionTTL time.Duration
	// Logger receives failures; nil means slog.Default().
	Logger *slog.Logger
	// OperatorEndpoint is endpoints.operator_endpoint, which the console
	// refuses to delete, as the API does.
	OperatorEndpoint string
}

//go:embed templates/*.html static/*
var assets embed.FS

// handler is the console. Its mutable state is the sessions and the
// limiter of failed authentications, each behind its own lock.
type handler struct {
	store    Store
	digest   [sha256.Size]byte
	insecure bool
	actor    string
	traceURL telemetry.TraceURLTemplate
	grace    time.Duration
	log      *slog.Logger
	sessions *sessions
	limiter  *authlimit.Limiter
	origin   *http.CrossOriginProtection
	pages    map[string]*template.Template
	static   http.Handler
	mux      *http.ServeMux
	now      func() time.Time
	// transports checks a new or changed endpoint with its plugin.
	transports Transports
	// retryBounds checks an endpoint's own retry schedule.
	retryBounds endpoint.RetryBounds
	// operatorEndpoint may not be deleted.
	operatorEndpoint string
	// prefix is where this face is mounted: Prefix for the console,
	// PortalPrefix for the portal.
	prefix string
	// portal is set when this handler is the portal; nil for the console.
	portal *portalFace
}

// New checks opts and returns the console's handler, to be mounted at
// Prefix + "/".
func New(opts Options) (http.Handler, error) {
	h, err := newHandler(opts)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func newHandler(opts Options) (*handler, error) {
	if opts.Store == nil {
		return nil, errors.New("console: Options.Store is required")
	}
	if !opts.Insecure && opts.AdminTokenDigest == [sha256.Size]byte{} {
		return nil, errors.New("console: Options.AdminTokenDigest is required: set an admin token, or run in insecure dev mode on loopback only")
	}
	if opts.Transports == nil {
		return nil, errors.New("console: Options.Transports is required: the add and edit pages check endpoints with their plugin (give it the plugin host)")
	}
	if opts.SessionTTL < 0 || opts.SecretRotationGrace < 0 {
		return nil, fmt.Errorf("console: SessionTTL (%s) and SecretRotationGrace (%s) must not be negative; use 0 for the defaults", opts.SessionTTL, opts.SecretRotationGrace)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, fmt.Errorf("console: embedded assets: %w", err)
	}
	ttl := opts.SessionTTL
	if ttl == 0 {
		ttl = faceopts.DefaultSessionTTL
	}
	grace := opts.SecretRotationGrace
	if grace == 0 {
		grace = faceopts.DefaultSecretRotationGrace
	}
	limiter := opts.AuthLimiter
	if limiter == nil {
		limiter = authlimit.MustNew(authlimit.Config{Logger: log.With("component", "console")})
	}
	actor := strings.TrimSpace(opts.Actor)
	if actor == "" {
		actor = DefaultActor
	}
	h := &handler{
		store:    opts.Store,
		digest:   opts.AdminTokenDigest,
		insecure: opts.Insecure,
		actor:    actor,
		traceURL: opts.TraceURL,
		grace:    grace,
		log:      log.With("component", "console"),
		sessions: newSessions(opts.Store, ttl, maxSessions),
		limiter:  limiter,
		origin:   http.NewCrossOriginProtection(),
		pages:    pages,
		static:   http.StripPrefix(Prefix+"/static/", http.FileServerFS(static)),
		mux:      http.NewServeMux(),
		now:      time.Now,

		transports:       opts.Transports,
		retryBounds:      opts.RetryBounds,
		operatorEndpoint: opts.OperatorEndpoint,
		prefix:           Prefix,
	}
	if h.retryBounds == nil {
		h.retryBounds = retrypolicy.DefaultEndpointBounds()
	}
	h.routes()
	return h, nil
}

func (h *handler) routes() {
	if h.portal != nil {
		h.portalRoutes()
		return
	}
	h.mux.HandleFunc("GET "+Prefix+"/static/", h.serveStatic)
	h.mux.HandleFunc("GET "+Prefix+"/login", h.loginPage)
	h.mux.HandleFunc("POST "+Prefix+"/login", h.login)
	h.mux.HandleFunc("POST "+Prefix+"/logout", h.action(h.logout))

	h.mux.HandleFunc("GET "+Prefix+"/{$}", h.page(h.overview))
	h.mux.HandleFunc("GET "+Prefix+"/deliveries", h.page(h.deliveries))
	h.mux.HandleFunc("POST "+Prefix+"/deliveries/replay", h.action(h.replayMany))
	h.mux.HandleFunc("GET "+Prefix+"/deliveries/{id}", h.page(h.delivery))
	h.mux.HandleFunc("POST "+Prefix+"/deliveries/{id}/replay", h.action(h.replay))
	h.mux.HandleFunc("GET "+Prefix+"/endpoints", h.page(h.endpoints))
	h.mux.HandleFunc("GET "+Prefix+"/endpoints/new", h.page(h.newEndpointPage))
	h.mux.HandleFunc("POST "+Prefix+"/endpoints/new", h.action(h.createEndpoint))
	h.mux.HandleFunc("GET "+Prefix+"/endpoints/{id}/edit", h.page(h.editEndpointPage))
	h.mux.HandleFunc("POST "+Prefix+"/endpoints/{id}/edit", h.action(h.updateEndpoint))
	h.mux.HandleFunc("POST "+Prefix+"/endpoints/{id}/test", h.action(h.sendTest))
	h.mux.HandleFunc("POST "+Prefix+"/endpoints/{id}/disable", h.action(h.disable))
	h.mux.HandleFunc("POST "+Prefix+"/endpoints/{id}/enable", h.action(h.enable))
	h.mux.HandleFunc("POST "+Prefix+"/endpoints/{id}/rotate-secret", h.action(h.rotate))
	// Deleting asks first, on a page of its own: the console runs no
	// script, so the confirmation is a page, and the delete its form.
	h.mux.HandleFunc("GET "+Prefix+"/endpoints/{id}/delete", h.page(h.confirmDelete))
	h.mux.HandleFunc("POST "+Prefix+"/endpoints/{id}/delete", h.action(h.deleteEndpoint))
}

// ServeHTTP sets the headers every answer carries and recovers from panics
// with an error page. Anything no route matches gets a page saying where to
// go instead of the mux's plain text.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	// Pages show delivery data and, once, a new signing secret: nothing
	// may cache them. Static assets override this.
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	// No script at all, styles only from the console itself, forms only
	// back to it, and never inside a frame (clickjacking of Replay)
	// unless this is the portal and its config names the embedding
	// product's origins.
	ancestors := "'none'"
	if h.portal != nil && h.portal.frameAncestors != "" {
		ancestors = h.portal.frameAncestors
	} else {
		hdr.Set("X-Frame-Options", "DENY")
	}
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors "+ancestors+"; base-uri 'none'")
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.log.Error("panic while serving a console page", "method", r.Method, "path", r.URL.Path, "panic", v)
			h.renderError(w, r, authResult{}, errInternal(nil))
		}
	}()
	if h.insecure {
		// Without a token, only this machine may call: see devmode. The
		// console's forms cannot send JSON, so devmode.CheckJSONWrite is
		// the API's alone; the console's actions have their CSRF tokens.
		if ref := devmode.Check(r); ref != nil {
			h.renderError(w, r, authResult{}, &pageError{Status: ref.Status, Title: "Refused in insecure dev mode",
				Message: strings.ToUpper(ref.Message[:1]) + ref.Message[1:] + ".",
				Advice:  "Nothing was changed. Open the console at http://127.0.0.1 or http://localhost with the port the server listens on, and use its own links and buttons."})
			return
		}
	}
	if _, pattern := h.mux.Handler(r); pattern == "" {
		h.unrouted(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// unrouted answers a request no route matched: the console's own root
// without its slash goes to the overview, a known path with the wrong
// method is a 405, anything else a 404.
func (h *handler) unrouted(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == h.prefix {
		http.Redirect(w, r, h.prefix+"/", http.StatusMovedPermanently)
		return
	}
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.mux.Handler(probe); pattern != "" && m != r.Method {
			w.Header().Set("Allow", m)
			h.renderError(w, r, authResult{}, &pageError{Status: http.StatusMethodNotAllowed, Title: "Method not allowed",
				Message: fmt.Sprintf("%s is not allowed on %s.", r.Method, r.URL.Path),
				Advice:  "Use the buttons and links on the console's pages rather than typing addresses."})
			return
		}
	}
	face, start := "console", "Start from the overview"
	if h.portal != nil {
		face, start = "portal", "Start from the endpoints"
	}
	h.renderError(w, r, authResult{}, &pageError{Status: http.StatusNotFound, Title: "Page not found",
		Message: fmt.Sprintf("The %s has no page at %s.", face, r.URL.Path),
		Advice:  start + ", or find a delivery in the deliveries list."})
}

func (h *handler) serveStatic(w http.ResponseWriter, r *http.Request) {
	// The stylesheet holds nothing private, and the login page needs it.
	w.Header().Set("Cache-Control", "public, max-age=3600")
	h.static.ServeHTTP(w, r)
}

// base is what every page's template gets besides its own data.
type base struct {
	Title    string
	Nav      string
	LoggedIn bool
	// CSRF goes in a hidden field of every form that changes something.
	CSRF     string
	Operator string
	Insecure bool
	// Flash is a one-line confirmation of what the last action did.
	Flash string
	// Prefix is where the face is mounted, for every link and form.
	Prefix string
	// Portal is set on the portal's pages: its brand, its navigation.
	Portal *portalBase
	// CanWrite shows the controls that change something: false for a
	// read-only portal session.
	CanWrite bool
}

// base fills the common page data for a request made by a (the zero
// value when nobody is logged in). A bearer request gets the navigation but
// no logout form: it has no session to end.
func (h *handler) base(a authResult, nav, title string) base {
	b := base{Title: title, Nav: nav, Insecure: h.insecure, LoggedIn: a.session != nil || a.bearer, Operator: a.operator,
		Prefix: h.prefix, CanWrite: a.scope == nil || !a.scope.ReadOnly}
	if h.portal != nil {
		b.Portal, b.Insecure, b.Operator = &h.portal.base, false, ""
	}
	if a.session != nil {
		b.CSRF = a.session.csrf
	}
	return b
}

// render executes the named page into a buffer first, so a template error
// becomes an error page rather than half a page.
func (h *handler) render(w http.ResponseWriter, status int, page string, data any) {
	var buf bytes.Buffer
	if err := h.execute(&buf, page, data); err != nil {
		h.log.Error("console page failed to render", "page", page, "error", err)
		buf.Reset()
		status = http.StatusInternalServerError
		if err := h.execute(&buf, "error", errorData{Error: errInternal(nil)}); err != nil {
			http.Error(w, "the console could not render this page; see the server log", status)
			return
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (h *handler) execute(w io.Writer, page string, data any) error {
	t, ok := h.pages[page]
	if !ok {
		return fmt.Errorf("no page template %q", page)
	}
	return t.ExecuteTemplate(w, "layout", data)
}
