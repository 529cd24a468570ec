// Package redistransport is the logic of the Redis Streams transport plugin:
// it appends a signed message to an endpoint's stream with XADD and
// classifies what came back. It speaks only the sdk/transport types and must
// not import anything from the server's server/ or storage/ trees.
//
// What it promises the server:
//   - each message is one stream entry with the fields id, timestamp,
//     signature and body, in that order: the webhook-id, webhook-timestamp
//     and webhook-signature values it was handed and the exact body, so a
//     consumer verifies the entry as it would an HTTP delivery;
//   - delivered means Redis answered the XADD with the new entry's id;
//   - with maxlen set, the stream is trimmed approximately (MAXLEN ~ n);
//   - connection failures, timeouts and answers a retry may fix (LOADING,
//     BUSY, OOM, READONLY, MASTERDOWN, TRYAGAIN, max clients) are
//     retryable; WRONGTYPE (the key is not a stream), NOAUTH and WRONGPASS
//     (the URL's credentials), NOPERM (the user's ACL), an unknown database
//     and a cluster's MOVED/ASK are permanent;
//   - error text names the server and what went wrong, never the body, a
//     header or the password from the URL;
//   - connections to servers whose addresses are not globally reachable
//     (the rule of sdk/netguard: loopback, private, link-local, …) are
//     refused, at Validate and on every dial after DNS resolution, unless
//     the plugin's allowed_networks setting contains the address; unix://
//     servers are refused unless allow_unix_sockets is true. A refusal is
//     permanent and no request goes out.
//
// Redis Streams have no duplicate window: a retry after a reply was lost
// appends a second entry with the same id field. Consumers dedupe on it, or
// on the submission id in the body, as every Hymical receiver must.
//
// One pool of connections is kept per server URL and is shared by every
// endpoint naming it. The client never retries an XADD on its own, since a
// retry the server did not ask for is a duplicate entry the attempt history
// would not show.
package redistransport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// ClientName is how the plugin's connections name themselves to Redis
// (CLIENT LIST), so an operator can find them.
const ClientName = "hymical-plugin-redis"

// errClosed is why a send after Close is deferred.
var errClosed = errors.New("the redis transport is shutting down")

// Options are what the embedding program decides, as opposed to the
// operator's settings.
type Options struct {
	// Logger receives pool events; nil discards them. Messages, headers and
	// credentials are never logged.
	Logger *slog.Logger
	// Resolver resolves broker names for the SSRF guard's check before a
	// connection is made; nil means net.DefaultResolver. Tests set it to
	// make a name lead where they need it to.
	Resolver netguard.Resolver
}

// Transport is the Redis Streams transport. It is safe for concurrent use.
type Transport struct {
	log      *slog.Logger
	resolver netguard.Resolver
	clients  *pluginkit.Conns[settings, *redis.Client]
}

var _ transport.Transport = (*Transport)(nil)

// New returns a transport with the default settings.
func New(opts Options) *Transport {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Transport{log: log, resolver: opts.Resolver, clients: pluginkit.NewConns[settings, *redis.Client](defaultSettings(), errClosed)}
}

func (t *Transport) settings() settings { return t.clients.Settings() }

// Configure applies the plugin-wide settings; settings not given take their
// defaults. Pools made under earlier settings are closed; new ones are made
// on the next send.
func (t *Transport) Configure(_ context.Context, s transport.Settings) error {
	next, err := parseSettings(s)
	if err != nil {
		return err
	}
	closeAll(t.clients.Configure(next))
	return nil
}

// Close closes every pool. Sends after Close are retryable.
func (t *Transport) Close() {
	closeAll(t.clients.Close())
}

func closeAll(clients []*redis.Client) {
	for _, c := range clients {
		_ = c.Close()
	}
}

// Validate checks an endpoint's config without connecting: an endpoint is
// refused for what no retry could fix (no stream, an unusable key, a bad
// maxlen, no server or an unreadable server URL, a server the SSRF guard
// refuses), not because the server is down right now. A server name is
// resolved to check where it leads; one that does not resolve now is
// accepted, and checked again when dialled.
func (t *Transport) Validate(ctx context.Context, e transport.Endpoint) error {
	st := t.settings()
	tgt, err := st.resolve(e)
	if err != nil {
		return err
	}
	return t.checkServer(ctx, st, tgt.server)
}

// checkServer applies the SSRF guard to a server, resolving its name for at
// most the connect timeout. It returns the guard's refusal, or nil: a name
// that does not resolve now is left to the dial, which checks every address
// it connects to.
func (t *Transport) checkServer(ctx context.Context, st settings, srv *server) error {
	if srv.network == "unix" {
		return st.guard.CheckNetwork(srv.network, srv.addr)
	}
	return pluginkit.CheckAddrs(ctx, st.guard, t.resolver, st.connectTimeout, srv.addr)
}

// guardedDialer is the client's dialer: the SSRF guard checks every
// address it connects to, after DNS resolution, then TLS is added when
// the URL asks for it (what go-redis's own dialer does).
func guardedDialer(st settings, opts *redis.Options) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := st.guard.Dialer(&net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 5 * time.Minute})
	tlsConfig := opts.TLSConfig
	return func(ctx context.Context, network, addr string) (nc net.Conn, err error) {
		if tlsConfig == nil {
			nc, err = d.DialContext(ctx, network, addr)
		} else {
			nc, err = (&tls.Dialer{NetDialer: d, Config: tlsConfig}).DialContext(ctx, network, addr)
		}
		// A refusal of what the server's name resolved to now is not the
		// server's for good.
		return nc, pluginkit.NameRefusal(err, addr)
	}
}

