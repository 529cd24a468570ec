// Package server assembles a running Hymical delivery server from its
// configuration, in one place: the store (opened, migrated when it is the
// embedded SQLite default, its schema checked against this build), the
// telemetry, the transport plugins, the HTTP API and the console, the
// worker pool, and the fleet jobs (heartbeat, endpoint health, retention).
// New builds all of it; Run serves until its context ends and then stops
// everything in order, in bounded time.
//
// It owns the wiring and the shutdown order, nothing else: the state
// machine is storage's, the delivery loop the worker's, and every job has
// a package of its own. `hymical serve` and `hymical demo` both run this
// Server, so the demo exercises what production runs.
package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/hymical/hymical/internal/buildinfo"
	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/authlimit"
	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/connlimit"
	"github.com/hymical/hymical/server/console"
	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/server/fleet"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// HTTPShutdownTimeout bounds how long Run waits for HTTP requests in
// progress when it stops; a request still running then is cut off.
const HTTPShutdownTimeout = 10 * time.Second

// telemetryFlushTimeout bounds the last export of spans and metrics.
const telemetryFlushTimeout = 5 * time.Second

// storeCloseTimeout bounds the wait for the store to close: PostgreSQL's
// pool says goodbye on every connection and waits for an answer (up to 15 s
// each in pgx), which a database that stopped answering never gives.
const storeCloseTimeout = 2 * time.Second

// Server is one running delivery server: everything New assembled, ready
// for Run.
type Server struct {
	cfg    config.Config
	log    *slog.Logger
	store  storage.Store
	schema int
	tel    *telemetry.Telemetry
	host   *pluginhost.Host
	pool   *worker.Pool
	health *fleet.EndpointHealth
	// storeHealth is whether the store has run out of space, shared by
	// the worker pool and the API.
	storeHealth *api.StoreHealth
	// heartbeat is how often the registry row is refreshed; 0 is
	// fleet.HeartbeatInterval. Only tests change it.
	heartbeat time.Duration
	http      *http.Server
	listener  net.Listener
	// cert is the TLS pair served, nil for plain HTTP.
	cert *certificate
	// maxConns and maxConnsPerAddr are the connection limits in force,
	// for the banner.
	maxConns, maxConnsPerAddr int
	fdLimit                   uint64
	// closers undo what New has done, in the order they were done; Run's
	// shutdown (or New on a failure) calls them in reverse.
	closers []func()

	// notDurable are the database settings under which an acknowledged
	// submission can be lost, for the banner.
	notDurable []database.DurabilityRisk
}

