package pluginhost

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/telemetry"
)

func TestPluginsGetTheirTracingEnvironmentAndNothingMore(t *testing.T) {
	t.Parallel()
	cfg := misbehaveConfig(nil)
	var asked []string
	cfg.PluginEnv = func(name string) []string {
		asked = append(asked, name)
		return []string{"OTEL_TRACES_EXPORTER=none", "OTEL_SERVICE_NAME=hymical-plugin-" + name}
	}
	h, _ := newHost(t, cfg)
	out := h.Send(context.Background(), "misbehave", mode("env"), soon())
	if out.Kind != transport.OutcomeDelivered {
		t.Fatalf("outcome = %+v", out)
	}
	env := strings.Split(out.Error, "\n")
	for _, want := range []string{"OTEL_TRACES_EXPORTER=none", "OTEL_SERVICE_NAME=hymical-plugin-misbehave"} {
		if !contains(env, want) {
			t.Errorf("the plugin's environment lacks %s: %q", want, env)
		}
	}
	if strings.Contains(out.Error, envSecretKey) || strings.Contains(out.Error, "ENV-SECRET") {
		t.Errorf("the plugin's environment holds the server's %s", envSecretKey)
	}
	if len(asked) != 1 || asked[0] != "misbehave" {
		t.Errorf("PluginEnv was asked for %q, want the plugin's name once per launch", asked)
	}
}

func TestACrashIsAnEventOnTheCallersSpan(t *testing.T) {
	t.Parallel()
	// Under protocol 2 the host makes the call's span itself; under
	// protocol 1 the gRPC instrumentation does. They must look the same.
	for name, config := range map[string]func(map[string]string) Config{"protocol 2": misbehaveConfig, "protocol 1": v1Config} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testACrashIsAnEventOnTheCallersSpan(t, config(nil))
		})
	}
}

func testACrashIsAnEventOnTheCallersSpan(t *testing.T, cfg Config) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	cfg.TracerProvider = tp
	h, _ := newHost(t, cfg)
	ctx, attempt := tp.Tracer("test").Start(context.Background(), "attempt")
	out := h.Send(ctx, "misbehave", mode("exit"), soon())
	attempt.End()
	if out.Kind != transport.OutcomeRetryable {
		t.Fatalf("outcome = %+v, want retryable", out)
	}
	var got tracetest.SpanStub
	var call tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		switch s.Name {
		case "attempt":
			got = s
		case "hymical.transport.v1.Transport/Send":
			call = s
		}
	}
	restartedEvent := false
	for _, ev := range got.Events {
		if ev.Name == telemetry.EventPluginRestarted {
			for _, kv := range ev.Attributes {
				if kv.Key == telemetry.AttrPlugin && kv.Value.AsString() == "misbehave" {
					restartedEvent = true
				}
			}
		}
	}
	if !restartedEvent {
		t.Errorf("the caller's span has no %s event naming the plugin: %+v", telemetry.EventPluginRestarted, got.Events)
	}
	if call.SpanKind != trace.SpanKindClient || call.Parent.SpanID() != attempt.SpanContext().SpanID() || call.Status.Code != codes.Error {
		t.Errorf("the call's span %+v is not a failed client span under the caller's", call)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// With the console exporter a plugin's spans come to SpanOutput as JSON,
// one a line, where the server's own stdout spans go, and not into the log
// as escaped text.
func TestConsoleSpansReachTheSpanOutput(t *testing.T) {
	t.Parallel()
	cfg := misbehaveConfig(nil)
	cfg.PluginEnv = func(name string) []string {
		return []string{"OTEL_TRACES_EXPORTER=console", "OTEL_BSP_SCHEDULE_DELAY=20", "OTEL_SERVICE_NAME=hymical-plugin-" + name}
	}
	var spans syncbuf.Buffer
	cfg.SpanOutput = &spans
	h, logs := newHost(t, cfg)
	tp := sdktrace.NewTracerProvider()
	ctx, attempt := tp.Tracer("test").Start(context.Background(), "attempt")
	out := h.Send(ctx, "misbehave", mode("ok"), soon())
	attempt.End()
	if out.Kind != transport.OutcomeDelivered {
		t.Fatalf("outcome = %+v", out)
	}
	var got map[string]any
	for deadline := time.Now().Add(10 * time.Second); got == nil; {
		for line := range strings.Lines(spans.String()) {
			var span map[string]any
			if err := json.Unmarshal([]byte(line), &span); err != nil {
				t.Fatalf("a span line is not JSON: %v: %q", err, line)
			}
			if sc, _ := span["SpanContext"].(map[string]any); sc["TraceID"] == attempt.SpanContext().TraceID().String() {
				got = span
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span of the attempt's trace reached the span output:\n%s\nlog:\n%s", spans.String(), logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(logs.String(), transport.ConsoleSpanPrefix) || strings.Contains(logs.String(), `\"SpanContext\"`) {
		t.Errorf("a span went to the log:\n%s", logs.String())
	}
}
