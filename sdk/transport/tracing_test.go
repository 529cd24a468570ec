package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"

	"github.com/hymical/hymical/sdk/transport/transportpb"
)

// spanSeer is a plugin that records the span its Send's context carries.
type spanSeer struct {
	mu        sync.Mutex
	sc        trace.SpanContext
	recording bool
}

func (*spanSeer) Configure(context.Context, Settings) error { return nil }
func (*spanSeer) Validate(context.Context, Endpoint) error  { return nil }
func (s *spanSeer) Send(ctx context.Context, _ Message) Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	span := trace.SpanFromContext(ctx)
	s.sc, s.recording = span.SpanContext(), span.IsRecording()
	return Delivered(200)
}

// connectTraced serves impl over real gRPC on loopback, with the plugin side's
// tracing on pluginTP as Serve sets it up, and dials it the way a host
// does, with hostTP, speaking protocol version v.
func connectTraced(t *testing.T, impl Transport, hostTP, pluginTP trace.TracerProvider, v int) *GRPCClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(traceServerOption(pluginTP))
	transportpb.RegisterTransportServer(srv, newGRPCServer(impl, pluginTP))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), TraceDialOption(hostTP))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return NewGRPCClient(conn, WithProtocol(v), WithTracerProvider(hostTP))
}

// Both protocols carry the trace: in the unary call's metadata, and in the
// stream's request message.
func TestTraceContextCrossesTheBoundary(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, testTraceContextCrossesTheBoundary)
}

