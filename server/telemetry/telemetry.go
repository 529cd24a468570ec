package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hymical/hymical/sdk/transport"
)

// Exporter is where spans go.
type Exporter string

const (
	// ExporterNone: no tracing at all, at no cost (the default).
	ExporterNone Exporter = "none"
	// ExporterOTLPGRPC: OTLP over gRPC, to a collector or a backend.
	ExporterOTLPGRPC Exporter = "otlp-grpc"
	// ExporterOTLPHTTP: OTLP over HTTP with protobuf bodies.
	ExporterOTLPHTTP Exporter = "otlp-http"
	// ExporterStdout: one JSON object a line on the server's standard
	// output, for debugging.
	ExporterStdout Exporter = "stdout"
)

// Exporters lists every exporter, for messages.
func Exporters() []Exporter {
	return []Exporter{ExporterNone, ExporterOTLPGRPC, ExporterOTLPHTTP, ExporterStdout}
}

// Valid reports whether e is one of Exporters.
func (e Exporter) Valid() bool { return slices.Contains(Exporters(), e) }

// OTLP reports whether e sends OTLP to an endpoint.
func (e Exporter) OTLP() bool { return e == ExporterOTLPGRPC || e == ExporterOTLPHTTP }

// DefaultServiceName is service.name when none is configured.
const DefaultServiceName = "hymical"

// Config says what to set up. The zero value turns everything off.
type Config struct {
	// Exporter is where spans go; empty means ExporterNone.
	Exporter Exporter
	// Endpoint is the OTLP collector: host:port, or an http:// or https://
	// URL. Empty leaves it to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT, and then to the exporter's default
	// (localhost:4317 for gRPC, localhost:4318 for HTTP). For otlp-http, a
	// URL with no path is sent to /v1/traces; one with a path is used as it
	// is. See EndpointURL.
	Endpoint string
	// Insecure sends OTLP without TLS. An http:// Endpoint is plaintext
	// anyway.
	Insecure bool
	// ServiceName is service.name; empty means DefaultServiceName.
	ServiceName string
	// ServiceVersion is service.version, e.g. the build.
	ServiceVersion string
	// InstanceID is service.instance.id; empty means a random one, so two
	// processes of one service can be told apart.
	InstanceID string
	// ResourceAttributes are added to the resource, after the service's
	// own and before OTEL_RESOURCE_ATTRIBUTES, which wins.
	ResourceAttributes map[string]string
	// Metrics turns on the MeterProvider and the Prometheus exposition.
	Metrics bool
	// Stdout receives ExporterStdout's spans; nil means os.Stdout.
	Stdout io.Writer
	// Environ is the process environment, as os.Environ returns it. The
	// exporters and the resource read the standard OTEL_* variables from
	// the process itself; the ones in Environ are what PluginEnv passes on
	// to the plugins, whose environment is otherwise scrubbed.
	Environ []string
}

// Telemetry holds the providers New built. Hand TracerProvider and
// MeterProvider to what is to be instrumented, serve MetricsHandler, and
// call Shutdown before the process exits so buffered spans are sent.
type Telemetry struct {
	tracing  bool
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	handler  http.Handler
	pluginEV map[string]string // the plugins' environment, less the service name
	service  string
	spanOut  io.Writer // where ExporterStdout writes spans; nil for other exporters

	shutdownOnce sync.Once
	shutdownErr  error
	shutdowns    []func(context.Context) error
}

// Disabled is telemetry that is all off: no-op providers, no /metrics.
func Disabled() *Telemetry {
	return &Telemetry{tp: tracenoop.NewTracerProvider(), mp: metricnoop.NewMeterProvider(), service: DefaultServiceName}
}

