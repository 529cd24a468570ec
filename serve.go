package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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

	"github.com/hymical/hymical/internal/redact"
	"github.com/hymical/hymical/server"
	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/console"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// runServe runs the server until ctx ends: the HTTP API, the worker pool,
// the plugins and the worker registry heartbeat, on one store.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	generated := false
	cfg, warnings, err := config.Load(config.LoadOptions{
		Environ: os.Environ(),
		Args:    args,
		Program: "hymical serve",
		Output:  stdout,
		GenerateAdminToken: func() (string, error) {
			generated = true
			return randomToken()
		},
	})
	if err != nil {
		return err
	}
	log := cfg.Log.NewLogger(stderr)
	for _, w := range warnings {
		log.Warn(w)
	}
	dbURL := cfg.Database.URL.Reveal()
	shownURL := redact.URL(dbURL)

	store, err := server.OpenStore(ctx, dbURL)
	if err != nil {
		return err
	}
	defer store.Close()
	// The embedded SQLite default needs no set-up step: a single node
	// migrates its own file. PostgreSQL, shared by many processes, is
	// migrated deliberately with `hymical migrate` after the old build stops.
	if strings.HasPrefix(dbURL, "sqlite:") {
		if err := server.CheckNoOtherBuilds(ctx, store, time.Now()); err != nil {
			return err
		}
		res, err := store.Migrate(ctx, storage.MigrateParams{})
		if err != nil {
			return fmt.Errorf("migrate %s: %w", shownURL, err)
		}
		if len(res.Applied) > 0 {
			log.Info("migrated the database", "database", shownURL, "from", res.From, "to", res.To, "applied", strings.Join(res.Applied, ", "))
		}
	}
	schema, err := server.CheckSchema(ctx, store)
	if err != nil {
		return err
	}

	tel, err := startTelemetry(ctx, cfg, stdout, log)
	if err != nil {
		return err
	}
	// Deferred before the plugins' Close, so it runs after it: the last
	// spans of the shutdown are flushed too.
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(flushCtx); err != nil {
			log.Warn("telemetry did not flush on shutdown", "error", err)
		}
	}()

	hostCfg := cfg.PluginHost()
	hostCfg.TracerProvider, hostCfg.PluginEnv = tel.TracerProvider(), tel.PluginEnv
	host, err := pluginhost.New(ctx, hostCfg, log)
	if err != nil {
		return err
	}
	defer host.Close()
	metrics, err := observe(tel, store, host)
	if err != nil {
		return err
	}

	handler, err := api.New(api.Options{
		Store:               store,
		Transports:          host,
		AdminToken:          cfg.Server.AdminToken.Reveal(),
		IngestKeys:          revealAll(cfg.Server.IngestKeys),
		Insecure:            cfg.Server.InsecureDevMode,
		MaxBodyBytes:        cfg.Server.MaxBodyBytes,
		SecretRotationGrace: cfg.Server.SecretRotationGrace,
		RetryBounds:         cfg.Worker().EndpointRetry,
		Logger:              log.With("component", "api"),
		TracerProvider:      tel.TracerProvider(),
		Metrics:             tel.MetricsHandler(),
		MetricsPublic:       cfg.Telemetry.MetricsPublic,
	})
	if err != nil {
		return err
	}
	handler, err = withConsole(handler, cfg, store, log)
	if err != nil {
		return err
	}
	health := &server.EndpointHealth{
		Store:               store,
		DisableAfterFailing: cfg.Endpoints.DisableAfterFailing,
		Interval:            cfg.Endpoints.HealthInterval,
		OperatorEndpoint:    cfg.Endpoints.OperatorEndpoint,
		Disabled:            metrics.RecordEndpointDisabled,
		Log:                 log.With("component", "endpoint-health"),
	}
	if err := checkOperatorEndpoint(ctx, store, cfg.Endpoints.OperatorEndpoint); err != nil {
		return err
	}
	workerCfg := cfg.Worker()
	workerCfg.TracerProvider, workerCfg.Metrics, workerCfg.Disabler = tel.TracerProvider(), metrics, health
	pool, err := worker.New(store, host, workerCfg, log.With("component", "worker"))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("server.listen %s: %w", cfg.Server.Listen, err)
	}

	fmt.Fprintf(stdout, "hymical %s listening on http://%s\n  database %s (schema version %d)\n  transports %s from %s\n",
		server.Build(), ln.Addr(), shownURL, schema, strings.Join(host.Names(), ", "), cfg.Plugins.Dir)
	if tel.Tracing() || tel.MetricsHandler() != nil {
		fmt.Fprintf(stdout, "  telemetry: traces %s, metrics %s\n", cfg.Telemetry.Exporter, metricsShown(cfg.Telemetry))
	}
	if cfg.Console.Enabled {
		fmt.Fprintf(stdout, "  console http://%s%s/ (log in with the admin token)\n", ln.Addr(), console.Prefix)
	}
	if cfg.Server.InsecureDevMode {
		fmt.Fprintln(stdout, "  INSECURE DEV MODE: the API needs no token; anyone who can reach it can change endpoints and replay deliveries")
	} else if generated {
		fmt.Fprintf(stdout, "  admin token for this run (shown once; set FORMS_SERVER_ADMIN_TOKEN to choose one): %s\n", cfg.Server.AdminToken.Reveal())
	}

	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("HTTP API: %w", err)
			stop()
		}
	})
	wg.Go(func() {
		if err := pool.Run(runCtx); err != nil {
			errs <- fmt.Errorf("worker pool: %w", err)
			stop()
		}
	})
	wg.Go(func() { server.RunHeartbeat(runCtx, store, server.NewWorker(schema, time.Now()), log) })
	wg.Go(func() { health.Run(runCtx) })
	wg.Go(func() {
		server.RunRetention(runCtx, store, cfg.Retention.DeliveredMaxAge, cfg.Retention.Interval, log.With("component", "retention"))
	})

	<-runCtx.Done()
	log.Info("shutting down: no new claims; in-flight sends finish within their deadline")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("HTTP API did not shut down cleanly", "error", err)
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

