package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/authlimit"
	"github.com/hymical/hymical/server/devmode"
	"github.com/hymical/hymical/server/faceopts"
	"github.com/hymical/hymical/server/retrypolicy"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

// Headers the API reads or writes beyond the standard ones.
const (
	// HeaderIdempotencyKey makes a retried ingest request return the first
	// result instead of creating a second event, and a retried
	// POST /v1/endpoints return the first endpoint instead of a second.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderIdempotentReplayed is "true" on a response that repeats the
	// result of an earlier request with the same Idempotency-Key.
	HeaderIdempotentReplayed = "Idempotent-Replayed"
	// HeaderOperator names the person behind a replay, for the audit record.
	HeaderOperator = "Hymical-Operator"
	// HeaderAuth is "disabled" on every response of an API built with
	// Options.Insecure, so nobody mistakes a dev server for a guarded one.
	HeaderAuth = "Hymical-Auth"
)

// Transports is what the API needs of the plugin host: the names of the
// loaded transports, a check of an endpoint by the plugin that would send
// to it, and whether every plugin runs. *pluginhost.Host satisfies it.
type Transports interface {
	// Validate asks the named plugin whether it can send to e. A refusal
	// wraps transport.ErrRejected and says why; a plugin that did not answer
	// wraps transport.ErrUnavailable.
	Validate(ctx context.Context, name string, e transport.Endpoint) error
	// Names lists the loaded transports.
	Names() []string
	// Up starts any plugin that is not running and returns an error naming
	// each transport that still is not, with why; nil when all run. Its
	// text goes to the log only: /readyz, which anyone may ask, shows the
	// error's Brief() string if it has that method (names and short
	// reasons), and otherwise no more than that a transport is down.
	Up(ctx context.Context) error
}

// Store is what the API needs of the store: the endpoint registry,
// ingest, reading and replaying deliveries, and the schema version for
// /readyz. It holds nothing that claims or ends a claim: the API never
// moves a delivery the worker owns, and the compiler keeps it so.
type Store interface {
	storage.Endpoints
	storage.Events
	storage.Deliveries
	storage.Replays
	// Access holds the scoped tokens and portal links: the API makes,
	// lists and revokes them, and looks a presented token up.
	storage.Access
	SchemaVersion(ctx context.Context) (int, error)
}

// Options configure the handler New builds.
type Options struct {
	// Store holds every piece of delivery state; required.
	Store Store
	// Transports validates endpoints before they are written; required.
	Transports Transports
	// AdminToken authorises every route. Required unless Insecure. Scoped
	// tokens, made with POST /v1/tokens and kept in the store, authorise
	// the endpoint and delivery routes for their forms (scope.go).
	AdminToken string
	// IngestKeys authorise only the ingest routes (submissions and events).
	IngestKeys []string
	// Insecure turns authentication off, for local development only. Every
	// response then carries "Hymical-Auth: disabled" and New logs a warning.
	Insecure bool
	// AuthLimiter counts wrong tokens per client address and refuses an
	// address that has had too many; give the console the same one. Nil
	// means a limiter of the API's own with authlimit's defaults.
	AuthLimiter *authlimit.Limiter
	// MaxBodyBytes bounds a request body; zero means
	// faceopts.DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxNestingDepth bounds how deeply a request body may nest objects
	// and arrays, the outermost counting as 1; zero means
	// faceopts.DefaultMaxNestingDepth, and it may not exceed
	// faceopts.MaxNestingDepthLimit.
	MaxNestingDepth int
	// SecretRotationGrace is how long a rotated-out secret keeps signing
	// next to the new one; zero means faceopts.DefaultSecretRotationGrace.
	SecretRotationGrace time.Duration
	// RetryBounds checks the retry schedule an endpoint sets for itself;
	// nil means retrypolicy.DefaultEndpointBounds.
	RetryBounds RetryBounds
	// Logger receives request failures; nil means slog.Default().
	Logger *slog.Logger
	// Ready, when set, is checked by /readyz after the store; an error
	// makes the server not ready, and its text is the reason shown.
	Ready func(ctx context.Context) error
	// TracerProvider makes a server span for every /v1 request, continuing
	// the caller's W3C trace context, and the fan-out span of an ingest;
	// nil means none. The ingest span's traceparent (or, with tracing off,
	// the caller's) is stored with the event, for its attempts to link to.
	TracerProvider trace.TracerProvider
	// Metrics serves GET /metrics (the Prometheus exposition); nil answers
	// 404 saying how to turn metrics on.
	Metrics http.Handler
	// MetricsPublic lets GET /metrics be scraped without a token. Otherwise
	// it needs the admin token, like every route but ingest and the probes.
	MetricsPublic bool

	// StoreHealth is told when a write fails for want of space and when
	// an ingest succeeds, and /readyz reports a store out of space from
	// it; share it with the worker pool, which tells it of its own writes.
	// nil means one of the API's own.
	StoreHealth *StoreHealth
	// OperatorEndpoint is endpoints.operator_endpoint: the endpoint told
	// when the server disables one. DELETE refuses it.
	OperatorEndpoint string
	// IdempotencyWindow is how long an Idempotency-Key of POST
	// /v1/endpoints, of a secret rotation or of a replay answers with what
	// it first did; zero means storage.DefaultIdempotencyWindow.
	IdempotencyWindow time.Duration
}

