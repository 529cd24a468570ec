package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/hymical/hymical/sdk/transport/transportpb"
)

// The environment a host sets for a plugin's own tracing. They are the
// standard OpenTelemetry variables, so a plugin behaves as any other
// OpenTelemetry program would; every other OTEL_* variable the host passes
// (headers, certificates, batching) is read by the exporters themselves.
const (
	// EnvTracesExporter is otlp, console (JSON lines on the plugin's
	// standard error, which the host logs) or none (the default).
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	// EnvTracesProtocol is grpc or http/protobuf, for otlp.
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	// EnvTracesEndpoint is the OTLP collector's URL.
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	// EnvTracesInsecure is true for OTLP without TLS.
	EnvTracesInsecure = "OTEL_EXPORTER_OTLP_TRACES_INSECURE"
	// EnvServiceName names the plugin's service.
	EnvServiceName = "OTEL_SERVICE_NAME"
	// EnvResourceAttributes are key=value pairs added to its resource.
	EnvResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES"
)

// The values of EnvTracesExporter and EnvTracesProtocol.
const (
	TracesExporterOTLP    = "otlp"
	TracesExporterConsole = "console"
	TracesExporterNone    = "none"
	TracesProtocolGRPC    = "grpc"
	TracesProtocolHTTP    = "http/protobuf"
)

// flushTimeout bounds sending the last spans when the plugin stops: the
// host kills a plugin that has not exited two seconds after it asked.
const flushTimeout = time.Second

// TraceDialOption is the gRPC option a host adds to its connections to
// plugins (HostDialOptions includes it). Every unary call (Configure,
// Validate, and Send under protocol 1) gets a client span from tp (nil
// means none), and the trace context of the call's context goes to the
// plugin in the call's metadata as W3C traceparent, where Serve picks it
// up: the plugin's spans, and whatever it sends onwards, join the caller's
// trace. go-plugin's own streams on the same connection get no spans, and
// neither does SendStream itself: each send on it is traced by the
// client's WithTracerProvider, its trace context in the request.
func TraceDialOption(tp trace.TracerProvider) grpc.DialOption {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
		otelgrpc.WithFilter(transportCall),
	))
}

// flowWindow is the HTTP/2 flow-control window, per stream and per
// connection, on both sides of a plugin connection. Setting it turns off
// gRPC's bandwidth estimation, which otherwise sends a ping for nearly
// every message received while it tries to size the window: on a stream
// that carries one small message per send, that doubled the frames on the
// wire. A fixed window is right for a connection over the loopback: its
// bandwidth-delay product is tiny, and 4 MiB keeps a large body, or many
// sends at once, from waiting on window updates.
const flowWindow = 4 << 20

// HostDialOptions are the gRPC options a host adds to its connections to
// plugins: TraceDialOption(tp), and the flow-control window Serve uses on
// the plugin's side.
func HostDialOptions(tp trace.TracerProvider) []grpc.DialOption {
	return []grpc.DialOption{
		TraceDialOption(tp),
		grpc.WithInitialWindowSize(flowWindow),
		grpc.WithInitialConnWindowSize(flowWindow),
	}
}

// serverOptions are the plugin side's gRPC options: tracing from tp and
// the flow-control window.
func serverOptions(tp trace.TracerProvider) []grpc.ServerOption {
	return []grpc.ServerOption{
		traceServerOption(tp),
		grpc.InitialWindowSize(flowWindow),
		grpc.InitialConnWindowSize(flowWindow),
	}
}

// traceServerOption is the plugin side of TraceDialOption: it reads the
// caller's trace context from each call and gives the call a server span
// from tp, so the implementation's ctx carries it. With a no-op tp the
// caller's span context still reaches the implementation.
func traceServerOption(tp trace.TracerProvider) grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
		otelgrpc.WithFilter(transportCall),
	))
}

// transportCall picks the unary calls of the Transport service out of
// everything go-plugin carries on the connection (stdio, broker,
// controller). SendStream is left out: it lives as long as the plugin, and
// each send on it gets its own spans from the stream's code instead.
func transportCall(info *stats.RPCTagInfo) bool {
	return strings.HasPrefix(info.FullMethodName, "/"+transportpb.Transport_ServiceDesc.ServiceName+"/") &&
		info.FullMethodName != transportpb.Transport_SendStream_FullMethodName
}

// pluginTracing builds the plugin process's TracerProvider from the
// environment the host set (getenv looks a variable up). With no exporter
// set it returns a no-op provider and no shutdown. console spans go to
// console, one JSON object a line after ConsoleSpanPrefix.
func pluginTracing(ctx context.Context, getenv func(string) string, console io.Writer) (trace.TracerProvider, func(context.Context) error, error) {
	noop := tracenoop.NewTracerProvider()
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch kind := strings.ToLower(strings.TrimSpace(getenv(EnvTracesExporter))); kind {
	case "", TracesExporterNone:
		return noop, nil, nil
	case TracesExporterConsole:
		exp, err = stdouttrace.New(stdouttrace.WithWriter(spanLines{console}))
	case TracesExporterOTLP:
		protocol := strings.TrimSpace(getenv(EnvTracesProtocol))
		if protocol == "" {
			protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
		}
		switch protocol {
		case TracesProtocolGRPC:
			exp, err = otlptracegrpc.New(ctx)
		case "", TracesProtocolHTTP:
			exp, err = otlptracehttp.New(ctx)
		default:
			return noop, nil, fmt.Errorf("%s=%q is not %s or %s", EnvTracesProtocol, protocol, TracesProtocolGRPC, TracesProtocolHTTP)
		}
	default:
		return noop, nil, fmt.Errorf("%s=%q is not %s, %s or %s", EnvTracesExporter, kind, TracesExporterOTLP, TracesExporterConsole, TracesExporterNone)
	}
	if err != nil {
		return noop, nil, fmt.Errorf("setting up the span exporter: %w", err)
	}
	own, err := resource.New(ctx,
		resource.WithProcessPID(),
		resource.WithAttributes(attribute.String("service.version", buildVersion())),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return noop, nil, fmt.Errorf("building the resource: %w", err)
	}
	res, err := resource.Merge(resource.Default(), own)
	if err != nil {
		res = own
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// buildVersion is the plugin binary's module version, for service.version.
func buildVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

// stderr writes to whatever os.Stderr is at the time of the write: Serve
// points it at the stream the host logs only once serving has started.
type stderr struct{}

func (stderr) Write(p []byte) (int, error) { return os.Stderr.Write(p) }

// ConsoleSpanPrefix starts each line a plugin writes for a span with the
// console exporter. The host reads the plugin's standard error: a line with
// this prefix is a span, which the host writes, as JSON, where its own
// spans go, rather than into its log as text.
const ConsoleSpanPrefix = "hymical-span: "

// spanLines prefixes each span the console exporter writes (one JSON
// object and a newline per Write) with ConsoleSpanPrefix.
type spanLines struct{ w io.Writer }

func (s spanLines) Write(p []byte) (int, error) {
	line := make([]byte, 0, len(ConsoleSpanPrefix)+len(p))
	line = append(append(line, ConsoleSpanPrefix...), p...)
	if _, err := s.w.Write(line); err != nil {
		return 0, err
	}
	return len(p), nil
}