// checkOperatorEndpoint refuses to start with an operator endpoint that
// does not exist, rather than finding out when the first endpoint is
// disabled and nobody is told.
func checkOperatorEndpoint(ctx context.Context, store storage.Store, id string) error {
	if id == "" {
		return nil
	}
	if _, err := store.EndpointGet(ctx, id); err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("endpoints.operator_endpoint %s does not exist in this database: create the endpoint first (POST /v1/endpoints) and give its id, or leave endpoints.operator_endpoint empty", id)
		}
		return fmt.Errorf("endpoints.operator_endpoint %s: %w", id, err)
	}
	return nil
}

// withConsole mounts the operator console at /console/ beside the API, on
// the same listener, when the config turns it on.
func withConsole(apiHandler http.Handler, cfg config.Config, store storage.Store, log *slog.Logger) (http.Handler, error) {
	if !cfg.Console.Enabled {
		return apiHandler, nil
	}
	// Load has checked the template; this only converts it.
	traceURL, err := telemetry.ParseTraceURLTemplate(cfg.Console.TraceURLTemplate)
	if err != nil {
		return nil, fmt.Errorf("console.trace_url_template: %w", err)
	}
	opts := console.Options{
		Store:               store,
		Insecure:            cfg.Server.InsecureDevMode,
		TraceURL:            traceURL,
		SecretRotationGrace: cfg.Server.SecretRotationGrace,
		SessionTTL:          cfg.Console.SessionTTL,
		Logger:              log,
	}
	if tok := cfg.Server.AdminToken.Reveal(); tok != "" {
		opts.AdminTokenDigest = sha256.Sum256([]byte(tok))
	}
	ch, err := console.New(opts)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	// The mux itself sends /console on to /console/.
	mux.Handle(console.Prefix+"/", ch)
	mux.Handle("/", apiHandler)
	return mux, nil
}

// startTelemetry sets up tracing and metrics as the config says. This is
// the one place the OpenTelemetry globals are touched: export errors (a
// collector that is down) have no per-provider handler, so the global one
// is pointed at the server's log rather than the standard library's.
func startTelemetry(ctx context.Context, cfg config.Config, stdout io.Writer, log *slog.Logger) (*telemetry.Telemetry, error) {
	settings := cfg.Telemetry.Settings()
	settings.ServiceVersion, settings.Stdout, settings.Environ = server.Build(), stdout, os.Environ()
	tel, err := telemetry.New(ctx, settings)
	if err != nil {
		return nil, err
	}
	if tel.Tracing() {
		tlog := log.With("component", "telemetry")
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			tlog.Warn("exporting telemetry failed", "error", err)
		}))
	}
	return tel, nil
}

// observe creates the worker's instruments and registers the gauges read
// from the database and the plugin host on every scrape.
func observe(tel *telemetry.Telemetry, store storage.Store, host *pluginhost.Host) (*telemetry.Metrics, error) {
	mp := tel.MeterProvider()
	metrics, err := telemetry.NewMetrics(mp)
	if err != nil {
		return nil, err
	}
	_, err = telemetry.ObserveDeliveries(mp, func(ctx context.Context) (telemetry.DeliveryGauges, error) {
		st, err := store.DeliveryStats(ctx, time.Time{})
		if err != nil {
			return telemetry.DeliveryGauges{}, err
		}
		byState := make(map[string]int64, len(st.ByState))
		for s, n := range st.ByState {
			byState[string(s)] = n
		}
		return telemetry.DeliveryGauges{ByState: byState, Due: st.Due, Held: st.Held}, nil
	})
	if err != nil {
		return nil, err
	}
	_, err = telemetry.ObserveDisabledEndpoints(mp, func(ctx context.Context) (map[string]int64, error) {
		endpoints, err := store.EndpointList(ctx)
		if err != nil {
			return nil, err
		}
		byReason := map[string]int64{}
		for _, e := range endpoints {
			if e.DisabledAt != nil {
				byReason[e.DisabledReason]++
			}
		}
		return byReason, nil
	})
	if err != nil {
		return nil, err
	}
	_, err = telemetry.ObservePluginRestarts(mp, func() map[string]int {
		out := map[string]int{}
		for _, p := range host.Plugins() {
			out[p.Name] = p.Restarts
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

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

func revealAll(keys []config.Secret) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.Reveal()
	}
	return out
}

// randomToken makes an admin token for a server started without one.
func randomToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