// New assembles a server from cfg, which Load or Validate has checked. It
// opens and, for SQLite, migrates the store, starts telemetry and the
// plugins, builds the API, the console and the worker pool, and binds
// server.listen, so every start-up error is New's and Run only serves.
// On an error, what New had started is stopped again.
func New(ctx context.Context, cfg config.Config, log *slog.Logger, opts ...Option) (s *Server, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s = &Server{cfg: cfg, log: log}
	// Not s, which every error return sets to nil before this runs.
	started := s
	defer func() {
		if err != nil {
			started.close()
		}
	}()
	if err := s.openStore(ctx); err != nil {
		return nil, err
	}
	if err := s.startTelemetry(ctx); err != nil {
		return nil, err
	}

	hostCfg := cfg.PluginHost()
	hostCfg.BuiltIn = o.builtIn
	hostCfg.TracerProvider, hostCfg.PluginEnv = s.tel.TracerProvider(), s.tel.PluginEnv
	hostCfg.SpanOutput = s.tel.SpanOutput()
	if s.host, err = pluginhost.New(ctx, hostCfg, log); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.host.Close)
	metrics, err := s.observe()
	if err != nil {
		return nil, err
	}

	if err := checkOperatorEndpoint(ctx, s.store, cfg.Endpoints.OperatorEndpoint); err != nil {
		return nil, err
	}
	s.health = &fleet.EndpointHealth{
		Store:               s.store,
		DisableAfterFailing: cfg.Endpoints.DisableAfterFailing,
		Interval:            cfg.Endpoints.HealthInterval,
		OperatorEndpoint:    cfg.Endpoints.OperatorEndpoint,
		Disabled:            metrics.RecordEndpointDisabled,
		Log:                 log.With("component", "endpoint-health"),
	}
	workerCfg := cfg.Worker()
	workerCfg.TracerProvider, workerCfg.Metrics = s.tel.TracerProvider(), metrics
	// The worker's writes and the API's share one view of whether the
	// store has run out of space, which /readyz reports.
	s.storeHealth = &api.StoreHealth{}
	workerCfg.StoreHealth = s.storeHealth
	if cfg.Endpoints.DisableOnGone {
		// Off, the worker records a 410 as its transport classified it.
		workerCfg.Disabler = s.health
	}
	if s.pool, err = worker.New(s.store, s.host, workerCfg, log.With("component", "worker")); err != nil {
		return nil, err
	}

	handler, err := s.handler()
	if err != nil {
		return nil, err
	}
	// Every phase of a connection is bounded, so nobody who can reach the
	// port holds connections (and their goroutines) open by sending
	// slowly or not at all.
	s.http = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		ReadTimeout:       cfg.Server.ReadTimeout,
		WriteTimeout:      cfg.Server.WriteTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if cfg.Server.TLSCertFile != "" || cfg.Server.TLSKeyFile != "" {
		if s.cert, err = newCertificate(cfg.Server.TLSCertFile, cfg.Server.TLSKeyFile); err != nil {
			return nil, err
		}
		s.http.TLSConfig = s.cert.tlsConfig()
		s.closers = append(s.closers, s.reloadOnHangup())
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return nil, fmt.Errorf("server.listen %s: %w", cfg.Server.Listen, err)
	}
	// ln, not s.listener: an error return below sets s to nil before
	// the closers run.
	s.closers = append(s.closers, func() { ln.Close() })
	if s.listener, err = s.limitConnections(ln); err != nil {
		return nil, err
	}
	// Load refuses a listen address that is not loopback in dev mode; this
	// checks where the socket is actually bound (a host name may resolve to
	// anything), and covers a Config built in code.
	if cfg.Server.InsecureDevMode {
		if a, ok := s.listener.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
			return nil, fmt.Errorf("server.insecure_dev_mode is true but server.listen %s is bound to %s, which other machines can reach, and dev mode lets anyone in without a token: listen on 127.0.0.1, [::1] or localhost, or turn server.insecure_dev_mode off and set FORMS_SERVER_ADMIN_TOKEN", cfg.Server.Listen, s.listener.Addr())
		}
	}
	return s, nil
}

// limitConnections bounds the connections ln hands the API, so a client
// that opens many and sends nothing cannot take the descriptors the
// database, the plugins and everyone else need (see server/connlimit).
func (s *Server) limitConnections(ln net.Listener) (net.Listener, error) {
	s.fdLimit = connlimit.FDLimit()
	var warnings []string
	s.maxConns, s.maxConnsPerAddr, warnings = connlimit.Limits(s.cfg.Server.MaxConnections, s.cfg.Server.MaxConnectionsPerAddress, s.fdLimit)
	for _, w := range warnings {
		s.log.Warn(w)
	}
	counters, err := telemetry.NewConnectionCounters(s.tel.MeterProvider(), []string{string(connlimit.LimitTotal), string(connlimit.LimitAddress)})
	if err != nil {
		return nil, err
	}
	limited := connlimit.New(ln, connlimit.Config{
		Max:           s.maxConns,
		MaxPerAddress: s.maxConnsPerAddr,
		Refused:       func(l connlimit.Limit) { counters.Refused(string(l)) },
		Evicted:       func(l connlimit.Limit) { counters.Evicted(string(l)) },
		Logger:        s.log.With("component", "connlimit"),
	})
	s.http.ConnState = limited.ConnState
	return limited, nil
}