// New builds the providers cfg asks for. With the exporter none and metrics
// off it returns Disabled(). Nothing connects here: an OTLP collector that
// is down costs dropped spans and a logged error later, not a failed start.
func New(ctx context.Context, cfg Config) (*Telemetry, error) {
	if cfg.Exporter == "" {
		cfg.Exporter = ExporterNone
	}
	if !cfg.Exporter.Valid() {
		return nil, fmt.Errorf("telemetry: exporter %q is not one of %s", cfg.Exporter, joinExporters())
	}
	if cfg.Exporter == ExporterNone && !cfg.Metrics {
		return Disabled(), nil
	}
	endpoint, err := EndpointURL(cfg.Exporter, cfg.Endpoint, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	t := Disabled()
	if v, ok := res.Set().Value("service.name"); ok {
		t.service = v.AsString()
	}

	if cfg.Exporter != ExporterNone {
		exp, err := newSpanExporter(ctx, cfg, endpoint)
		if err != nil {
			return nil, err
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.tracing, t.tp = true, tp
		t.shutdowns = append(t.shutdowns, tp.Shutdown)
		t.pluginEV = pluginEnv(cfg, endpoint)
		if cfg.Exporter == ExporterStdout {
			t.spanOut = cmpOrStdout(cfg.Stdout)
		}
	}
	if cfg.Metrics {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exp, err := otelprom.New(
			otelprom.WithRegisterer(reg),
			otelprom.WithoutScopeInfo(),
			otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		)
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: setting up the Prometheus exposition: %w", err)
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
		t.mp = mp
		t.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
		t.shutdowns = append(t.shutdowns, mp.Shutdown)
	}
	return t, nil
}

func joinExporters() string {
	var names []string
	for _, e := range Exporters() {
		names = append(names, string(e))
	}
	return strings.Join(names, ", ")
}

// TracerProvider makes the server's spans; a no-op one when tracing is off.
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tp }

// MeterProvider makes the server's instruments; a no-op one when metrics
// are off.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.mp }

// Tracing reports whether spans are exported.
func (t *Telemetry) Tracing() bool { return t.tracing }

// MetricsHandler serves the Prometheus exposition; nil when metrics are off.
func (t *Telemetry) MetricsHandler() http.Handler { return t.handler }

// ServiceName is the service.name the resource ended up with, after
// OTEL_SERVICE_NAME.
func (t *Telemetry) ServiceName() string { return t.service }

// PluginEnv is the environment that gives the named plugin's process the
// same tracing set-up: the standard OTEL_* variables that sdk/transport's
// Serve reads (exporter, protocol, endpoint, service name
// SERVICE-plugin-NAME, resource attributes), after every OTEL_* variable of
// Config.Environ (headers, certificates, batching, sampling), which the
// plugin needs to reach the same collector. It is nil when tracing is off:
// a plugin then exports nothing, and trace context still crosses to it.
func (t *Telemetry) PluginEnv(plugin string) []string {
	if !t.tracing {
		return nil
	}
	ev := maps.Clone(t.pluginEV)
	ev[transport.EnvServiceName] = t.service + "-plugin-" + plugin
	out := make([]string, 0, len(ev))
	for _, k := range slices.Sorted(maps.Keys(ev)) {
		out = append(out, k+"="+ev[k])
	}
	return out
}

// Shutdown flushes buffered spans and stops the providers. It is safe to
// call more than once; later calls return the first one's error.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdownOnce.Do(func() {
		var errs []error
		for _, f := range t.shutdowns {
			if err := f(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			t.shutdownErr = fmt.Errorf("telemetry: flushing on shutdown: %w", err)
		}
	})
	return t.shutdownErr
}

// EndpointURL turns a configured endpoint into the URL the exporter sends
// to: empty stays empty (the OTEL_* variables and the defaults decide),
// host:port gets https:// (http:// when insecure), and for otlp-http a URL
// without a path gets /v1/traces. It refuses anything else with a message
// that says what to write.
func EndpointURL(exp Exporter, endpoint string, insecure bool) (string, error) {
	endpoint = strings.TrimSpace(endpoint)
	if endpoint == "" || !exp.OTLP() {
		return "", nil
	}
	if strings.Contains(endpoint, "@") {
		// user:password@ in an endpoint must not reach a message or a log.
		return "", errors.New("the telemetry endpoint has a user name or password in it (it is not shown): remove it and send credentials with OTEL_EXPORTER_OTLP_HEADERS instead")
	}
	scheme := "https"
	if insecure {
		scheme = "http"
	}
	raw := endpoint
	if !strings.Contains(endpoint, "://") {
		host, port, err := net.SplitHostPort(endpoint)
		if err != nil || host == "" || port == "" {
			return "", fmt.Errorf("telemetry endpoint %q is neither host:port (e.g. otel-collector:4317) nor an http:// or https:// URL", endpoint)
		}
		raw = scheme + "://" + endpoint
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("telemetry endpoint %q does not parse as a URL: write host:port or http(s)://host:port", endpoint)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("telemetry endpoint %q has the scheme %q: use http:// or https://, or write host:port", endpoint, u.Scheme)
	case u.Hostname() == "":
		return "", fmt.Errorf("telemetry endpoint %q names no host", endpoint)
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("telemetry endpoint %q has a query or fragment, which OTLP does not use: remove it", endpoint)
	case insecure && u.Scheme == "https":
		return "", fmt.Errorf("telemetry endpoint %q is https:// but insecure (plaintext) is on: use an http:// URL, or turn insecure off", endpoint)
	}
	if exp == ExporterOTLPHTTP && (u.Path == "" || u.Path == "/") {
		u.Path = "/v1/traces"
	}
	if exp == ExporterOTLPGRPC {
		u.Path = "" // gRPC has no path; a stray one would only confuse
	}
	return u.String(), nil
}

