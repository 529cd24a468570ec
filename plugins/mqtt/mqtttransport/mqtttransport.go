// Package mqtttransport is the logic of the MQTT 3.1.1 transport plugin: it
// publishes a signed message to an endpoint's topic with QoS 1 and
// classifies what came back. It speaks only the sdk/transport types and
// must not import anything from the server's server/ or storage/ trees.
//
// What it promises the server:
//   - MQTT 3.1.1 has no headers, so the payload is a JSON envelope (see
//     Envelope): the webhook-id, webhook-timestamp and webhook-signature
//     headers it was handed, the attempt's traceparent (and tracestate),
//     and the exact body as a JSON string. A consumer passes the three
//     headers and []byte(body) to any Standard Webhooks verifier;
//   - every publish is QoS 1, not retained: delivered means the broker
//     sent its PUBACK;
//   - a CONNECT the broker refuses for the credentials (return codes 4
//     and 5), the protocol version (1) or the client identifier (2) is
//     permanent; an unavailable broker (3), a failed dial, a lost
//     connection and no PUBACK by the deadline are retryable;
//   - error text names the broker and the topic and what went wrong, never
//     the body, a header or the password;
//   - connections to brokers whose addresses are not globally reachable
//     (the rule of sdk/netguard: loopback, private, link-local, …) are
//     refused, at Validate and on every dial after DNS resolution, unless
//     the plugin's allowed_networks setting contains the address. A refusal
//     is permanent and no request goes out.
//
// One connection is kept per broker and credentials (in practice one per
// plugin process, the plugin's url setting). A goroutine per connection
// dials it, and dials again after a loss with a growing wait
// (reconnect_wait doubling up to reconnect_wait_max); while it is down,
// sends fail at once as retryable rather than dialling themselves.
//
// At least once, not exactly once: a PUBACK lost with the connection leaves
// the attempt retryable though the broker may have passed the message on,
// so the retry publishes it twice. Consumers dedupe on the webhook-id, as
// every Hymical receiver must.
package mqtttransport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// MaxPayloadBytes is the largest payload an MQTT packet can carry (its
// remaining length is at most 268,435,455 bytes, §2.2.3), less room for
// the topic.
const MaxPayloadBytes = 268435455 - MaxTopicBytes - 4

// Envelope is the payload of every message. Body is the signed body
// exactly: it is JSON text, valid UTF-8, so a JSON string carries it
// unchanged.
type Envelope struct {
	WebhookID        string `json:"webhook-id"`
	WebhookTimestamp string `json:"webhook-timestamp"`
	WebhookSignature string `json:"webhook-signature"`
	Traceparent      string `json:"traceparent,omitempty"`
	Tracestate       string `json:"tracestate,omitempty"`
	Body             string `json:"body"`
}

// Options are what the embedding program decides, as opposed to the
// operator's settings.
type Options struct {
	// Logger receives connection events (lost, reconnected); nil
	// discards them. Messages, headers and credentials are never logged.
	Logger *slog.Logger
	// Resolver resolves broker names for the SSRF guard's check before a
	// connection is made; nil means net.DefaultResolver. Tests set it to
	// make a name lead where they need it to.
	Resolver netguard.Resolver
}

// Transport is the MQTT transport. It is safe for concurrent use.
type Transport struct {
	log      *slog.Logger
	resolver netguard.Resolver
	conns    *pluginkit.Conns[settings, *conn]
}

var _ transport.Transport = (*Transport)(nil)

