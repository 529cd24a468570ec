package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

// maxUnsentDelay caps how long a delivery released without a request waits
// before it is due again, whatever its retry schedule says, so that it goes
// soon after its plugin is back.
const maxUnsentDelay = time.Minute

// unsentKind is why a claim ended without a request. It decides what
// becomes of the delivery (see unsent); label maps it to the value the
// metrics and spans show, which nothing branches on.
type unsentKind int

// The zero unsentKind is none of these, so a kind left unset is not taken
// for one.
const (
	// unsentUnavailable: the transport could not send for now (its plugin
	// is not running, or said not now).
	unsentUnavailable unsentKind = iota + 1
	// unsentRefused: the transport is unknown, or refused the target before
	// sending.
	unsentRefused
	// unsentUnsignable: the message could not be signed (no active secret).
	unsentUnsignable
)

// passing reports whether the cause may pass by itself, so that the claim
// is given back rather than the delivery failed.
func (k unsentKind) passing() bool { return k == unsentUnavailable }

// label is the kind as the metrics and spans name it: one of the
// telemetry.Unsent* values.
func (k unsentKind) label() string {
	switch k {
	case unsentUnavailable:
		return telemetry.UnsentUnavailable
	case unsentRefused:
		return telemetry.UnsentRefused
	case unsentUnsignable:
		return telemetry.UnsentUnsignable
	}
	return "unknown"
}

// unsentOf reports whether a transport's outcome is a send that made no
// request and, if so, its kind: the transport classifies a refusal it
// expects to pass as retryable, a lasting one as permanent. A delivered
// outcome, or one of a kind no transport should report, is recorded as an
// attempt whatever NoRequest says (see finish).
func unsentOf(o transport.Outcome) (unsentKind, bool) {
	if !o.NoRequest {
		return 0, false
	}
	switch o.Kind {
	case transport.OutcomeRetryable:
		return unsentUnavailable, true
	case transport.OutcomePermanent:
		return unsentRefused, true
	}
	return 0, false
}

// unsent ends a claim that made no request: no attempt is recorded and no
// allowance spent, since an attempt is a request that went out. The reason
// is kept on the delivery. A passing cause (kind.passing: the plugin is
// not running, or said not now) gives the claim back, due again
// after the first step of the delivery's retry schedule (the plugin's
// retryAfter as a floor), at most maxUnsentDelay, however often it
// happens: the delivery did nothing wrong, so its schedule does not
// advance. A lasting one (the transport is unknown or refused the target,
// the message cannot be signed) fails the delivery, for an operator to fix
// and replay. A superseded worker's write changes nothing, and there is no
// request to record late.
func (p *Pool) unsent(ctx context.Context, log deliveryLog, c storage.Claim, transportName string, kind unsentKind, reason string, retryAfter time.Duration) {
	if strings.TrimSpace(reason) == "" {
		reason = fmt.Sprintf("transport %q made no request and gave no reason", transportName)
	}
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrUnsent.String(kind.label()))
		span.SetStatus(codes.Error, reason)
	}
	p.metrics.RecordUnsent(ctx, transportName, kind.label())
	if kind.passing() {
		schedule, _ := p.retryFor(c.Endpoint)
		delay := min(schedule.Delay(1, retryAfter), maxUnsentDelay)
		err := p.retryStore(ctx, c, func() error {
			_, err := p.store.DeliveryRelease(ctx, storage.DeliveryReleaseParams{
				DeliveryID: c.Delivery.ID, Token: c.Token, Delay: delay, Reason: reason})
			return err
		})
		switch {
		case err == nil:
			log.Info("no request was made; the claim is given back unspent", "reason", reason, "retry_in", delay)
		case !errors.Is(err, storage.ErrClaimLost):
			log.Error("giving back a claim that made no request failed; it is retried when its lease expires", "reason", reason, "error", err)
			span.RecordError(err)
		}
		return
	}
	err := p.retryStore(ctx, c, func() error {
		_, err := p.store.DeliveryFail(ctx, storage.DeliveryFailParams{DeliveryID: c.Delivery.ID, Token: c.Token, Reason: reason})
		return err
	})
	switch {
	case err == nil:
		log.Warn("no request could be made; the delivery failed without an attempt: fix this and replay it", "reason", reason)
	case !errors.Is(err, storage.ErrClaimLost):
		log.Error("failing a delivery that could make no request failed; it is retried when its lease expires", "reason", reason, "error", err)
		span.RecordError(err)
	}
}