// openStore opens the database with the key of its endpoint secrets,
// migrates it when it is SQLite, checks its schema is the one this build
// knows, then checks the key against the one the database records (and
// encrypts secrets still in plaintext; see database.PrepareSecrets).
func (s *Server) openStore(ctx context.Context) error {
	dbURL := s.cfg.Database.URL.Reveal()
	key, err := database.LoadSecretsKey(dbURL, database.SecretsConfig{
		Key: s.cfg.Secrets.Key.Reveal(), KeyFile: s.cfg.Secrets.KeyFile,
	}, true, s.log)
	if err != nil {
		return err
	}
	store, err := database.Open(ctx, dbURL, append(key.Options(), storage.WithLogger(s.log))...)
	if err != nil {
		return err
	}
	s.store = store
	s.closers = append(s.closers, func() { s.closeStore(store) })
	// The embedded SQLite default needs no set-up step: a single node
	// migrates its own file. PostgreSQL, shared by many processes, is
	// migrated deliberately with `hymical migrate` after the old build stops.
	if strings.HasPrefix(dbURL, "sqlite:") {
		if err := fleet.CheckNoOtherBuilds(ctx, store, time.Now()); err != nil {
			return err
		}
		res, err := store.Migrate(ctx, storage.MigrateParams{})
		if err != nil {
			return fmt.Errorf("migrate %s: %w", redact.URL(dbURL), err)
		}
		if len(res.Applied) > 0 {
			s.log.Info("migrated the database", "database", redact.URL(dbURL), "from", res.From, "to", res.To, "applied", strings.Join(res.Applied, ", "))
		}
	}
	if s.schema, err = database.CheckSchema(ctx, store); err != nil {
		return err
	}
	s.checkDurability(ctx)
	return database.PrepareSecrets(ctx, store, key, s.log)
}

// checkDurability warns, in the log and the banner, when the database is
// set so that a submission already answered 202 can be lost. It does not
// refuse to start: see database.CheckDurability.
func (s *Server) checkDurability(ctx context.Context) {
	risks, err := database.CheckDurability(ctx, s.store)
	if err != nil {
		s.log.Warn("could not check whether the database keeps what it acknowledges", "error", err)
		return
	}
	for _, r := range risks {
		s.log.Warn("NOT DURABLE: an accepted submission can be lost. "+r.Message(), "setting", r.Setting, "value", r.Value)
	}
	s.notDurable = risks
}

// startTelemetry sets up tracing and metrics as the config says. This is
// the one place the OpenTelemetry globals are touched: export errors (a
// collector that is down) have no per-provider handler, so the global one
// is pointed at the server's log rather than the standard library's.
func (s *Server) startTelemetry(ctx context.Context) error {
	settings := s.cfg.Telemetry.Settings()
	// The plugins get the OTEL_* variables of this process (PluginEnv).
	settings.ServiceVersion, settings.Environ = buildinfo.String(), os.Environ()
	tel, err := telemetry.New(ctx, settings)
	if err != nil {
		return err
	}
	s.tel = tel
	// Closed after the plugins (closers run in reverse), so the last spans
	// of the shutdown are flushed too.
	s.closers = append(s.closers, func() {
		flushCtx, cancel := context.WithTimeout(context.Background(), telemetryFlushTimeout)
		defer cancel()
		if err := tel.Shutdown(flushCtx); err != nil {
			s.log.Warn("telemetry did not flush on shutdown", "error", err)
		}
	})
	if tel.Tracing() {
		tlog := s.log.With("component", "telemetry")
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			tlog.Warn("exporting telemetry failed", "error", err)
		}))
	}
	return nil
}

