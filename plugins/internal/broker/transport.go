package broker

import (
	"context"
	"log/slog"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/transport"
)

// Target is where one endpoint's messages go, as a transport's Resolve
// read it from the endpoint's config.
type Target interface {
	// Broker is the key of the broker's connection (one per broker and
	// whatever else makes a connection different, such as credentials)
	// and the broker's host:port, for the guard.
	Broker() (key, addr string)
}

// Conn is one broker connection, as Hooks.Open starts it: in practice a
// transport's own type with a Loop embedded.
type Conn interface {
	comparable
	// Ready is closed once the connection's first dial has finished,
	// either way.
	Ready() <-chan struct{}
	// Close stops the connection's goroutine and closes the connection.
	Close()
}

// Hooks are what a transport gives the skeleton.
type Hooks[S Settings, T Target, C Conn] struct {
	// Defaults are the settings before Configure.
	Defaults S
	// Parse reads the plugin-wide settings Configure is given, taking the
	// defaults for those not given.
	Parse func(transport.Settings) (S, error)
	// Resolve reads an endpoint's config against the settings; its error
	// is why the endpoint is refused.
	Resolve func(S, transport.Endpoint) (T, error)
	// Open starts the connection to tgt's broker. It runs under a lock,
	// so it must not block: it starts a goroutine that dials.
	Open func(tgt T, st S, log *slog.Logger) C
	// ErrClosed is what a send after Close gets: the transport's own
	// sentinel, which its classify turns into an outcome.
	ErrClosed error
}

// Transport is the part of a broker transport that is the same for every
// broker: Configure, Close and Validate, and for Send, the settings and
// target it sends under and the connection it sends on. It is safe for
// concurrent use.
type Transport[S Settings, T Target, C Conn] struct {
	log   *slog.Logger
	hooks Hooks[S, T, C]
	conns *pluginkit.Conns[S, C]
}

// New returns a skeleton holding h.Defaults and no connection. log
// receives the connections' events; nil discards them.
func New[S Settings, T Target, C Conn](log *slog.Logger, h Hooks[S, T, C]) *Transport[S, T, C] {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Transport[S, T, C]{log: log, hooks: h, conns: pluginkit.NewConns[S, C](h.Defaults, h.ErrClosed)}
}

// Configure applies the plugin-wide settings; settings not given take their
// defaults. Connections made under earlier settings are closed, and new
// ones are made on the next send.
func (t *Transport[S, T, C]) Configure(_ context.Context, s transport.Settings) error {
	next, err := t.hooks.Parse(s)
	if err != nil {
		return err
	}
	closeAll(t.conns.Configure(next))
	return nil
}

// Close closes every connection. Sends after Close make no request.
func (t *Transport[S, T, C]) Close() {
	closeAll(t.conns.Close())
}

// closeAll closes in the background: a Close waits for the connection's
// goroutine, which may be in the middle of a dial.
func closeAll[C Conn](conns []C) {
	for _, c := range conns {
		go c.Close()
	}
}

// Validate checks an endpoint's config without connecting: an endpoint is
// refused for what Resolve refuses or the guard refuses of its broker, not
// because the broker is down right now. A broker's name is resolved to
// check where it leads; one that does not resolve now is accepted, and
// checked again when dialled.
func (t *Transport[S, T, C]) Validate(ctx context.Context, e transport.Endpoint) error {
	st, tgt, err := t.Resolve(e)
	if err != nil {
		return err
	}
	_, addr := tgt.Broker()
	return check(ctx, st, addr)
}

// Resolve reads an endpoint's config against the current settings, and
// returns those settings too: a send keeps to the one set it read, even
// if Configure replaces them meanwhile.
func (t *Transport[S, T, C]) Resolve(e transport.Endpoint) (S, T, error) {
	st := t.conns.Settings()
	tgt, err := t.hooks.Resolve(st, e)
	return st, tgt, err
}

// Conn returns the connection to tgt's broker, starting it on first use,
// and waits (bounded by ctx) for its first dial to finish. The guard is
// asked by name before a connection is made, so a refused broker fails
// once, clearly, rather than in every dial of the background loop; the
// dialer still checks every address it connects to, so a name that
// resolves elsewhere later is caught too.
func (t *Transport[S, T, C]) Conn(ctx context.Context, st S, tgt T) (C, error) {
	var zero C
	key, addr := tgt.Broker()
	c, err := t.conns.Get(key,
		func() error { return check(ctx, st, addr) },
		func() C { return t.hooks.Open(tgt, st, t.log) })
	if err != nil {
		return zero, err
	}
	select {
	case <-c.Ready():
		return c, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Lookup returns the connection kept under key, if one is made, without
// making one.
func (t *Transport[S, T, C]) Lookup(key string) (C, bool) {
	c, ok, _ := t.conns.Lookup(key)
	return c, ok
}

// check applies the guard to a broker, resolving its name for at most the
// connect timeout. It returns the guard's refusal, or nil.
func check[S Settings](ctx context.Context, st S, addr string) error {
	c := st.common()
	return pluginkit.CheckAddrs(ctx, c.Guard, c.ConnectTimeout, addr)
}