// finish records the attempt under the claim token, or as a late attempt
// when the claim was superseded while the request was out. ctx carries the
// attempt's span, which finish completes from what was recorded.
func (p *Pool) finish(ctx context.Context, log deliveryLog, c storage.Claim, transportName string, o transport.Outcome, start, end time.Time, done chan<- completion) {
	span := trace.SpanFromContext(ctx)
	kind := storage.OutcomeKind(o.Kind)
	if !kind.Valid() {
		kind = storage.OutcomeRetryable
		o.Error = fmt.Sprintf("transport reported an unknown outcome %q", o.Kind)
	}
	status := o.StatusCode
	if status < 100 || status > 599 {
		status = 0
	}
	// With a Disabler (endpoints.disable_on_gone), 410 Gone says the
	// endpoint is gone, not that this message was wrong: the owner's
	// attempt is recorded retryable, then the endpoint is disabled and
	// the delivery kept, held, for when an operator enables it again.
	// Without one, a 410 is recorded as the transport classified it.
	reported, reportedError := kind, o.Error
	gone := status == http.StatusGone && kind != storage.OutcomeDelivered && p.cfg.Disabler != nil
	if gone {
		kind = storage.OutcomeRetryable
		o.Error = "the receiver answered 410 Gone: the endpoint is disabled and its deliveries kept until it is enabled again"
	}
	schedule, allowance := p.retryFor(c.Endpoint)
	traceID := telemetry.SampledTraceID(ctx)
	params := storage.DeliveryCompleteParams{
		DeliveryID:       c.Delivery.ID,
		Token:            c.Token,
		Outcome:          kind,
		HTTPStatus:       status,
		Error:            o.Error,
		StartedAt:        start,
		FinishedAt:       end,
		TraceID:          traceID,
		RetryDelay:       schedule.Delay(c.Delivery.CycleAttempts+1, o.RetryAfter),
		MaxCycleAttempts: allowance,
	}
	outcomeSpan(span, kind, status, o.Error)
	late := false
	defer func() { p.metrics.RecordAttempt(ctx, transportName, string(kind), late, end.Sub(start)) }()

	// One budget for recording this attempt, owner's write and late one
	// together, independent of the lease (see recordRetryFor).
	recordBy := p.now().Add(recordRetryFor)
	err := p.retryUntil(ctx, recordBy, func() error {
		d, a, err := complete(done, params)
		if err == nil {
			// A delivered attempt is the common case and the metrics and
			// the attempt history count it: at info it was one line per
			// delivery, most of the log. A failure, and the state it
			// leaves the delivery in, stays at info.
			level := slog.LevelInfo
			if a.Outcome == storage.OutcomeDelivered {
				level = slog.LevelDebug
			}
			log.log(level, "attempt recorded", []any{"attempt", a.Number, "outcome", a.Outcome, "http_status", a.HTTPStatus, "state", d.State})
		}
		if err == nil && span.IsRecording() {
			span.SetAttributes(telemetry.AttrAttemptNumber.Int(a.Number), telemetry.AttrLate.Bool(false),
				telemetry.AttrDeliveryState.String(string(d.State)))
		}
		return err
	})
	if !errors.Is(err, storage.ErrClaimLost) {
		if err != nil {
			log.Error("recording the attempt failed; the request it made is missing from the history, and once the lease expires the delivery is sent again", "error", err)
			span.RecordError(err)
			return
		}
		if gone {
			p.endpointGone(ctx, log, c.Endpoint.ID)
		}
		return
	}
	late = true
	// A late attempt changes nothing but the history: it is recorded as
	// the transport reported it, and its 410 disables nothing, since only
	// the current owner's outcome may act on the endpoint.
	kind, o.Error = reported, reportedError
	outcomeSpan(span, kind, status, o.Error)
	if span.IsRecording() {
		span.AddEvent(telemetry.EventClaimLost)
		span.SetAttributes(telemetry.AttrLate.Bool(true))
	}
	lateParams := storage.AttemptRecordLateParams{
		DeliveryID: c.Delivery.ID, Token: c.Token, Outcome: kind, HTTPStatus: status,
		Error: o.Error, StartedAt: start, FinishedAt: end, TraceID: traceID,
	}
	err = p.retryUntil(ctx, recordBy, func() error {
		a, err := p.store.AttemptRecordLate(ctx, lateParams)
		if err == nil {
			log.Warn("claim was superseded while the request was out; recorded as a late attempt", "attempt", a.Number, "outcome", a.Outcome)
		}
		if err == nil && span.IsRecording() {
			span.SetAttributes(telemetry.AttrAttemptNumber.Int(a.Number))
		}
		return err
	})
	if err != nil {
		log.Error("recording the late attempt failed; the request it made is missing from the history", "error", err)
		span.RecordError(err)
	}
}