func testTraceContextCrossesTheBoundary(t *testing.T, v int) {
	hostSpans, pluginSpans := tracetest.NewInMemoryExporter(), tracetest.NewInMemoryExporter()
	hostTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(hostSpans))
	pluginTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(pluginSpans))
	seer := &spanSeer{}
	client := connectTraced(t, seer, hostTP, pluginTP, v)

	ctx, attempt := hostTP.Tracer("test").Start(t.Context(), "attempt")
	if _, err := client.SendRPC(ctx, Message{DeliveryID: "dlv_1", Deadline: time.Now().Add(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	attempt.End()

	// Host: attempt → client span of the call.
	var clientSpan tracetest.SpanStub
	for _, s := range hostSpans.GetSpans() {
		if s.Name == "hymical.transport.v1.Transport/Send" {
			clientSpan = s
		}
	}
	if clientSpan.SpanKind != trace.SpanKindClient || clientSpan.Parent.SpanID() != attempt.SpanContext().SpanID() {
		t.Fatalf("host spans %v: want a client span for Send, a child of the attempt", names(hostSpans.GetSpans()))
	}
	// Plugin: a server span, child of the host's client span, in ctx. The
	// gRPC server ends it after the answer is on its way, so it may end
	// a moment after the call returned.
	ps := pluginSpans.GetSpans()
	for deadline := time.Now().Add(5 * time.Second); len(ps) == 0 && time.Now().Before(deadline); ps = pluginSpans.GetSpans() {
		time.Sleep(5 * time.Millisecond)
	}
	if len(ps) != 1 || ps[0].SpanKind != trace.SpanKindServer || ps[0].Parent.SpanID() != clientSpan.SpanContext.SpanID() ||
		ps[0].SpanContext.TraceID() != attempt.SpanContext().TraceID() || !ps[0].Parent.IsRemote() {
		t.Fatalf("plugin spans %+v: want one server span, the remote child of the host's client span", ps)
	}
	seer.mu.Lock()
	defer seer.mu.Unlock()
	if seer.sc.SpanID() != ps[0].SpanContext.SpanID() || !seer.recording {
		t.Errorf("Send's context carries %v, want the plugin's server span", seer.sc)
	}
}

func TestTraceContextCrossesWithoutPluginTracing(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, testTraceContextCrossesWithoutPluginTracing)
}

func testTraceContextCrossesWithoutPluginTracing(t *testing.T, v int) {
	hostSpans := tracetest.NewInMemoryExporter()
	hostTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(hostSpans))
	seer := &spanSeer{}
	client := connectTraced(t, seer, hostTP, tracenoop.NewTracerProvider(), v)
	ctx, attempt := hostTP.Tracer("test").Start(t.Context(), "attempt")
	if _, err := client.SendRPC(ctx, Message{DeliveryID: "dlv_1", Deadline: time.Now().Add(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	attempt.End()
	seer.mu.Lock()
	defer seer.mu.Unlock()
	// A plugin that exports nothing still hands the host's trace context
	// on, so what it sends joins the attempt's trace.
	if seer.sc.TraceID() != attempt.SpanContext().TraceID() || seer.recording {
		t.Errorf("Send's context carries %v (recording %v), want the host's trace, not recording", seer.sc, seer.recording)
	}
}

func TestOnlyTransportCallsAreTraced(t *testing.T) {
	t.Parallel()
	for method, want := range map[string]bool{
		transportpb.Transport_Send_FullMethodName:       true,
		transportpb.Transport_Validate_FullMethodName:   true,
		transportpb.Transport_Configure_FullMethodName:  true,
		transportpb.Transport_SendStream_FullMethodName: false,
		"/plugin.GRPCStdio/StreamStdio":                 false,
		"/plugin.GRPCBroker/StartStream":                false,
		"/plugin.GRPCController/Shutdown":               false,
	} {
		if got := transportCall(&stats.RPCTagInfo{FullMethodName: method}); got != want {
			t.Errorf("transportCall(%s) = %v, want %v", method, got, want)
		}
	}
}

func TestPluginTracingFromTheEnvironment(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	t.Run("nothing set is off, at no cost", func(t *testing.T) {
		t.Parallel()
		for _, vars := range []map[string]string{nil, {EnvTracesExporter: "none"}} {
			tp, shutdown, err := pluginTracing(t.Context(), env(vars), nil)
			if err != nil || shutdown != nil {
				t.Fatalf("pluginTracing(%v) = shutdown %v, %v", vars, shutdown != nil, err)
			}
			if _, span := tp.Tracer("t").Start(t.Context(), "s"); span.IsRecording() {
				t.Errorf("pluginTracing(%v) records spans", vars)
			}
		}
	})
	t.Run("console writes JSON spans with the service name", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		tp, shutdown, err := pluginTracing(t.Context(), env(map[string]string{EnvTracesExporter: "console"}), &out)
		if err != nil {
			t.Fatal(err)
		}
		_, span := tp.Tracer("t").Start(t.Context(), "plugin-span")
		span.End()
		if err := shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		// One line per span, marked for the host, which writes the JSON
		// where the server's own spans go.
		line, ok := bytes.CutPrefix(out.Bytes(), []byte(ConsoleSpanPrefix))
		var got struct{ Name string }
		if err := json.Unmarshal(line, &got); !ok || err != nil || got.Name != "plugin-span" {
			t.Fatalf("console output %q: %v", out.String(), err)
		}
	})
	t.Run("otlp builds an exporter for either protocol", func(t *testing.T) {
		t.Parallel()
		for _, protocol := range []string{TracesProtocolGRPC, TracesProtocolHTTP} {
			tp, shutdown, err := pluginTracing(t.Context(), env(map[string]string{EnvTracesExporter: "otlp", EnvTracesProtocol: protocol}), nil)
			if err != nil || shutdown == nil {
				t.Fatalf("%s: %v", protocol, err)
			}
			if _, span := tp.Tracer("t").Start(t.Context(), "s"); !span.IsRecording() {
				t.Errorf("%s: spans do not record", protocol)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			_ = shutdown(ctx) // nothing listens; only the set-up is under test
			cancel()
		}
	})
	t.Run("a wrong value is an error that names the variable", func(t *testing.T) {
		t.Parallel()
		for _, vars := range []map[string]string{
			{EnvTracesExporter: "zipkin"},
			{EnvTracesExporter: "otlp", EnvTracesProtocol: "http/json"},
		} {
			tp, _, err := pluginTracing(t.Context(), env(vars), nil)
			if err == nil || !strings.Contains(err.Error(), "OTEL_") || tp == nil {
				t.Errorf("pluginTracing(%v) = %v, want an error naming the variable and a no-op provider", vars, err)
			}
		}
	})
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
