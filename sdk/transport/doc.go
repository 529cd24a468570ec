// Package transport is what a transport plugin for the Hymical delivery
// server is written against, and what the server's plugin host speaks.
//
// It owns the plugin contract: the Transport interface a plugin implements,
// the Message, Endpoint and Outcome it exchanges, the handshake and plugin
// name both sides must agree on, the gRPC shims that carry calls across the
// process boundary, and Serve for a plugin's main. A plugin needs this
// package and nothing else of Hymical's; sdk/netguard (where a plugin may
// connect) and sdk/redact (what it may show) are there for one that wants
// the server's own rules.
//
// A plugin performs the send of a message the server has already signed and
// reports only its outcome. It never sees the database, a signing secret or
// delivery state, and this package must not import anything that could give
// it them: nothing from the server's server/ or storage/ trees.
//
// # A minimal plugin
//
// A plugin is an executable whose main calls Serve:
//
//	package main
//
//	import (
//		"context"
//		"errors"
//
//		"github.com/hymical/hymical/sdk/transport"
//	)
//
//	type queue struct{}
//
//	func (queue) Configure(ctx context.Context, s transport.Settings) error { return nil }
//
//	func (queue) Validate(ctx context.Context, e transport.Endpoint) error {
//		if e.Config["topic"] == "" {
//			return errors.New(`set "topic" in the endpoint's config`)
//		}
//		return nil
//	}
//
//	func (queue) Send(ctx context.Context, m transport.Message) transport.Outcome {
//		if err := publish(ctx, m.Endpoint.Config["topic"], m.Headers, m.Body); err != nil {
//			return transport.Retryable(0, "publishing: "+err.Error())
//		}
//		return transport.Delivered(0)
//	}
//
//	func main() { transport.Serve(queue{}) }
//
// Build it as hymical-plugin-<name> (lower-case letters, digits, '-' and
// '_') into the server's plugin directory; endpoints then name <name> as
// their transport. examples/custom-transport in the repository is a
// complete plugin with a test that runs it under the real host.
//
// # The three calls
//
// Configure receives the plugin-wide settings from the operator's config.
// The host calls it once after every launch, before anything else,
// including after every restart, so a plugin keeps no state it cannot
// rebuild from the settings. Returning an error stops the host from using
// the plugin; say which setting is wrong and what it should be.
//
// Validate checks one endpoint's configuration when the endpoint is
// created, so an endpoint the plugin could never send to is refused then
// rather than failing at its first send. The error is shown to whoever
// created the endpoint: say what to change. Send must still cope with any
// configuration, because an endpoint may predate the plugin's current rules.
//
// Send performs one attempt and reports its Outcome. After Configure, the
// host calls Validate and Send from many goroutines at once over one
// connection, so they must be safe for concurrent use. Serve runs the
// sends concurrently, up to MaxConcurrentSends at once on each stream (a
// host keeps one per plugin process), so a slow receiver holds up only its
// own sends; a plugin needs no worker pool or queue of its own.
//
// # Outcomes and retries
//
// What a plugin returns is all it can say about the delivery; the server
// decides what happens next, under its claim on the delivery:
//
//   - OutcomeDelivered ends the delivery: it is marked delivered and never
//     sent again, unless an operator replays it. Return it only when the
//     receiver has taken the message.
//   - OutcomeRetryable spends one attempt of the delivery's retry allowance
//     (5 by default) and schedules the next on the server's retry schedule
//     (about 30 s, 2 min, 10 min, 1 h, with jitter). Outcome.RetryAfter,
//     when the receiver gave one, is honoured as a floor on that wait,
//     capped by the server (1 h by default). When the allowance is spent,
//     the delivery fails. Use it for anything another try may fix:
//     timeouts, refused connections, overload, a 5xx-like answer.
//   - OutcomePermanent fails the delivery at once, without using up the
//     rest of the allowance. Use it only when no retry can succeed: the
//     receiver rejected the message itself, or the endpoint's config is
//     unusable.
//
// The attempt history holds one row per request that went out, so an
// outcome also says whether one did. Outcome.NoRequest (Refused and
// Deferred set it) says none went out: the plugin refused before sending
// anything toward the receiver, for a reason of its own. No attempt is
// recorded and no allowance spent; a permanent one fails the delivery at
// once with Error as the reason on the delivery, and a retryable one
// (Deferred) puts the delivery back, due again after a short wait, with
// the reason visible on it, for as long as the plugin keeps saying so. Set
// it only when sure: the http plugin sets it when its own address guard
// refuses the target before connecting, and when the endpoint's URL is
// unusable. A connection attempt that failed, a name that did not resolve,
// a broker that is down are attempts (Retryable, NoRequest false): the
// retry allowance is what bounds an unreachable receiver, and a send that
// may have gone out must be counted. Leaving it false is always safe. A
// plugin built against an SDK from before the field never sets it, and is
// read the same way.
//
// A kind the host does not know is taken as retryable, never as delivered:
// losing a message is worse than sending it twice. Outcome.Error goes into
// the attempt history, cut to MaxErrorBytes; it must never contain the
// message's headers (they carry the signature), its body or anything the
// receiver sent back. ScrubError replaces any header value or body an
// error quoted, and bounds the text. StatusCode is the receiver's protocol status when
// there is one (an HTTP status for the http plugin), 0 otherwise.
//
// Delivery is at least once: the same message (the same DeliveryID, a new
// Attempt) can reach Send again after a delivered outcome was lost, for
// example when a server process died before recording it. A plugin does not
// dedupe; receivers do, on the submission id in the body.
//
// # Deadlines
//
// Every Send has a deadline, in Message.Deadline and in ctx; they are the
// same instant. Return by then, reporting a timeout as a retryable outcome.
// The host waits a short grace past the deadline (2 s by default) and then
// counts the plugin as hung: the attempt is recorded as retryable, and the
// process is killed and replaced. Pass ctx to every blocking call, so that
// the host's cancellation reaches it. Configure and Validate get a context
// with a deadline too; honour it the same way.
//
// # Crashes and hangs
//
// A plugin that exits, panics, loses its connection or does not answer by
// the deadline plus the grace costs the attempt in flight a retryable
// outcome. The host kills the process (without a graceful shutdown), starts
// a new one, calls Configure on it with the same settings, and sends the
// next message to it. Other sends in flight to the killed process get
// retryable outcomes too. Nothing is lost: every such attempt is retried on
// the schedule. These count as attempts because the message may have gone
// out before the plugin died. A send the host could not hand to a plugin at
// all (the process could not be started again: its binary is gone, or does
// not match its pin), or whose stream to the plugin had broken before the
// send was queued, is not an attempt: the delivery waits, unspent, and is
// tried again after a short wait until the plugin runs again.
//
// # What a plugin sees
//
// A plugin gets the message (delivery id, attempt number, endpoint URL and
// config, the headers to carry, the exact signed body, the deadline) and
// its settings, and nothing else. It never sees a signing secret: the
// server signs, and hands over the headers that carry the signature. It
// never sees delivery state or the database, and nothing it returns can
// change a delivery except through the outcome it reports. It does not
// inherit the server's environment either, which holds database DSNs and
// other secrets: it gets only PATH, TMPDIR, TZ, SSL_CERT_FILE and
// SSL_CERT_DIR (when set) and go-plugin's own variables, so everything it
// needs must come from Configure or the endpoint's config. What it writes to
// standard error is logged by the host under the plugin's name; standard
// output is discarded. Serve points os.Stderr at that stream when it
// starts, so a logger must look up os.Stderr when it writes: one given the
// value of os.Stderr before Serve writes to the raw process stream, which
// the host logs only at debug level.
//
// # Trust: the handshake, the pin and the channel
//
// Handshake carries the protocol version and a magic cookie. The cookie is
// a UX guard, not security: it only lets a plugin run by hand say that it
// must be started by the server instead of waiting for a handshake nobody
// sends. Anyone can read it here.
//
// Trust in the binary comes from its SHA-256 pin. When the operator's
// config gives a plugin's sha256 (the 64 hex digits sha256sum prints, taken
// from a trusted source such as the build's release notes, never computed
// from the file about to run), the host hashes the file before every launch
// and refuses to run one that does not match. The connection between host
// and plugin is gRPC with mutual TLS (go-plugin's AutoMTLS), and only gRPC
// is accepted.
//
// ProtocolVersion and VersionedPlugins let the protocol evolve: a change
// that old plugins cannot ignore gets a new version, and hosts keep serving
// plugins built against an older SDK.
//
// # Protocol versions and the wire
//
// Nothing here needs a plugin's code to change: Serve speaks every version
// and go-plugin agrees the newest one both sides know when the host starts
// the plugin. What crosses the wire is proto/transport.proto in this
// package, the gRPC service hymical.transport.v1.Transport.
//
// Protocol 1 sends every attempt as its own unary Send call; the call's
// deadline is the attempt's plus the host's grace, and the trace context is
// in the call's metadata.
//
// Protocol 2, the current one, carries every attempt of a host on
// SendStream, a long-lived bidirectional stream the host opens once per
// plugin process (and again if it breaks). A unary call per message cost
// more CPU than many sends themselves: a new HTTP/2 stream, headers and
// trailers both ways, and per-call instrumentation. On the stream an
// attempt is one message each way. Each request carries an id the host
// chose; the plugin runs the attempts concurrently and answers each with
// its id, in whatever order they finish. The attempt's deadline is in the
// request (the plugin's context ends at it), and so is its W3C trace
// context (SendRequest's traceparent and tracestate). When the host stops
// waiting for an attempt (its caller gave up, or the deadline plus the
// grace passed) it sends a cancel for that id, which cancels the send's
// context. When the stream ends every send still running on it is
// canceled, and the host counts every attempt that was waiting on it as
// failed at once, retryable, as it does for a crashed plugin. Configure and
// Validate stay unary calls.
//
// A host built against an older SDK speaks protocol 1 to a current plugin,
// and a current host speaks protocol 1 to a plugin built against an older
// SDK: both keep working, at the older protocol's cost. A plugin not
// written with this package must serve Send; it may serve SendStream and
// offer protocol 2 in the handshake, following the rules above.
//
// # Context and tracing
//
// Every call takes a context, and the shims carry it across the boundary:
// the host's deadline and cancellation reach the plugin's context, and so
// does the trace context of the attempt (W3C traceparent: in the request
// of a send on the stream, in the gRPC metadata of a unary call, for which
// the host dials with HostDialOptions). Serve gives each send, and each
// call, a server span of the plugin's own, named as the host's client span
// (hymical.transport.v1.Transport/Send for a send), a child of it, so the
// ctx a Send gets carries the attempt's trace.
//
// Serve sets the plugin's tracing up from the standard OpenTelemetry
// variables the host passes it (EnvTracesExporter and the rest: the host
// hands over the same exporter, collector and resource attributes it uses,
// with the service name SERVICE-plugin-NAME). With none set the plugin
// exports nothing, and the trace context still goes through. To make spans
// of its own, a plugin takes the tracer from the context, so it needs no
// set-up and no globals:
//
//	tracer := trace.SpanFromContext(ctx).TracerProvider().Tracer("my-plugin")
//	ctx, span := tracer.Start(ctx, "publish", trace.WithSpanKind(trace.SpanKindProducer))
//	defer span.End()
//
// and a plugin that sends onwards propagates it the same way, e.g. with
// propagation.TraceContext{}.Inject into its message's headers, as the http
// plugin does into its request. A plugin that publishes to a broker can
// call StartPublish, which starts the producer span and returns the
// traceparent (and tracestate) to put in the message, as the nats and
// redis plugins do. A span must never carry the message's
// headers (they hold the signature), its body, or a secret from the
// settings or the endpoint's config.
package transport