// endpointGone disables the endpoint after its receiver answered 410 Gone
// to the claim's owner, once the owner's attempt is recorded: finish never
// calls it for a superseded worker. Several sends may see the 410; the
// disabler writes only once.
func (p *Pool) endpointGone(ctx context.Context, log deliveryLog, endpointID string) {
	if err := p.cfg.Disabler.DisableEndpoint(ctx, endpointID, storage.DisabledGone); err != nil {
		log.Error("the receiver answered 410 Gone but disabling the endpoint failed; the delivery will be retried", "error", err)
	}
}

func (p *Pool) release(ctx context.Context, log deliveryLog, c storage.Claim, delay time.Duration) {
	err := p.retryStore(ctx, c, func() error {
		_, err := p.store.DeliveryRelease(ctx, storage.DeliveryReleaseParams{DeliveryID: c.Delivery.ID, Token: c.Token, Delay: delay})
		return err
	})
	if err != nil && !errors.Is(err, storage.ErrClaimLost) {
		log.Error("giving the claim back failed; it is retried when its lease expires", "error", err)
	}
}

// recordRetryFor bounds how long recording one attempt is retried after a
// write failed for a passing reason (a dropped connection, a database
// restarting or failing over). The request went out, so the history must
// have it, and the claim's lease is no bound here: a superseded worker's
// lease has usually run out already by the time it learns it is late, and
// an owner whose lease runs out while it retries still records, as owner
// if nobody took the delivery over meanwhile and as a late attempt if
// somebody did (the fence decides). Two minutes rides out a PostgreSQL
// restart or failover. On shutdown Run's recording context ends retrying
// sooner, one lease after the shutdown began, so a database that stopped
// answering does not keep the process from exiting.
const recordRetryFor = 2 * time.Minute

// retryStore retries a store write that failed for a reason other than the
// state machine's answer (a dropped connection, a restarting database) until
// the claim's lease would have expired anyway.
func (p *Pool) retryStore(ctx context.Context, c storage.Claim, write func() error) error {
	until := p.now().Add(p.cfg.Lease)
	if c.Delivery.ClaimExpiresAt != nil {
		until = *c.Delivery.ClaimExpiresAt
	}
	return p.retryUntil(ctx, until, write)
}

// retryUntil retries write, backing off from 100 ms to 2 s, until it
// succeeds, fails with the state machine's answer, would retry past until,
// or ctx ends.
func (p *Pool) retryUntil(ctx context.Context, until time.Time, write func() error) error {
	wait := 100 * time.Millisecond
	for {
		err := write()
		if err == nil || errors.Is(err, storage.ErrClaimLost) || errors.Is(err, storage.ErrNotFound) ||
			errors.Is(err, storage.ErrInvalid) || errors.Is(err, storage.ErrClaimHeld) || !p.now().Add(wait).Before(until) {
			return err
		}
		if !sleep(ctx, wait) {
			return err
		}
		wait = min(wait*2, 2*time.Second)
	}
}