func newSpanExporter(ctx context.Context, cfg Config, endpoint string) (sdktrace.SpanExporter, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch cfg.Exporter {
	case ExporterOTLPGRPC:
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		if cfg.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	case ExporterOTLPHTTP:
		var opts []otlptracehttp.Option
		if endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
		}
		if cfg.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	case ExporterStdout:
		exp, err = stdouttrace.New(stdouttrace.WithWriter(cmpOrStdout(cfg.Stdout)))
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: setting up the %s exporter: %w", cfg.Exporter, err)
	}
	return exp, nil
}

// newResource names the service: the SDK's own attributes, the host and
// process, service.name/version/instance.id, the configured attributes, and
// last OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, which win.
func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	name := cfg.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	instance := cfg.InstanceID
	if instance == "" {
		var b [16]byte
		_, _ = rand.Read(b[:]) // crypto/rand does not fail
		instance = hex.EncodeToString(b[:])
	}
	service := []attribute.KeyValue{
		attribute.String("service.name", name),
		attribute.String("service.instance.id", instance),
	}
	if cfg.ServiceVersion != "" {
		service = append(service, attribute.String("service.version", cfg.ServiceVersion))
	}
	var extra []attribute.KeyValue
	for _, k := range slices.Sorted(maps.Keys(cfg.ResourceAttributes)) {
		extra = append(extra, attribute.String(k, cfg.ResourceAttributes[k]))
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
		resource.WithProcessRuntimeName(),
		resource.WithProcessRuntimeVersion(),
		resource.WithAttributes(service...),
		resource.WithAttributes(extra...),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: building the resource (check OTEL_RESOURCE_ATTRIBUTES, which must be key=value pairs separated by commas): %w", err)
	}
	return res, nil
}

func cmpOrStdout(w io.Writer) io.Writer {
	if w == nil {
		return os.Stdout
	}
	return w
}

// SpanOutput is where the stdout exporter writes spans, for the plugin
// host to write the plugins' spans there too, so they reach the same
// output as the server's; nil when the exporter is another one.
func (t *Telemetry) SpanOutput() io.Writer { return t.spanOut }

// pluginEnv is the plugins' environment, less OTEL_SERVICE_NAME, which
// PluginEnv sets per plugin.
func pluginEnv(cfg Config, endpoint string) map[string]string {
	ev := map[string]string{}
	for _, kv := range cfg.Environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, "OTEL_") {
			ev[k] = v
		}
	}
	delete(ev, transport.EnvServiceName)
	switch cfg.Exporter {
	case ExporterOTLPGRPC, ExporterOTLPHTTP:
		ev[transport.EnvTracesExporter] = transport.TracesExporterOTLP
		ev[transport.EnvTracesProtocol] = transport.TracesProtocolGRPC
		if cfg.Exporter == ExporterOTLPHTTP {
			ev[transport.EnvTracesProtocol] = transport.TracesProtocolHTTP
		}
		if endpoint != "" {
			ev[transport.EnvTracesEndpoint] = endpoint
		}
		if cfg.Insecure {
			ev[transport.EnvTracesInsecure] = "true"
		}
	case ExporterStdout:
		// The plugin's stdout carries go-plugin's own traffic; its spans
		// go to its stderr, marked, and the host writes them where the
		// server's own spans go (Telemetry.SpanOutput).
		ev[transport.EnvTracesExporter] = transport.TracesExporterConsole
	}
	if len(cfg.ResourceAttributes) > 0 {
		var pairs []string
		for _, k := range slices.Sorted(maps.Keys(cfg.ResourceAttributes)) {
			pairs = append(pairs, k+"="+url.PathEscape(cfg.ResourceAttributes[k]))
		}
		// The process's own OTEL_RESOURCE_ATTRIBUTES comes last and wins,
		// as it does in the server.
		if own := ev[transport.EnvResourceAttributes]; own != "" {
			pairs = append(pairs, own)
		}
		ev[transport.EnvResourceAttributes] = strings.Join(pairs, ",")
	}
	return ev
}
