package natstransport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// entry is one cached connection, made once by whichever send needs it
// first while the others wait on ready.
type entry struct {
	ready chan struct{}
	c     *conn
	err   error
}

func closeAll(entries []*entry) {
	for _, e := range entries {
		go func() {
			<-e.ready
			if e.c != nil {
				e.c.nc.Close()
			}
		}()
	}
}

// errClosed is what a send after Close gets.
var errClosed = errors.New("the nats transport is shutting down")

// conn returns the connection for srv, making it on first use. A failure
// to make one is not cached: the next send tries again.
func (t *Transport) conn(ctx context.Context, srv *servers, st settings) (*conn, error) {
	// The guard is asked before a connection is made, by name, because a
	// refused dial would only be retried in the background and read as a
	// server that is down. The dialer then checks every address actually
	// connected to, including servers the cluster announces later and
	// names that re-resolve.
	e, err := t.conns.Get(srv.raw,
		func() error { return t.checkServers(ctx, st, srv) },
		func() *entry {
			e := &entry{ready: make(chan struct{})}
			go func() {
				e.c, e.err = dial(srv, st, t.log)
				if e.err != nil {
					t.conns.Forget(srv.raw, e)
				}
				close(e.ready)
			}()
			return e
		})
	if err != nil {
		return nil, err
	}
	select {
	case <-e.ready:
		return e.c, e.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// conn is one NATS connection and the publishes waiting on it.
type conn struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	srv *servers

	mu sync.Mutex
	// waiting holds the in-flight publishes by subject, so a permissions
	// violation, which the server reports apart from any reply, can end
	// the publishes it was about.
	waiting map[string]map[*waiter]struct{}
	// lastErr is the newest error the server or the connection reported
	// on its own, credentials scrubbed, for the text of a later failure.
	lastErr string
}

type waiter struct{ cancel context.CancelCauseFunc }

// dial connects to srv. The connection keeps retrying in the background
// when the server is down, so an error here means the options themselves
// are wrong.
func dial(srv *servers, st settings, log *slog.Logger) (*conn, error) {
	c := &conn{srv: srv, waiting: map[string]map[*waiter]struct{}{}}
	log = log.With("servers", srv.shown)
	nc, err := nats.Connect(srv.raw,
		nats.Name(ClientName),
		nats.Timeout(st.connectTimeout),
		nats.SetCustomDialer(st.guard.Dialer(&net.Dialer{Timeout: st.connectTimeout, KeepAlive: 30 * time.Second})),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(st.reconnectWait),
		// No client-side queue while reconnecting: a publish then fails at
		// once as retryable rather than going out later, after the
		// attempt was already reported.
		nats.ReconnectBufSize(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.asyncError(srv, err)
			log.Warn("NATS server reported an error", "error", srv.scrub(err.Error()))
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				c.setLastError(srv.scrub(err.Error()))
				log.Warn("lost the NATS connection; reconnecting", "error", srv.scrub(err.Error()))
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			// Called on every failed try; only the reason is kept, for the
			// text of the sends that fail meanwhile.
			if err != nil {
				c.setLastError(srv.scrub(err.Error()))
			}
		}),
		nats.ConnectHandler(func(nc *nats.Conn) {
			c.setLastError("")
			log.Info("connected to NATS", "server", nc.ConnectedAddr())
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			c.setLastError("")
			log.Info("reconnected to NATS", "server", nc.ConnectedAddr())
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", srv.shown, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("setting up JetStream on %s: %w", srv.shown, err)
	}
	c.nc, c.js = nc, js
	return c, nil
}

// PermissionError is a publish the server refused for the connection's
// credentials. The same publish will be refused on every retry until the
// server's permissions change.
type PermissionError struct {
	Subject string
	// Detail is the server's own text.
	Detail string
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("the NATS server refused the publish to %q: %s; grant the plugin's user publish permission on the subject, or change the endpoint's subject", e.Subject, e.Detail)
}

func (e *PermissionError) Unwrap() error { return nats.ErrPermissionViolation }

// publishViolation finds the subject in the server's
// `Permissions Violation for Publish to "subject"`.
var publishViolation = regexp.MustCompile(`(?i)publish to "([^"]+)"`)

func (c *conn) asyncError(srv *servers, err error) {
	text := srv.scrub(err.Error())
	c.setLastError(text)
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	m := publishViolation.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	perr := &PermissionError{Subject: m[1], Detail: text}
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.waiting[m[1]] {
		w.cancel(perr)
	}
}

func (c *conn) setLastError(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = text
}

// lastError is the newest error the connection reported on its own: from
// the handlers, or else the client's record of why its last connect failed,
// which no handler reports while the first connect is still being retried.
func (c *conn) lastError() string {
	c.mu.Lock()
	text := c.lastErr
	c.mu.Unlock()
	if text == "" {
		if err := c.nc.LastError(); err != nil {
			text = c.srv.scrub(err.Error())
		}
	}
	return text
}

// watch returns a context for one publish to subject that a permissions
// violation for that subject ends, with the *PermissionError as its cause.
// done must be called when the publish returns.
func (c *conn) watch(ctx context.Context, subject string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &waiter{cancel: cancel}
	c.mu.Lock()
	if c.waiting[subject] == nil {
		c.waiting[subject] = map[*waiter]struct{}{}
	}
	c.waiting[subject][w] = struct{}{}
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		delete(c.waiting[subject], w)
		if len(c.waiting[subject]) == 0 {
			delete(c.waiting, subject)
		}
		c.mu.Unlock()
		cancel(nil)
	}
}
