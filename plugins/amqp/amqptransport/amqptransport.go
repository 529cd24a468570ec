// Package amqptransport is the logic of the AMQP 0-9-1 (RabbitMQ)
// transport plugin: it publishes a signed message to an endpoint's exchange
// with publisher confirms and classifies what came back. It speaks only the
// sdk/transport types and must not import anything from the server's
// server/ or storage/ trees.
//
// What it promises the server:
//   - the message's body is exactly the body it was handed, with content
//     type application/json and persistent delivery mode; its headers table
//     holds exactly the headers it was handed (webhook-id,
//     webhook-timestamp, webhook-signature, names kept as given) plus the
//     attempt's traceparent (and tracestate); its message id is the
//     webhook-id, which consumers dedupe on;
//   - every publish is mandatory and waits for the broker's confirm:
//     delivered means the broker acknowledged the message (persistent
//     messages to durable queues are on disk by then) and did not return
//     it as unroutable;
//   - an exchange that does not exist (404 NOT_FOUND), refused
//     credentials or permissions (403 ACCESS_REFUSED, 530 NOT_ALLOWED for
//     the virtual host) and a message over the broker's size limit are
//     permanent; an unroutable message (basic.return 312 NO_ROUTE), a lost
//     connection, no confirm by the deadline, a nack, a broker that blocks
//     publishers (a resource alarm) and the reply codes a retry may fix are
//     retryable (see replyCodes for each code);
//   - error text names the broker, the exchange and the routing key and
//     what went wrong, never the body, a header or the password from the
//     URL;
//   - connections to brokers whose addresses are not globally reachable
//     (the rule of sdk/netguard: loopback, private, link-local, …) are
//     refused, at Validate and on every dial after DNS resolution, unless
//     the plugin's allowed_networks setting contains the address. A refusal
//     is permanent and no request goes out.
//
// One connection is kept per broker URL (in practice one per plugin
// process, the plugin's url setting), with a few confirm-mode channels
// reused across sends. A goroutine per connection dials it, and dials again
// after a loss with a growing wait (reconnect_wait doubling up to
// reconnect_wait_max); while it is down, sends fail at once as retryable
// rather than dialling themselves, so an outage costs one dial per wait,
// not one per send.
//
// At least once, not exactly once: a confirm lost with the connection
// leaves the attempt retryable though the broker may have stored the
// message, so the retry publishes it twice. AMQP has no duplicate window;
// consumers dedupe on the message id (the webhook-id), or on the
// submission id in the body, as every Hymical receiver must.
package amqptransport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// ClientName is how the plugin's connections name themselves to the broker
// (the connection_name client property, shown by rabbitmqctl
// list_connections and the management UI), so an operator can find them.
const ClientName = "hymical-plugin-amqp"

// ContentType is every message's content type: the body is the event's
// JSON.
const ContentType = "application/json"

// Options are what the embedding program decides, as opposed to the
// operator's settings.
type Options struct {
	// Logger receives connection events (lost, reconnected, blocked); nil
	// discards them. Messages, headers and credentials are never logged.
	Logger *slog.Logger
	// Resolver resolves broker names for the SSRF guard's check before a
	// connection is made; nil means net.DefaultResolver. Tests set it to
	// make a name lead where they need it to.
	Resolver netguard.Resolver
}

// Transport is the AMQP transport. It is safe for concurrent use.
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
// refused for what no retry could fix (no exchange or routing key, a name
// AMQP cannot carry, no broker or an unreadable broker URL, a broker the
// SSRF guard refuses), not because the broker is down right now or the
// exchange is not declared yet. A broker's name is resolved to check where
// it leads; one that does not resolve now is accepted, and checked again
// when dialled.
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
	// connects to, so a name that re-resolves later is caught too.
	c, err := t.conns.Get(srv.raw,
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

// Send publishes msg and waits for the broker's confirm.
func (t *Transport) Send(ctx context.Context, msg transport.Message) (out transport.Outcome) {
	st := t.conns.Settings()
	// Refusals before the publish: nothing has left the process.
	tgt, err := st.resolve(msg.Endpoint)
	if err != nil {
		return transport.Refused(err.Error())
	}
	pub, err := publishing(msg)
	if err != nil {
		return transport.Refused(err.Error())
	}
	// The consumer's spans join the attempt's trace through these headers.
	ctx, span, traceHeaders := transport.StartPublish(ctx, "rabbitmq", tgt.destination())
	span.SetAttributes(attribute.String("messaging.rabbitmq.destination.routing_key", tgt.routingKey))
	defer pluginkit.EndPublish(span, &out)
	for name, value := range traceHeaders {
		pub.Headers[name] = value
	}

	// The confirm wait ends at the attempt's deadline, not at the host's
	// (which is later by a grace), so the answer is back in time.
	ctx, cancel := pluginkit.AttemptContext(ctx, msg.Deadline, st.confirmTimeout)
	defer cancel()

	start := time.Now()
	c, err := t.conn(ctx, tgt.server, st)
	if err == nil {
		err = c.publish(ctx, tgt.exchange, tgt.routingKey, pub)
	}
	if err == nil {
		return transport.Delivered(0)
	}
	o := classify(err, failure{destination: tgt.destination(), routingKey: tgt.routingKey, server: tgt.server.shown, waited: time.Since(start)})
	o.Error = scrub(o.Error, tgt.server, msg)
	return o
}

// ErrInvalidHeader is wrapped when a handed-over header cannot be carried
// in an AMQP headers table.
var ErrInvalidHeader = errors.New("header cannot be carried in an AMQP message")

// publishing lays out the message from the signed one.
func publishing(msg transport.Message) (amqp.Publishing, error) {
	headers := amqp.Table{}
	for _, h := range msg.Headers {
		if h.Name == "" || len(h.Name) > MaxNameBytes {
			return amqp.Publishing{}, fmt.Errorf("%w: header name %q is empty or longer than %d bytes", ErrInvalidHeader, pluginkit.Clip(h.Name), MaxNameBytes)
		}
		name := strings.ToLower(h.Name)
		if _, seen := headers[name]; seen {
			// A table holds one value per name; the first is the one an
			// HTTP receiver would read.
			continue
		}
		headers[name] = h.Value
	}
	id, _ := headers["webhook-id"].(string)
	if id == "" {
		id = msg.DeliveryID
	}
	if id == "" {
		return amqp.Publishing{}, errors.New("the message has no webhook-id header and no delivery id, which its message id must carry")
	}
	for _, name := range []string{"webhook-timestamp", "webhook-signature"} {
		if v, _ := headers[name].(string); v == "" {
			return amqp.Publishing{}, fmt.Errorf("the message has no %s header, without which a consumer cannot verify it", name)
		}
	}
	pub := amqp.Publishing{
		Headers:      headers,
		ContentType:  ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    id,
		Body:         msg.Body,
	}
	if ts, err := strconv.ParseInt(headers["webhook-timestamp"].(string), 10, 64); err == nil {
		pub.Timestamp = time.Unix(ts, 0)
	}
	return pub, nil
}

// scrub makes an outcome's text safe: no password from the URL, and none
// of the header values or the body, should an error ever have quoted them.
func scrub(text string, srv *server, msg transport.Message) string {
	return transport.ScrubError(srv.scrub(text), msg)
}
