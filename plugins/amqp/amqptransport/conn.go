package amqptransport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
)

// errClosed is what a send after Close gets.
var errClosed = errors.New("the amqp transport is shutting down")

// maxIdleChannels bounds the confirm-mode channels kept open between sends
// on one connection; more are opened while more sends are in flight.
const maxIdleChannels = 64

// conn is one broker connection, kept up by its own goroutine: dialled on
// first use, dialled again after a loss with a backoff, and shared by every
// send to that broker. Sends never dial; while the connection is down they
// fail at once.
type conn struct {
	srv *server
	st  settings
	log *slog.Logger

	// ready is closed once the first dial has finished, either way.
	ready chan struct{}
	stop  chan struct{}
	done  chan struct{}

	mu sync.Mutex
	ac *amqp.Connection // nil while down
	// lastErr is why the connection is down, password scrubbed.
	lastErr error
	// blocked is the broker's reason while it blocks publishing (a memory
	// or disk alarm); "" otherwise.
	blocked string
	idle    []*channel
	// dials counts connections made, for tests that show reuse.
	dials int
}

// channel is one confirm-mode channel with at most one publish in flight,
// so that a basic.return on it belongs to that publish.
type channel struct {
	ac      *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

func newConn(srv *server, st settings, log *slog.Logger) *conn {
	c := &conn{srv: srv, st: st, log: log.With("broker", srv.shown),
		ready: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// close stops the connection's goroutine and closes the connection.
func (c *conn) close() {
	close(c.stop)
	<-c.done
}

// run keeps the connection up until close.
func (c *conn) run() {
	defer close(c.done)
	first := true
	wait := c.st.reconnectWait
	for {
		ac, err := c.dial()
		if err != nil {
			c.mu.Lock()
			c.lastErr = err
			c.mu.Unlock()
			if first {
				close(c.ready)
				first = false
			}
			c.log.Warn("could not connect to the AMQP broker; trying again", "error", err.Error(), "wait", wait)
			select {
			case <-c.stop:
				return
			case <-time.After(wait):
			}
			wait = min(wait*2, c.st.reconnectWaitMax)
			continue
		}
		wait = c.st.reconnectWait
		closes := ac.NotifyClose(make(chan *amqp.Error, 1))
		blocks := ac.NotifyBlocked(make(chan amqp.Blocking, 4))
		c.mu.Lock()
		c.ac, c.lastErr, c.blocked = ac, nil, ""
		c.dials++
		c.mu.Unlock()
		if first {
			close(c.ready)
			first = false
		}
		c.log.Info("connected to the AMQP broker")
		if !c.serve(ac, closes, blocks) {
			return
		}
	}
}

// serve watches a live connection until it is lost (true) or close is
// called (false).
func (c *conn) serve(ac *amqp.Connection, closes chan *amqp.Error, blocks chan amqp.Blocking) bool {
	for {
		select {
		case <-c.stop:
			c.mu.Lock()
			c.ac, c.idle = nil, nil
			c.mu.Unlock()
			_ = ac.Close()
			return false
		case b := <-blocks:
			c.mu.Lock()
			c.blocked = ""
			if b.Active {
				c.blocked = b.Reason
				if c.blocked == "" {
					c.blocked = "no reason given"
				}
			}
			c.mu.Unlock()
			c.log.Warn("the AMQP broker blocked or unblocked publishing", "blocked", b.Active, "reason", b.Reason)
		case e := <-closes:
			lost := &lostError{err: errors.New("the connection was lost")}
			if e != nil {
				lost.err = fmt.Errorf("the connection was lost: %s", c.srv.scrub(e.Reason))
				// Only a broker's close (a restart, an operator) is kept
				// as its reply; the client reports a broken socket as an
				// error of its own.
				if e.Server {
					lost.cause = e
				}
			}
			err := error(lost)
			c.mu.Lock()
			c.ac, c.idle, c.lastErr, c.blocked = nil, nil, lost, ""
			c.mu.Unlock()
			c.log.Warn("lost the AMQP connection; reconnecting", "error", err.Error())
			return true
		}
	}
}

// lostError is a connection that was up and went away; it unwraps to the
// broker's own close reason when there was one.
type lostError struct {
	err   error
	cause *amqp.Error
}

func (e *lostError) Error() string { return e.err.Error() }
func (e *lostError) Unwrap() error {
	if e.cause == nil {
		return amqp.ErrClosed
	}
	return e.cause
}

// dial connects once. Every address dialled passes the SSRF guard; TLS,
// for amqps://, is layered on by the client after the dial.
func (c *conn) dial() (*amqp.Connection, error) {
	d := c.st.guard.Dialer(&net.Dialer{Timeout: c.st.connectTimeout, KeepAlive: 30 * time.Second})
	timeout := c.st.connectTimeout
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(ClientName)
	ac, err := amqp.DialConfig(c.srv.raw, amqp.Config{
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			nc, err := d.Dial(network, addr)
			if err != nil {
				// A refusal of what the broker's name resolved to
				// now is not the broker's for good.
				return nil, pluginkit.NameRefusal(err, addr)
			}
			// The TLS and AMQP handshakes must not outlast the connect
			// timeout; the client clears the deadline once connected.
			if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
				nc.Close()
				return nil, err
			}
			return nc, nil
		},
	})
	if err != nil {
		return nil, &dialError{text: c.srv.scrub(err.Error()), err: err}
	}
	return ac, nil
}

// dialError is a failed dial with its text scrubbed of the password; it
// unwraps to the client's error for classify.
type dialError struct {
	text string
	err  error
}

func (e *dialError) Error() string { return e.text }
func (e *dialError) Unwrap() error { return e.err }

// errNotConnected wraps the reason a send found the connection down.
var errNotConnected = errors.New("not connected")

// errBlocked is a send refused because the broker blocks publishing.
var errBlocked = errors.New("the broker is blocking publishers")

// channel returns an idle channel, or opens one, bounded by ctx.
func (c *conn) channel(ctx context.Context) (*channel, error) {
	c.mu.Lock()
	ac, lastErr, blocked := c.ac, c.lastErr, c.blocked
	if ac == nil {
		c.mu.Unlock()
		if lastErr == nil {
			lastErr = amqp.ErrClosed
		}
		return nil, fmt.Errorf("%w: %w", errNotConnected, lastErr)
	}
	if blocked != "" {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w (%s)", errBlocked, blocked)
	}
	if n := len(c.idle); n > 0 {
		ch := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return ch, nil
	}
	c.mu.Unlock()
	// Opening a channel and switching it to confirm mode are round trips
	// the client does not bound; the attempt's deadline does.
	type result struct {
		ch  *channel
		err error
	}
	got := make(chan result, 1)
	go func() {
		ch, err := openChannel(ac)
		got <- result{ch, err}
	}()
	select {
	case r := <-got:
		return r.ch, r.err
	case <-ctx.Done():
		go func() {
			if r := <-got; r.ch != nil {
				discard(r.ch)
			}
		}()
		return nil, ctx.Err()
	}
}

func openChannel(ac *amqp.Connection) (*channel, error) {
	ch, err := ac.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	return &channel{
		ac:      ac,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 1)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

// discard closes a channel without waiting: on a hung connection the
// close's round trip would outlast the attempt.
func discard(ch *channel) {
	go func() { _ = ch.ch.Close() }()
}

// put keeps a channel whose last publish has fully finished for the next
// send, or closes it.
func (c *conn) put(ch *channel) {
	c.mu.Lock()
	keep := c.ac == ch.ac && len(c.idle) < maxIdleChannels && !ch.ch.IsClosed()
	if keep {
		c.idle = append(c.idle, ch)
	}
	c.mu.Unlock()
	if !keep {
		discard(ch)
	}
}

// ReturnedError is a message the broker returned as unroutable: the
// exchange has no binding that matches the routing key (publishes are
// mandatory, so the broker says so rather than dropping it).
type ReturnedError struct {
	Code uint16
	Text string
}

func (e *ReturnedError) Error() string {
	return fmt.Sprintf("the broker returned the message as unroutable (%d %s)", e.Code, e.Text)
}

// errNacked is a publish the broker refused to take responsibility for.
var errNacked = errors.New("the broker nacked the message")

// publish sends one mandatory, persistent message on a confirm-mode channel
// and waits for the broker's confirm. It returns nil only when the broker
// acknowledged the message and did not return it.
func (c *conn) publish(ctx context.Context, exchange, key string, pub amqp.Publishing) error {
	ch, err := c.channel(ctx)
	if err != nil {
		return err
	}
	dc, err := ch.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, pub)
	if err != nil {
		discard(ch)
		return err
	}
	select {
	case <-dc.Done():
		// The broker sends basic.return before the basic.ack of the same
		// message, and the client hands both over in that order.
		select {
		case r := <-ch.returns:
			c.put(ch)
			return &ReturnedError{Code: r.ReplyCode, Text: r.ReplyText}
		default:
		}
		if dc.Acked() {
			c.put(ch)
			return nil
		}
		// Not acked: a nack, or the channel closed under the publish,
		// which the client reports to close listeners first.
		select {
		case e := <-ch.closes:
			if e != nil {
				return e
			}
			return amqp.ErrClosed
		default:
		}
		if ch.ch.IsClosed() {
			return amqp.ErrClosed
		}
		c.put(ch)
		return errNacked
	case e := <-ch.closes:
		if e != nil {
			return e
		}
		return amqp.ErrClosed
	case <-ctx.Done():
		// A confirm or a return may still come; the channel is not used
		// again so neither is taken for another message's.
		discard(ch)
		return ctx.Err()
	}
}

// connections is how many connections this conn has made.
func (c *conn) connections() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dials
}
