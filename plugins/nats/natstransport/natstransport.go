// Package natstransport is the logic of the NATS JetStream transport plugin:
// it publishes a signed message to an endpoint's JetStream subject and
// classifies what came back. It speaks only the sdk/transport types and must
// not import anything from the server's server/ or storage/ trees.
//
// What it promises the server:
//   - the message's data is exactly the body it was handed, and its headers
//     are exactly the headers it was handed (webhook-id, webhook-timestamp,
//     webhook-signature, names kept as given) plus Nats-Msg-Id set to the
//     delivery id, so JetStream's duplicate window drops a repeat of a
//     delivery it already stored;
//   - delivered means JetStream acknowledged storing the message (a
//     duplicate ack counts: the stream has it);
//   - no ack by the deadline, no stream listening on the subject (no
//     responders), a connection that is down or reconnecting, and JetStream
//     errors a retry may fix are retryable; an invalid subject, a
//     permissions violation, a body over the server's max_payload or the
//     stream's max_msg_size are permanent;
//   - error text names the servers and what went wrong, never a header, the
//     body, or a password or token from a server URL;
//   - connections to servers whose addresses are not globally reachable
//     (the rule of sdk/netguard: loopback, private, link-local, …) are
//     refused, at Validate and on every dial after DNS resolution, unless
//     the plugin's allowed_networks setting contains the address;
//   - an outcome says no request went out (NoRequest) only when the plugin
//     refused before publishing anything: an endpoint config or a header
//     it cannot use, a server the guard refuses, or the plugin shutting
//     down. A connection that is
//     down is an attempt, retryable, so the retry allowance bounds it.
//
// One connection is kept per server list (in practice one per plugin
// process, the plugin's url setting) and reconnects on its own after a
// loss. While it is reconnecting, publishes fail at once as retryable
// instead of queueing in the client, so an attempt's outcome is known when
// Send returns.
package natstransport

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// ClientName is how the plugin's connections name themselves to the server,
// so an operator can find them in the server's monitoring.
const ClientName = "hymical-plugin-nats"

// Options are what the embedding program decides, as opposed to the
// operator's settings.
type Options struct {
	// Logger receives connection events (lost, reconnected); nil discards
	// them. Messages, headers and credentials are never logged.
	Logger *slog.Logger
	// Resolver resolves broker names for the SSRF guard's check before a
	// connection is made; nil means net.DefaultResolver. Tests set it to
	// make a name lead where they need it to.
	Resolver netguard.Resolver
}

// Transport is the NATS JetStream transport. It is safe for concurrent use.
type Transport struct {
	log      *slog.Logger
	resolver netguard.Resolver
	conns    *pluginkit.Conns[settings, *entry]
}

var _ transport.Transport = (*Transport)(nil)

// New returns a transport with the default settings. Until Configure gives
// it a url setting, only endpoints naming their own server can be sent to.
func New(opts Options) *Transport {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Transport{log: log, resolver: opts.Resolver, conns: pluginkit.NewConns[settings, *entry](defaultSettings(), errClosed)}
}

// Configure applies the plugin-wide settings; settings not given take their
// defaults. Connections made under earlier settings are closed, and new
// ones are made on the next send.
func (t *Transport) Configure(_ context.Context, s transport.Settings) error {
	next, err := parseSettings(s)
	if err != nil {
		return err
	}
	closeAll(t.conns.Configure(next))
	return nil
}

// Close closes every connection. Sends after Close are retryable.
func (t *Transport) Close() {
	closeAll(t.conns.Close())
}

// Validate checks an endpoint's config without connecting: an endpoint is
// refused for what no retry could fix (no subject, an invalid subject, no
// server or an unreadable server URL, a server the SSRF guard refuses),
// not because the server is down right now. Server names are resolved to
// check where they lead; one that does not resolve now is accepted, and
// checked again when dialled.
func (t *Transport) Validate(ctx context.Context, e transport.Endpoint) error {
	st := t.conns.Settings()
	tgt, err := st.resolve(e)
	if err != nil {
		return err
	}
	return t.checkServers(ctx, st, tgt.servers)
}

// checkServers applies the SSRF guard to every server of a list, resolving
// names for at most the connect timeout. It returns the guard's refusal, or
// nil: a name that does not resolve now is left to the dial, which checks
// every address it connects to.
func (t *Transport) checkServers(ctx context.Context, st settings, srv *servers) error {
	return pluginkit.CheckAddrs(ctx, st.guard, t.resolver, st.connectTimeout, srv.hosts...)
}

// Send publishes msg and waits for JetStream's ack.
func (t *Transport) Send(ctx context.Context, msg transport.Message) (out transport.Outcome) {
	st := t.conns.Settings()
	// Refusals before the publish: nothing has left the process.
	tgt, err := st.resolve(msg.Endpoint)
	if err != nil {
		return transport.Refused(err.Error())
	}
	if msg.DeliveryID == "" {
		return transport.Refused("the message has no delivery id, which Nats-Msg-Id must carry for JetStream to drop repeats")
	}
	nm := &nats.Msg{Subject: tgt.subject, Data: msg.Body, Header: nats.Header{}}
	for _, h := range msg.Headers {
		if err := checkHeader(h); err != nil {
			return transport.Refused(err.Error())
		}
		nm.Header.Add(h.Name, h.Value)
	}
	// The consumer's spans join the attempt's trace through these headers.
	ctx, span, traceHeaders := transport.StartPublish(ctx, "nats", tgt.subject)
	defer pluginkit.EndPublish(span, &out)
	for name, value := range traceHeaders {
		nm.Header.Set(name, value)
	}

	// The ack wait ends at the attempt's deadline, not at the host's
	// (which is later by a grace), so the answer is back in time.
	ctx, cancel := pluginkit.AttemptContext(ctx, msg.Deadline, st.ackTimeout)
	defer cancel()

	start := time.Now()
	c, err := t.conn(ctx, tgt.servers, st)
	if err != nil {
		return outcome(tgt, msg, err, nil, failure{waited: time.Since(start)})
	}
	if !c.nc.IsConnected() {
		// Fail now rather than at the deadline: the client would refuse
		// the publish anyway, and for a reason (no headers before the
		// server's INFO) that would read as permanent.
		return outcome(tgt, msg, errNotConnected, nil, failure{lastErr: c.lastError(), waited: time.Since(start)})
	}
	pubCtx, done := c.watch(ctx, tgt.subject)
	defer done()
	ack, err := c.js.PublishMsg(pubCtx, nm, jetstream.WithMsgID(msg.DeliveryID))
	if err != nil {
		return outcome(tgt, msg, err, context.Cause(pubCtx), failure{
			lastErr: c.lastError(), waited: time.Since(start), connected: c.nc.IsConnected(),
		})
	}
	if ack.Duplicate {
		t.log.DebugContext(ctx, "JetStream already had this delivery; counted as delivered",
			"delivery_id", msg.DeliveryID, "stream", ack.Stream, "seq", ack.Sequence)
	}
	return transport.Delivered(0)
}

// outcome classifies a failed publish and makes its error text safe: no
// credential from the URL, and none of the header values or the body,
// should the client ever have quoted them.
func outcome(tgt target, msg transport.Message, err, cause error, f failure) transport.Outcome {
	f.subject, f.servers = tgt.subject, tgt.servers.shown
	o := classify(err, cause, f)
	o.Error = transport.ScrubError(tgt.servers.scrub(o.Error), msg)
	return o
}