// client returns the pool for srv, making it on first use. Making one does
// not connect; connections are dialled as sends need them.
func (t *Transport) client(srv *server, st settings) (*redis.Client, bool) {
	c, err := t.clients.Get(srv.raw, nil, func() *redis.Client { return t.newClient(srv, st) })
	return c, err == nil
}

// newClient makes the pool for srv, not yet connected.
func (t *Transport) newClient(srv *server, st settings) *redis.Client {
	opts := *srv.opts
	if opts.DialTimeout == 0 {
		opts.DialTimeout = st.connectTimeout
	}
	opts.Dialer = guardedDialer(st, &opts)
	if st.poolSize > 0 && opts.PoolSize == 0 {
		opts.PoolSize = st.poolSize
	}
	if opts.ClientName == "" {
		opts.ClientName = ClientName
	}
	// An XADD the client retries by itself after a lost reply is a second
	// entry; the server's retry schedule decides when to try again.
	opts.MaxRetries = -1
	// The attempt's deadline, carried by the context, bounds every
	// command rather than the client's own read and write timeouts.
	opts.ContextTimeoutEnabled = true
	// CLIENT SETINFO and maintenance notifications are newer than many
	// servers in use; their refusals would only add noise.
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	c := redis.NewClient(&opts)
	t.log.Info("opened a connection pool", "server", srv.shown)
	return c
}

// hasClient says whether a pool for srv is already made (or the transport
// is closed, when client will say so).
func (t *Transport) hasClient(srv *server) bool {
	_, ok, err := t.clients.Lookup(srv.raw)
	return ok || err != nil
}

// Send appends msg to the endpoint's stream.
func (t *Transport) Send(ctx context.Context, msg transport.Message) (out transport.Outcome) {
	st := t.settings()
	// Refusals before the XADD: nothing has left the process.
	tgt, err := st.resolve(msg.Endpoint)
	if err != nil {
		return transport.Refused(err.Error())
	}
	fields, err := entry(msg)
	if err != nil {
		return transport.Refused(err.Error())
	}
	if !t.hasClient(tgt.server) {
		// The guard is asked by name before a pool is made, so a refused
		// server fails once, clearly, rather than in each dial; the pool's
		// dialer still checks every address it connects to, so a name
		// that re-resolves later is caught too.
		if err := t.checkServer(ctx, st, tgt.server); err != nil {
			return classify(err, failure{stream: tgt.stream, server: tgt.server.shown})
		}
	}
	// The consumer's spans join the attempt's trace through these fields.
	ctx, span, traceFields := transport.StartPublish(ctx, "redis", tgt.stream)
	defer pluginkit.EndPublish(span, &out)
	for _, name := range []string{FieldTraceparent, FieldTracestate} {
		if v := traceFields[name]; v != "" {
			fields = append(fields, name, v)
		}
	}
	c, ok := t.client(tgt.server, st)
	if !ok {
		return transport.Deferred(errClosed.Error())
	}
	// The command ends at the attempt's deadline, not at the host's (which
	// is later by a grace), so the answer is back in time.
	ctx, cancel := pluginkit.AttemptContext(ctx, msg.Deadline, DefaultSendTimeout)
	defer cancel()
	start := time.Now()
	args := &redis.XAddArgs{Stream: tgt.stream, Values: fields}
	if tgt.maxLen > 0 {
		args.MaxLen, args.Approx = tgt.maxLen, true
	}
	if err := c.XAdd(ctx, args).Err(); err != nil {
		o := classify(err, failure{stream: tgt.stream, server: tgt.server.shown, waited: time.Since(start)})
		o.Error = scrub(o.Error, tgt.server, msg)
		return o
	}
	return transport.Delivered(0)
}

// entry lays out the stream entry's fields from the signed message.
func entry(msg transport.Message) ([]any, error) {
	values := map[string]string{}
	for _, h := range msg.Headers {
		name := strings.ToLower(h.Name)
		if _, seen := values[name]; !seen {
			values[name] = h.Value
		}
	}
	id := values["webhook-id"]
	if id == "" {
		id = msg.DeliveryID
	}
	if id == "" {
		return nil, fmt.Errorf("the message has no webhook-id header and no delivery id, which the entry's %s field must carry", FieldID)
	}
	for _, name := range []string{"webhook-timestamp", "webhook-signature"} {
		if values[name] == "" {
			return nil, fmt.Errorf("the message has no %s header, without which a consumer cannot verify the entry", name)
		}
	}
	return []any{
		FieldID, id,
		FieldTimestamp, values["webhook-timestamp"],
		FieldSignature, values["webhook-signature"],
		FieldBody, msg.Body,
	}, nil
}

// scrub makes an outcome's text safe: no password from the URL, and none
// of the header values or the body, should an error ever have quoted them.
func scrub(text string, srv *server, msg transport.Message) string {
	return transport.ScrubError(srv.scrub(text), msg)
}