// handler is the API. It holds no state of its own beyond what New sets and
// the endpoint locks.
type handler struct {
	store      Store
	transports Transports
	auth       authenticator
	limiter    *authlimit.Limiter
	insecure   bool
	maxBody    int64
	maxDepth   int
	grace      time.Duration
	// retryBounds checks endpoints' own retry schedules.
	retryBounds RetryBounds
	log         *slog.Logger
	ready       func(ctx context.Context) error
	tracer      trace.Tracer
	metrics     http.Handler
	metricsWho  reach
	mux         *http.ServeMux
	// patterns are the routes registered, in order, for the test that
	// holds server/api/openapi.json to them.
	patterns []string
	now      func() time.Time
	// storeHealth knows whether the store has run out of space.
	storeHealth *StoreHealth
	// operatorEndpoint may not be deleted; keyWindow is every keyed route's
	// create's idempotency window.
	operatorEndpoint string
	keyWindow        time.Duration
}

// New checks opts and returns the API's handler.
func New(opts Options) (http.Handler, error) {
	h, err := newHandler(opts)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func newHandler(opts Options) (*handler, error) {
	if opts.Store == nil {
		return nil, errors.New("api: Options.Store is required")
	}
	if opts.Transports == nil {
		return nil, errors.New("api: Options.Transports is required: endpoints are validated by their transport plugin before they are saved")
	}
	if opts.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("api: MaxBodyBytes must not be negative, got %d; use 0 for the default of %d", opts.MaxBodyBytes, faceopts.DefaultMaxBodyBytes)
	}
	if opts.MaxNestingDepth < 0 || opts.MaxNestingDepth > faceopts.MaxNestingDepthLimit {
		return nil, fmt.Errorf("api: MaxNestingDepth must be from 1 to %d, got %d; use 0 for the default of %d", faceopts.MaxNestingDepthLimit, opts.MaxNestingDepth, faceopts.DefaultMaxNestingDepth)
	}
	if opts.IdempotencyWindow < 0 {
		return nil, fmt.Errorf("api: IdempotencyWindow must not be negative, got %s; use 0 for the default of %s", opts.IdempotencyWindow, storage.DefaultIdempotencyWindow)
	}
	if opts.SecretRotationGrace < 0 {
		return nil, fmt.Errorf("api: SecretRotationGrace must not be negative, got %s; use 0 for the default of %s", opts.SecretRotationGrace, faceopts.DefaultSecretRotationGrace)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "api")
	auth, err := newAuthenticator(opts.AdminToken, opts.IngestKeys, opts.Insecure)
	if err != nil {
		return nil, err
	}
	if opts.Insecure {
		log.Warn("the HTTP API runs WITHOUT authentication (insecure dev mode): anyone who can reach it can read deliveries and manage endpoints; never expose it beyond loopback")
	} else if len(opts.AdminToken) < minTokenLen {
		log.Warn("the admin token is short; use at least 32 random characters", "length", len(opts.AdminToken))
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	metricsWho := admin
	if opts.MetricsPublic {
		metricsWho = public
	}
	limiter := opts.AuthLimiter
	if limiter == nil {
		limiter = authlimit.MustNew(authlimit.Config{Logger: log})
	}
	h := &handler{
		tracer:     tp.Tracer(telemetry.ScopeName),
		metrics:    opts.Metrics,
		metricsWho: metricsWho,
		store:      opts.Store,
		transports: opts.Transports,
		auth:       auth,
		limiter:    limiter,
		insecure:   opts.Insecure,
		maxBody:    cmpOr(opts.MaxBodyBytes, faceopts.DefaultMaxBodyBytes),
		maxDepth:   int(cmpOr(int64(opts.MaxNestingDepth), faceopts.DefaultMaxNestingDepth)),
		grace:      cmpOr(opts.SecretRotationGrace, faceopts.DefaultSecretRotationGrace),
		retryBounds: func() RetryBounds {
			if opts.RetryBounds != nil {
				return opts.RetryBounds
			}
			return retrypolicy.DefaultEndpointBounds()
		}(),
		log:              log,
		ready:            opts.Ready,
		mux:              http.NewServeMux(),
		now:              time.Now,
		operatorEndpoint: opts.OperatorEndpoint,
		keyWindow:        opts.IdempotencyWindow,
	}
	h.storeHealth = opts.StoreHealth
	if h.storeHealth == nil {
		h.storeHealth = &StoreHealth{}
	}
	h.routes()
	return h, nil
}

func cmpOr[T int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// reach says who may call a route.
type reach int

const (
	public reach = iota // no token
	ingest              // an ingest key or the admin token
	admin               // the admin token
	// scopedRoute is the admin token or a scoped token: the route answers a
	// scoped token with only what its scope reaches (see scope.go).
	scopedRoute
)

func (h *handler) routes() {
	h.handle("GET /healthz", public, h.healthz)
	h.handle("GET /readyz", public, h.readyz)
	h.handle("GET /metrics", h.metricsWho, h.serveMetrics)
	h.handle("GET /v1/openapi.json", public, h.openAPI)

	h.handle("POST /v1/forms/{form_id}/submissions", ingest, h.createSubmission)
	h.handle("POST /v1/events", ingest, h.createEvent)
	h.handle("GET /v1/event-types", scopedRoute, h.eventTypes)

	h.handle("POST /v1/endpoints", scopedRoute, h.createEndpoint)
	h.handle("GET /v1/endpoints", scopedRoute, h.listEndpoints)
	h.handle("GET /v1/endpoints/{id}", scopedRoute, h.getEndpoint)
	h.handle("PATCH /v1/endpoints/{id}", scopedRoute, h.updateEndpoint)
	h.handle("DELETE /v1/endpoints/{id}", scopedRoute, h.deleteEndpoint)
	h.handle("POST /v1/endpoints/{id}/disable", scopedRoute, h.disableEndpoint)
	h.handle("POST /v1/endpoints/{id}/enable", scopedRoute, h.enableEndpoint)
	h.handle("POST /v1/endpoints/{id}/rotate-secret", scopedRoute, h.rotateSecret)
	h.handle("POST /v1/endpoints/{id}/test", scopedRoute, h.testEndpoint)

	h.handle("GET /v1/deliveries", scopedRoute, h.listDeliveries)
	h.handle("POST /v1/deliveries/replay", scopedRoute, h.replayDeliveries)
	h.handle("GET /v1/deliveries/{id}", scopedRoute, h.getDelivery)
	h.handle("GET /v1/deliveries/{id}/attempts", scopedRoute, h.listAttempts)
	h.handle("GET /v1/deliveries/{id}/payload", scopedRoute, h.deliveryPayload)
	h.handle("POST /v1/deliveries/{id}/replay", scopedRoute, h.replayDelivery)
	h.handle("GET /v1/deliveries/{id}/replays", scopedRoute, h.listReplays)

	h.handle("POST /v1/tokens", admin, h.createToken)
	h.handle("GET /v1/tokens", admin, h.listTokens)
	h.handle("DELETE /v1/tokens/{id}", admin, h.revokeToken)
	h.handle("POST /v1/portal/sessions", admin, h.createPortalSession)
	h.handle("GET /v1/portal/sessions", admin, h.listPortalLinks)
	h.handle("DELETE /v1/portal/sessions/{id}", admin, h.revokePortalLink)
}

// handlerFunc is a route: it returns the error to answer with, or nil once
// it has written its response.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (h *handler) handle(pattern string, who reach, fn handlerFunc) {
	h.patterns = append(h.patterns, pattern)
	traced := strings.Contains(pattern, " /v1/")
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if traced {
			var end func()
			w, r, end = h.traceRequest(w, r, pattern)
			defer end()
		}
		if who != public {
			var err error
			if r, err = h.authorize(w, r, who); err != nil {
				h.fail(w, r, err)
				return
			}
		}
		if err := fn(w, r); err != nil {
			h.fail(w, r, err)
		}
	})
}

