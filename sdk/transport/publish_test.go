package transport

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestStartPublish(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Run("a child of the Send's span, whose context the message carries", func(t *testing.T) {
		ctx, parent := tp.Tracer("test").Start(context.Background(), "plugin server span")
		_, span, headers := StartPublish(ctx, "nats", "forms.new")
		span.End()
		parent.End()
		got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(headers)))
		var publish tracetest.SpanStub
		for _, s := range spans.GetSpans() {
			if s.Name == "publish forms.new" {
				publish = s
			}
		}
		if publish.SpanKind != trace.SpanKindProducer || publish.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Fatalf("spans %+v: want a producer span, a child of the Send's", spans.GetSpans())
		}
		if got.TraceID() != parent.SpanContext().TraceID() || got.SpanID() != publish.SpanContext.SpanID() {
			t.Errorf("the message carries %v (%v), want the publish span %v", got, headers, publish.SpanContext)
		}
	})
	t.Run("tracing off in the plugin: the host's context goes on", func(t *testing.T) {
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
		})
		_, span, headers := StartPublish(trace.ContextWithRemoteSpanContext(context.Background(), sc), "redis", "forms")
		span.End()
		if headers["traceparent"] != "00-01020300000000000000000000000000-0405060000000000-01" {
			t.Errorf("traceparent %q, want the host's", headers["traceparent"])
		}
	})
	t.Run("no trace context, none carried", func(t *testing.T) {
		_, span, headers := StartPublish(context.Background(), "redis", "forms")
		span.End()
		if len(headers) != 0 {
			t.Errorf("headers %v, want none", headers)
		}
	})
}