// New returns a transport with the default settings. Until Configure gives
// it a url setting, only endpoints naming their own broker can be sent to.
func New(opts Options) *Transport {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Transport{log: log, resolver: opts.Resolver, conns: pluginkit.NewConns[settings, *conn](defaultSettings(), errClosed)}
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

// Close closes every connection. Sends after Close make no request.
func (t *Transport) Close() {
	closeAll(t.conns.Close())
}

func closeAll(conns []*conn) {
	for _, c := range conns {
		go c.close()
	}
}

// Validate checks an endpoint's config without connecting: an endpoint is
// refused for what no retry could fix (no topic or one MQTT cannot publish
// to, no broker or an unreadable broker URL, credentials in an endpoint's
// URL, a broker the SSRF guard refuses), not because the broker is down
// right now. A broker's name is resolved to check where it leads; one that
// does not resolve now is accepted, and checked again when dialled.
func (t *Transport) Validate(ctx context.Context, e transport.Endpoint) error {
	st := t.conns.Settings()
	tgt, err := st.resolve(e)
	if err != nil {
		return err
	}
	return t.checkServer(ctx, st, tgt.server)
}

// checkServer applies the SSRF guard to a broker, resolving its name for at
// most the connect timeout. It returns the guard's refusal, or nil.
func (t *Transport) checkServer(ctx context.Context, st settings, srv *server) error {
	return pluginkit.CheckAddrs(ctx, st.guard, t.resolver, st.connectTimeout, srv.addr)
}

// conn returns the connection for srv, starting it on first use, and waits
// (bounded by ctx) for its first dial to finish.
func (t *Transport) conn(ctx context.Context, srv *server, st settings) (*conn, error) {
	// The guard is asked by name before a connection is made, so a
	// refused broker fails once, clearly, rather than in every dial of
	// the background loop; the dialer still checks every address it
	// connects to.
	c, err := t.conns.Get(srv.key,
		func() error { return t.checkServer(ctx, st, srv) },
		func() *conn { return newConn(srv, st, t.log) })
	if err != nil {
		return nil, err
	}
	select {
	case <-c.ready:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Send publishes msg and waits for the broker's PUBACK.
func (t *Transport) Send(ctx context.Context, msg transport.Message) (out transport.Outcome) {
	st := t.conns.Settings()
	// Refusals before the publish: nothing has left the process.
	tgt, err := st.resolve(msg.Endpoint)
	if err != nil {
		return transport.Refused(err.Error())
	}
	env, err := envelope(msg)
	if err != nil {
		return transport.Refused(err.Error())
	}
	// The consumer's spans join the attempt's trace through the
	// envelope's traceparent.
	ctx, span, traceHeaders := transport.StartPublish(ctx, "mqtt", tgt.topic)
	defer pluginkit.EndPublish(span, &out)
	env.Traceparent, env.Tracestate = traceHeaders["traceparent"], traceHeaders["tracestate"]
	payload, err := encode(env)
	if err != nil {
		return transport.Refused(err.Error())
	}

	// The PUBACK wait ends at the attempt's deadline, not at the host's
	// (which is later by a grace), so the answer is back in time.
	ctx, cancel := pluginkit.AttemptContext(ctx, msg.Deadline, st.publishTimeout)
	defer cancel()

	start := time.Now()
	c, err := t.conn(ctx, tgt.server, st)
	if err == nil {
		err = c.publish(ctx, tgt.topic, payload)
	}
	if err == nil {
		return transport.Delivered(0)
	}
	o := classify(err, failure{topic: tgt.topic, server: tgt.server.shown, waited: time.Since(start)})
	o.Error = scrub(o.Error, tgt.server, msg)
	return o
}

// envelope lays out the message from the signed one.
func envelope(msg transport.Message) (Envelope, error) {
	var env Envelope
	for _, h := range msg.Headers {
		// The first of a name is the one an HTTP receiver would read.
		switch strings.ToLower(h.Name) {
		case "webhook-id":
			if env.WebhookID == "" {
				env.WebhookID = h.Value
			}
		case "webhook-timestamp":
			if env.WebhookTimestamp == "" {
				env.WebhookTimestamp = h.Value
			}
		case "webhook-signature":
			if env.WebhookSignature == "" {
				env.WebhookSignature = h.Value
			}
		}
	}
	for name, v := range map[string]string{"webhook-id": env.WebhookID, "webhook-timestamp": env.WebhookTimestamp, "webhook-signature": env.WebhookSignature} {
		if v == "" {
			return Envelope{}, fmt.Errorf("the message has no %s header, without which a consumer cannot verify it", name)
		}
	}
	if !utf8.Valid(msg.Body) {
		// A JSON string would replace the invalid bytes and break the
		// signature.
		return Envelope{}, errors.New("the message body is not valid UTF-8, so the envelope's JSON string cannot carry it exactly")
	}
	env.Body = string(msg.Body)
	return env, nil
}

// encode writes the envelope as one line of JSON, without HTML escaping
// (which is exact too, but harder to read).
func encode(env Envelope) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(env); err != nil {
		return nil, err
	}
	payload := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	if len(payload) > MaxPayloadBytes {
		return nil, fmt.Errorf("the message is %d bytes in its envelope, more than the %d an MQTT packet can carry", len(payload), MaxPayloadBytes)
	}
	return payload, nil
}

// scrub makes an outcome's text safe: no password, and none of the header
// values or the body, should an error ever have quoted them.
func scrub(text string, srv *server, msg transport.Message) string {
	return transport.ScrubError(srv.scrub(text), msg)
}