// handler is the API, with the operator console mounted at /console/ on
// the same listener when the config turns it on.
func (s *Server) handler() (http.Handler, error) {
	cfg := s.cfg
	// One count of failed authentications for both faces, so a guesser
	// gains nothing by switching from the API to the console.
	limiter, err := authlimit.New(authlimit.Config{
		Failures: cfg.Server.AuthFailures,
		Window:   cfg.Server.AuthFailureWindow,
		Clients:  cfg.Server.AuthFailureClients,
		Logger:   s.log.With("component", "authlimit"),
		// The connection limits (limitConnections) still count the TCP
		// peer: they act when a connection is accepted, before any
		// header has been read.
		TrustedProxies: cfg.Server.TrustedProxies,
	})
	if err != nil {
		return nil, err
	}
	apiHandler, err := api.New(api.Options{
		Store:               s.store,
		Transports:          s.host,
		AdminToken:          cfg.Server.AdminToken.Reveal(),
		IngestKeys:          revealAll(cfg.Server.IngestKeys),
		Insecure:            cfg.Server.InsecureDevMode,
		AuthLimiter:         limiter,
		MaxBodyBytes:        cfg.Server.MaxBodyBytes,
		MaxNestingDepth:     cfg.Server.MaxNestingDepth,
		SecretRotationGrace: cfg.Server.SecretRotationGrace,
		RetryBounds:         cfg.Worker().EndpointRetry,
		Logger:              s.log,
		TracerProvider:      s.tel.TracerProvider(),
		Metrics:             s.tel.MetricsHandler(),
		MetricsPublic:       cfg.Telemetry.MetricsPublic,
		StoreHealth:         s.storeHealth,
		OperatorEndpoint:    cfg.Endpoints.OperatorEndpoint,
	})
	if err != nil {
		return nil, err
	}
	if !cfg.Console.Enabled && !cfg.Portal.Enabled {
		return apiHandler, nil
	}
	// Load has checked the template; this only converts it.
	traceURL, err := telemetry.ParseTraceURLTemplate(cfg.Console.TraceURLTemplate)
	if err != nil {
		return nil, fmt.Errorf("console.trace_url_template: %w", err)
	}
	mux := http.NewServeMux()
	if cfg.Portal.Enabled {
		// The console's pages for one scope of forms, with the same
		// limiter of failed authentications and the same rotation grace.
		portal, err := console.NewPortal(console.PortalOptions{
			Store:               s.store,
			Transports:          s.host,
			FrameAncestors:      cfg.Portal.FrameAncestors,
			BrandName:           cfg.Portal.BrandName,
			AccentColor:         cfg.Portal.AccentColor,
			AuthLimiter:         limiter,
			TraceURL:            traceURL,
			SecretRotationGrace: cfg.Server.SecretRotationGrace,
			Logger:              s.log,
			OperatorEndpoint:    cfg.Endpoints.OperatorEndpoint,
		})
		if err != nil {
			return nil, err
		}
		mux.Handle(console.PortalPrefix+"/", portal)
	}
	mux.Handle("/", apiHandler)
	if !cfg.Console.Enabled {
		return mux, nil
	}
	opts := console.Options{
		Store:               s.store,
		Transports:          s.host,
		Insecure:            cfg.Server.InsecureDevMode,
		RetryBounds:         cfg.Worker().EndpointRetry,
		AuthLimiter:         limiter,
		TraceURL:            traceURL,
		SecretRotationGrace: cfg.Server.SecretRotationGrace,
		SessionTTL:          cfg.Console.SessionTTL,
		Logger:              s.log,
		OperatorEndpoint:    cfg.Endpoints.OperatorEndpoint,
	}
	if tok := cfg.Server.AdminToken.Reveal(); tok != "" {
		opts.AdminTokenDigest = sha256.Sum256([]byte(tok))
	}
	consoleHandler, err := console.New(opts)
	if err != nil {
		return nil, err
	}
	// The mux itself sends /console on to /console/.
	mux.Handle(console.Prefix+"/", consoleHandler)
	return mux, nil
}

// Addr is where the API listens.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// Option changes what New assembles beyond its configuration.
type Option func(*options)

type options struct {
	builtIn pluginhost.BuiltIn
}

// WithBuiltInTransports has the plugin host run the transports the
// server's own executable serves (hymical plugin NAME) wherever no plugin
// executable of that name is installed. It is an option, not
// configuration: which transports an executable carries is a fact of the
// build, which only the command that is that build knows.
func WithBuiltInTransports(b pluginhost.BuiltIn) Option {
	return func(o *options) { o.builtIn = b }
}

