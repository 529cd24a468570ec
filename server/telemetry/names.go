package telemetry

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of every span and instrument the
// server makes.
const ScopeName = "github.com/hymical/hymical/server"

// Span names. An API request's span is named by its route, as the HTTP
// semantic conventions say: "POST /v1/forms/{form_id}/submissions".
const (
	// SpanFanout is the write of a new event and its deliveries, one per
	// matching endpoint, in one transaction; a child of the ingest request.
	SpanFanout = "hymical.fanout"
	// SpanClaim is one claim statement that took at least one delivery (or
	// failed); polls that found nothing due make no span. It is the root of
	// a trace of its own; each attempt of the batch links to it.
	SpanClaim = "hymical.claim"
	// SpanAttempt is one request that went out for one delivery: a child of
	// the ingest request that created the event, so in the submitter's
	// trace, linked to its claim, and the parent of the plugin call. An
	// event made without trace context has its attempts under the claim.
	SpanAttempt = "hymical.attempt"
)

// Span attribute keys. None of them can hold a secret, a header or a body:
// ids, counts, names and outcomes only.
const (
	AttrDeliveryID    = attribute.Key("hymical.delivery.id")
	AttrDeliveryIDs   = attribute.Key("hymical.delivery.ids")
	AttrDeliveryState = attribute.Key("hymical.delivery.state")
	AttrEndpointID    = attribute.Key("hymical.endpoint.id")
	AttrEventID       = attribute.Key("hymical.event.id")
	AttrEventType     = attribute.Key("hymical.event.type")
	AttrFormID        = attribute.Key("hymical.form.id")
	AttrSubmissionID  = attribute.Key("hymical.submission.id")
	// AttrAttemptNumber is the lifetime attempt number, the one the
	// attempt history shows.
	AttrAttemptNumber = attribute.Key("hymical.attempt.number")
	// AttrCycleAttempt is which request of the current retry cycle this
	// was, counted against the retry allowance.
	AttrCycleAttempt = attribute.Key("hymical.attempt.cycle")
	AttrOutcome      = attribute.Key("hymical.attempt.outcome")
	// AttrLate marks an attempt whose claim was superseded while the
	// request was out: recorded, but it moved nothing.
	AttrLate = attribute.Key("hymical.attempt.late")
	// AttrUnsent marks a claim that ended without a request, so no attempt
	// was recorded: its value is the kind of reason (an Unsent* value).
	AttrUnsent    = attribute.Key("hymical.attempt.unsent")
	AttrTransport = attribute.Key("hymical.transport")
	// AttrClaimLimit and AttrClaimCount are how many deliveries a claim
	// asked for and how many it got.
	AttrClaimLimit = attribute.Key("hymical.claim.limit")
	AttrClaimCount = attribute.Key("hymical.claim.count")
	// AttrFanoutCount is how many deliveries an event fanned out to.
	AttrFanoutCount = attribute.Key("hymical.fanout.deliveries")
	// AttrIdempotentReplay is true on an ingest request that repeated an
	// Idempotency-Key and created nothing.
	AttrIdempotentReplay = attribute.Key("hymical.ingest.idempotent_replay")
	AttrPlugin           = attribute.Key("hymical.plugin")
	AttrReason           = attribute.Key("hymical.reason")

	// The HTTP semantic conventions' keys, for API request spans and the
	// receiver's status on an attempt.
	AttrHTTPMethod = attribute.Key("http.request.method")
	AttrHTTPRoute  = attribute.Key("http.route")
	AttrHTTPStatus = attribute.Key("http.response.status_code")
)

// Span event names.
const (
	// EventPluginRestarted is added to the attempt whose send found its
	// plugin crashed, hung or exited, and restarted it.
	EventPluginRestarted = "hymical.plugin.restarted"
	// EventClaimLost is added to an attempt whose claim had been taken
	// over by the time its outcome was recorded; it is then recorded late.
	EventClaimLost = "hymical.claim.lost"
)

// Link attribute: what a link from an attempt points at.
const (
	AttrLinkKind = attribute.Key("hymical.link")
	// LinkClaim is the value on the attempt's link to the claim that took
	// it, with the rest of its batch.
	LinkClaim = "claim"
)

