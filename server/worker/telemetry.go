package worker

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

// claimSpan records one claim statement as a span, the root of the trace
// its attempts join, and returns ctx carrying it. A poll that found nothing
// due makes no span: the claim loop polls all day, and an empty poll tells
// nobody anything. The span is written after the fact, with the claim's own
// start and end, because only then is it known whether it is worth having.
func (p *Pool) claimSpan(ctx context.Context, limit int, claims []storage.Claim, err error, start, end time.Time) context.Context {
	if !p.traced || err == nil && len(claims) == 0 {
		return ctx
	}
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.Delivery.ID
	}
	ctx, span := p.tracer.Start(ctx, telemetry.SpanClaim, trace.WithNewRoot(), trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			telemetry.AttrClaimLimit.Int(limit),
			telemetry.AttrClaimCount.Int(len(claims)),
			telemetry.AttrDeliveryIDs.StringSlice(ids),
		))
	if err != nil && ctx.Err() == nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "claiming deliveries failed")
	}
	span.End(trace.WithTimestamp(end))
	return ctx
}

// startAttempt starts the span of one attempt: a child of the ingest
// request that created the event, so an attempt made hours later is in the
// submission's trace, and linked to the claim in ctx. An event made with no
// trace context (the server's own, or ingest with tracing off) has its
// attempts under the claim instead.
func (p *Pool) startAttempt(ctx context.Context, c storage.Claim, ep storage.Endpoint, start time.Time) (context.Context, trace.Span) {
	if !p.traced {
		return p.tracer.Start(ctx, telemetry.SpanAttempt)
	}
	attrs := []attribute.KeyValue{
		telemetry.AttrDeliveryID.String(c.Delivery.ID),
		telemetry.AttrEndpointID.String(c.Delivery.EndpointID),
		telemetry.AttrEventID.String(c.Event.ID),
		telemetry.AttrEventType.String(c.Event.Type),
		// Tentative: a late attempt's number is only known once recorded.
		telemetry.AttrAttemptNumber.Int(c.Delivery.Attempts + 1),
		telemetry.AttrCycleAttempt.Int(c.Delivery.CycleAttempts + 1),
		telemetry.AttrTransport.String(ep.Transport),
	}
	if c.Event.SubmissionID != "" {
		attrs = append(attrs, telemetry.AttrSubmissionID.String(c.Event.SubmissionID))
	}
	if c.Event.FormID != "" {
		attrs = append(attrs, telemetry.AttrFormID.String(c.Event.FormID))
	}
	opts := []trace.SpanStartOption{trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if ingest := telemetry.SpanContextFromTraceParent(c.Event.TraceParent); ingest.IsValid() {
		// The submitter's trace: the attempt, the plugin's spans and the
		// receiver's all join the trace of the request that created the
		// event, so following one submission is following one trace. The
		// claim that took it, with the others of its batch, is a link.
		if claim := trace.SpanContextFromContext(ctx); claim.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{
				SpanContext: claim,
				Attributes:  []attribute.KeyValue{telemetry.AttrLinkKind.String(telemetry.LinkClaim)},
			}))
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, ingest)
	}
	return p.tracer.Start(ctx, telemetry.SpanAttempt, opts...)
}

// deliveryLog logs about one delivery. It adds the delivery's ids to each
// line it writes, where Logger.With would format them for every delivery,
// logged or not.
type deliveryLog struct {
	l *slog.Logger
	c *storage.Claim
}

func (d deliveryLog) Info(msg string, args ...any)  { d.log(slog.LevelInfo, msg, args) }
func (d deliveryLog) Warn(msg string, args ...any)  { d.log(slog.LevelWarn, msg, args) }
func (d deliveryLog) Error(msg string, args ...any) { d.log(slog.LevelError, msg, args) }

func (d deliveryLog) log(level slog.Level, msg string, args []any) {
	ctx := context.Background()
	if !d.l.Enabled(ctx, level) {
		return
	}
	d.l.Log(ctx, level, msg, append([]any{"delivery_id", d.c.Delivery.ID, "endpoint_id", d.c.Delivery.EndpointID}, args...)...)
}

// outcomeSpan sets the attempt span's outcome attributes and status: only
// a delivered outcome is Ok.
func outcomeSpan(span trace.Span, kind storage.OutcomeKind, status int, reason string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(telemetry.AttrOutcome.String(string(kind)))
	if status != 0 {
		span.SetAttributes(telemetry.AttrHTTPStatus.Int(status))
	}
	if kind == storage.OutcomeDelivered {
		span.SetStatus(codes.Ok, "")
		return
	}
	span.SetStatus(codes.Error, reason)
}