// Describe writes what is running, for the start-up banner, in one write:
// where it listens, the database (its password masked) and schema, the
// transports, telemetry and the console.
func (s *Server) Describe(w io.Writer) {
	cfg := s.cfg
	// Built whole and written once, so that a reader of w (a log
	// collector, a test waiting for the banner) never sees half of it.
	var b strings.Builder
	fmt.Fprintf(&b, "hymical %s listening on %s://%s\n  database %s (schema version %d)\n  transports %s\n",
		buildinfo.String(), s.scheme(), s.Addr(), redact.URL(cfg.Database.URL.Reveal()), s.schema, DescribeTransports(s.host.Plugins()))
	fmt.Fprintf(&b, "  connections at most %d, %d per client address (open-file limit %s)\n", s.maxConns, s.maxConnsPerAddr, fdLimitShown(s.fdLimit))
	if s.tel.Tracing() || s.tel.MetricsHandler() != nil {
		fmt.Fprintf(&b, "  telemetry: traces %s, metrics %s\n", cfg.Telemetry.Exporter, metricsShown(cfg.Telemetry))
	}
	if cfg.Console.Enabled {
		fmt.Fprintf(&b, "  console %s://%s%s/ (log in with the admin token)\n", s.scheme(), s.Addr(), console.Prefix)
	}
	if cfg.Portal.Enabled {
		fmt.Fprintf(&b, "  portal %s://%s%s/ (opened with a link from POST /v1/portal/sessions)\n", s.scheme(), s.Addr(), console.PortalPrefix)
	}
	if len(s.notDurable) > 0 {
		settings := make([]string, len(s.notDurable))
		for i, r := range s.notDurable {
			settings[i] = r.Setting + "=" + r.Value
		}
		fmt.Fprintf(&b, "  NOT DURABLE: PostgreSQL runs with %s, so an accepted submission can be lost (the log says what and how to fix it)\n", strings.Join(settings, ", "))
	}
	if cfg.Server.InsecureDevMode {
		fmt.Fprintln(&b, "  INSECURE DEV MODE: the API needs no token; anyone who can reach it can change endpoints and replay deliveries")
	}
	io.WriteString(w, b.String())
}

// fdLimitShown is the open-file limit as the banner shows it.
func fdLimitShown(n uint64) string {
	if n == 0 {
		return "unknown"
	}
	return fmt.Sprint(n)
}

// Run serves the API and runs the worker pool and the fleet jobs until ctx
// ends or one of them fails, then shuts down in order: the listener stops
// taking requests and those in progress get HTTPShutdownTimeout; the pool
// claims nothing more, gives back what it had not started, and records
// what its in-flight sends produced for at most one lease (see worker.Run);
// the heartbeat deregisters this process; then the plugins stop (each is
// given two seconds to exit, then its process group is killed: at most
// pluginhost.KillBound, whatever its children do), telemetry flushes and
// the store closes. Every step is bounded, so a database that stops
// answering or a plugin that will not die cannot keep the process from
// exiting: the whole shutdown takes at most about the lease plus
// HTTPShutdownTimeout plus pluginhost.KillBound. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	defer s.close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg   sync.WaitGroup
		errs = make(chan error, 2)
	)
	wg.Go(func() {
		serve := func() error { return s.http.Serve(s.listener) }
		if s.cert != nil {
			// The pair comes from TLSConfig.GetCertificate; ServeTLS adds
			// HTTP/2 to what the listener offers.
			serve = func() error { return s.http.ServeTLS(s.listener, "", "") }
		}
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("HTTP API: %w", err)
			stop()
		}
	})
	wg.Go(func() {
		if err := s.pool.Run(runCtx); err != nil {
			errs <- fmt.Errorf("worker pool: %w", err)
			stop()
		}
	})
	wg.Go(func() {
		fleet.RunHeartbeat(runCtx, s.store, fleet.NewWorker(s.schema, time.Now()), s.heartbeat, s.log)
	})
	wg.Go(func() { s.health.Run(runCtx) })
	wg.Go(func() {
		fleet.RunRetention(runCtx, s.store, s.cfg.Retention.DeliveredMaxAge, s.cfg.Retention.Interval, s.log.With("component", "retention"))
	})

	<-runCtx.Done()
	s.log.Info("shutting down: no new claims; in-flight sends finish within their deadline")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), HTTPShutdownTimeout)
	defer cancel()
	if err := s.http.Shutdown(shutdownCtx); err != nil {
		s.log.Warn("HTTP API did not shut down cleanly", "error", err)
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// closeStore closes the store, waiting storeCloseTimeout at most: by then
// everything has been recorded or given up, and the process is exiting, so
// a close that has not finished is left to finish (or not) on its own.
func (s *Server) closeStore(store storage.Store) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		store.Close()
	}()
	select {
	case <-closed:
	case <-time.After(storeCloseTimeout):
		s.log.Warn("the database did not answer the closing of its connections; leaving them", "waited", storeCloseTimeout)
	}
}