// Metric names, as the OpenTelemetry API sees them. The Prometheus
// exposition writes dots as underscores, adds the unit ("_seconds") and,
// for counters, "_total": hymical.attempts is hymical_attempts_total.
const (
	// MetricDeliveries (gauge, by MetricAttrState) counts the deliveries in
	// the database in each state, read when /metrics is scraped. It is the
	// whole database's count, so every server process sharing it reports
	// the same numbers.
	MetricDeliveries = "hymical.deliveries"
	// MetricDeliveriesDue (gauge) is the queue depth: deliveries claimable
	// now (pending and due, or processing with an expired lease).
	MetricDeliveriesDue = "hymical.deliveries.due"
	// MetricAttempts (counter, by MetricAttrOutcome and MetricAttrTransport)
	// counts the attempts this process recorded, late ones included.
	MetricAttempts = "hymical.attempts"
	// MetricAttemptsLate (counter, by MetricAttrTransport) counts the
	// attempts recorded late, after their claim was superseded.
	MetricAttemptsLate = "hymical.attempts.late"
	// MetricSendDuration (histogram, seconds, by MetricAttrOutcome and
	// MetricAttrTransport) is how long one send through a plugin took.
	MetricSendDuration = "hymical.send.duration"
	// MetricClaimToSend (histogram, seconds, by MetricAttrTransport) is the
	// time from a delivery's claim to the start of its send.
	MetricClaimToSend = "hymical.claim_to_send.duration"
	// MetricPluginRestarts (counter, by MetricAttrPlugin) counts the
	// restarts of each transport plugin after it crashed, hung or exited.
	MetricPluginRestarts = "hymical.plugin.restarts"
	// MetricDeliveriesOldestDue (gauge, seconds) is how long the
	// longest-waiting claimable delivery has been due, 0 when none is: the
	// number to alert on when deliveries stop going out, since a deep
	// queue that drains keeps it small.
	MetricDeliveriesOldestDue = "hymical.deliveries.oldest_due"
	// MetricDeliveriesHeld (gauge) counts the pending deliveries that are
	// not claimable however due: their endpoint is disabled, or they wait
	// their turn at an ordered endpoint.
	MetricDeliveriesHeld = "hymical.deliveries.held"
	// MetricPluginUp (gauge, by MetricAttrPlugin) is 1 while a transport
	// plugin's process runs and 0 while it is down (crashed and not yet
	// restarted, or failing to start): its deliveries wait unsent.
	MetricPluginUp = "hymical.plugin.up"
	// MetricEndpointsDisabled (gauge, by MetricAttrReason) counts the
	// disabled endpoints, read when /metrics is scraped.
	MetricEndpointsDisabled = "hymical.endpoints.disabled"
	// MetricEndpointDisables (counter, by MetricAttrReason) counts the
	// endpoints this process disabled on its own: gone or failing.
	MetricEndpointDisables = "hymical.endpoint.disables"
	// MetricClaimsUnsent (counter, by MetricAttrTransport and
	// MetricAttrReason, an Unsent* value) counts the claims this process
	// ended without a request, which record no attempt.
	MetricClaimsUnsent = "hymical.claims.unsent"
	// MetricConnectionsRefused (counter, by MetricAttrLimit) counts the
	// API connections closed as soon as they were accepted, because a
	// connection limit was reached and every connection was busy.
	MetricConnectionsRefused = "hymical.connections.refused"
	// MetricConnectionsEvicted (counter, by MetricAttrLimit) counts the
	// waiting API connections (never sent a request, or idle between
	// requests) closed to make room for a new one.
	MetricConnectionsEvicted = "hymical.connections.evicted"
)

// The kinds of reason a claim ends without a request: the values of
// MetricAttrReason on MetricClaimsUnsent and of AttrUnsent.
const (
	// UnsentUnavailable: the transport could not send for now (its plugin
	// is not running, or said not now); the delivery was released, due
	// again after a short wait.
	UnsentUnavailable = "unavailable"
	// UnsentRefused: the transport is unknown, or refused the target
	// before sending; the delivery failed.
	UnsentRefused = "refused"
	// UnsentUnsignable: the message could not be signed (no active
	// secret); the delivery failed.
	UnsentUnsignable = "unsignable"
)

// Metric attribute keys: short, since they become Prometheus labels.
const (
	MetricAttrState     = attribute.Key("state")
	MetricAttrOutcome   = attribute.Key("outcome")
	MetricAttrTransport = attribute.Key("transport")
	MetricAttrPlugin    = attribute.Key("plugin")
	MetricAttrReason    = attribute.Key("reason")
	// MetricAttrLimit is the connection limit reached: "total"
	// (server.max_connections) or "address"
	// (server.max_connections_per_address).
	MetricAttrLimit = attribute.Key("limit")
)

// durationBuckets are the histogram bounds, in seconds, of the send and
// claim-to-send durations: from a fast local receiver to the longest
// deadline the default timeouts allow.
func durationBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60}
}
