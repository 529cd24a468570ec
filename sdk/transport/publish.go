package transport

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// publishTracer names the spans StartPublish makes.
const publishTracer = "github.com/hymical/hymical/sdk/transport"

// StartPublish starts the producer span of one publish to a broker, a
// child of the Send's own span, and returns the W3C trace context the
// message must carry ("traceparent", and "tracestate" when there is one),
// so the consumer's spans join the attempt's trace as an HTTP receiver's
// do. system is the messaging system ("nats", "redis", "rabbitmq",
// "kafka", …) and destination the subject, stream, exchange or topic.
//
// With no trace context in ctx the map is empty: a message carries no
// trace context it was not given. The caller ends the span.
func StartPublish(ctx context.Context, system, destination string) (context.Context, trace.Span, map[string]string) {
	// The tracer comes from the Send's context: the provider Serve set
	// up, or a no-op one that still carries the host's trace context on.
	tracer := trace.SpanFromContext(ctx).TracerProvider().Tracer(publishTracer)
	ctx, span := tracer.Start(ctx, "publish "+destination, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", system),
			attribute.String("messaging.destination.name", destination),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.operation.name", "publish"),
		))
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return ctx, span, carrier
}