// ServeHTTP sets the headers every response carries, recovers from panics
// with a JSON 500, in insecure dev mode refuses what did not come from
// this machine (package devmode), and turns the mux's own plain-text 404
// and 405 answers into the API's error shape.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	// Responses can carry a signing secret shown once; nothing may cache them.
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	if h.insecure {
		hdr.Set(HeaderAuth, "disabled")
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.log.Error("panic while serving a request", "method", r.Method, "path", r.URL.Path, "panic", v)
			writeError(w, errInternal())
		}
	}()
	if h.insecure {
		// Without a token, only this machine may call: see devmode.
		ref := devmode.Check(r)
		if ref == nil {
			ref = devmode.CheckJSONWrite(r)
		}
		if ref != nil {
			h.fail(w, r, devmodeRefusal(ref))
			return
		}
	}
	if _, pattern := h.mux.Handler(r); pattern == "" {
		h.unrouted(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// devmodeRefusal is ref in the API's words. devmode names its refusals
// with API codes but keeps no list of them; one that is not apiwire's, or
// comes with another status, is a bug here and answered as one, so that no
// client meets a code the document does not list.
func devmodeRefusal(ref *devmode.Refusal) *apiError {
	code := apiwire.Code(ref.Code)
	if code.Status() != ref.Status {
		e := errInternal()
		e.cause = fmt.Errorf("devmode refused with %d %q, which is not an API code with that status: %w", ref.Status, ref.Code, ref)
		return e
	}
	return &apiError{Code: code, Message: ref.Message}
}

// unrouted answers a request no pattern matched. The mux knows whether that
// is a 404, a 405 (and the Allow header), or a redirect to a cleaned path;
// its answer is captured and, for 404 and 405, rewritten as JSON.
func (h *handler) unrouted(w http.ResponseWriter, r *http.Request) {
	c := &captureWriter{header: http.Header{}}
	h.mux.ServeHTTP(c, r)
	switch c.status {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", c.header.Get("Allow"))
		writeError(w, &apiError{Code: apiwire.CodeMethodNotAllowed,
			Message: fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, c.header.Get("Allow"))})
	case http.StatusNotFound, 0:
		writeError(w, &apiError{Code: apiwire.CodeNotFound,
			Message: fmt.Sprintf("no route %s %s; the API lives under /v1 (see docs/api.md)", r.Method, r.URL.Path)})
	default:
		for k, v := range c.header {
			w.Header()[k] = v
		}
		w.WriteHeader(c.status)
		_, _ = w.Write(c.body)
	}
}

// captureWriter records what the mux would have answered.
type captureWriter struct {
	header http.Header
	status int
	body   []byte
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.body = append(c.body, b...)
	return len(b), nil
}
