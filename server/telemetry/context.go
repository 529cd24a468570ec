package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Propagator is the one way trace context is written and read across a
// boundary: W3C Trace Context (traceparent and tracestate). It is passed
// explicitly; the OpenTelemetry global propagator is never consulted.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// TraceParent is the W3C traceparent of the span in ctx, or "" when ctx
// carries no valid span context (tracing is off and the caller sent none).
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	Propagator().Inject(ctx, c)
	return c.Get("traceparent")
}

// SpanContextFromTraceParent reads a stored traceparent; the result is not
// valid when tp is empty or malformed.
func SpanContextFromTraceParent(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := Propagator().Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}

// SampledTraceID is the trace id to store with an attempt: the hex id of the
// span in ctx when that span is sampled, so it is in the tracing backend,
// and "" otherwise, so no attempt points at a trace nobody kept.
func SampledTraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return sc.TraceID().String()
}