// close undoes what New did, last first.
func (s *Server) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// checkOperatorEndpoint refuses to start with an operator endpoint that
// does not exist, rather than finding out when the first endpoint is
// disabled and nobody is told.
func checkOperatorEndpoint(ctx context.Context, store storage.Store, id string) error {
	if id == "" {
		return nil
	}
	e, err := store.EndpointGet(ctx, id)
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("endpoints.operator_endpoint %s does not exist in this database: create the endpoint first (POST /v1/endpoints) and give its id, or leave endpoints.operator_endpoint empty", id)
		}
		return fmt.Errorf("endpoints.operator_endpoint %s: %w", id, err)
	}
	if e.DeletedAt != nil {
		return fmt.Errorf("endpoints.operator_endpoint %s was deleted at %s: create another endpoint (POST /v1/endpoints) and give its id, or leave endpoints.operator_endpoint empty",
			id, e.DeletedAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// observe creates the worker's instruments and registers the gauges read
// from the database and the plugin host on every scrape.
func (s *Server) observe() (*telemetry.Metrics, error) {
	mp := s.tel.MeterProvider()
	metrics, err := telemetry.NewMetrics(mp)
	if err != nil {
		return nil, err
	}
	_, err = telemetry.ObserveDeliveries(mp, func(ctx context.Context) (telemetry.DeliveryGauges, error) {
		st, err := s.store.DeliveryStats(ctx, time.Time{})
		if err != nil {
			return telemetry.DeliveryGauges{}, err
		}
		byState := make(map[string]int64, len(st.ByState))
		for state, n := range st.ByState {
			byState[string(state)] = n
		}
		return telemetry.DeliveryGauges{ByState: byState, Due: st.Due, Held: st.Held, OldestDue: st.OldestDue}, nil
	})
	if err != nil {
		return nil, err
	}
	metrics.SeedSeries(context.Background(), s.host.Names(),
		[]string{string(storage.OutcomeDelivered), string(storage.OutcomeRetryable), string(storage.OutcomePermanent)},
		[]string{string(storage.DisabledGone), string(storage.DisabledFailing)})
	disableReasons := []string{string(storage.DisabledByOperator), string(storage.DisabledGone), string(storage.DisabledFailing)}
	_, err = telemetry.ObserveDisabledEndpoints(mp, disableReasons, func(ctx context.Context) (map[string]int64, error) {
		endpoints, err := s.store.EndpointList(ctx)
		if err != nil {
			return nil, err
		}
		byReason := map[string]int64{}
		for _, e := range endpoints {
			if e.DisabledAt != nil {
				byReason[string(e.DisabledReason)]++
			}
		}
		return byReason, nil
	})
	if err != nil {
		return nil, err
	}
	_, err = telemetry.ObservePluginRestarts(mp, func() map[string]int {
		out := map[string]int{}
		for _, p := range s.host.Plugins() {
			out[p.Name] = p.Restarts
		}
		return out
	})
	if err != nil {
		return nil, err
	}
	_, err = telemetry.ObservePluginsUp(mp, func() map[string]bool {
		out := map[string]bool{}
		for _, p := range s.host.Plugins() {
			out[p.Name] = p.Running
		}
		return out
	})
	return metrics, err
}

func metricsShown(t config.TelemetryConfig) string {
	switch {
	case !t.Metrics:
		return "off"
	case t.MetricsPublic:
		return "on /metrics (public)"
	}
	return "on /metrics (admin token)"
}

func revealAll(keys []config.Secret) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.Reveal()
	}
	return out
}

// DescribeTransports says which transports run and from where, in one
// line: the built-in ones together, then each other one with its file, so
// that an executable in plugins.dir overriding a built-in is plain to see.
func DescribeTransports(plugins []pluginhost.PluginInfo) string {
	var builtIn, parts []string
	exe := ""
	for _, p := range plugins {
		if p.BuiltIn {
			builtIn, exe = append(builtIn, p.Name), p.Path
			continue
		}
		parts = append(parts, fmt.Sprintf("%s from %s", p.Name, p.Path))
	}
	if len(builtIn) > 0 {
		parts = append([]string{fmt.Sprintf("%s built in (%s)", strings.Join(builtIn, ", "), exe)}, parts...)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
