package mqtttransport

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
)

// errClosed is what a send after Close gets.
var errClosed = errors.New("the mqtt transport is shutting down")

// errNotConnected wraps the reason a send found the connection down.
var errNotConnected = errors.New("not connected")

// conn is one broker connection, kept up by its own goroutine: dialled on
// first use, dialled again after a loss with a backoff, and shared by every
// send to that broker. Sends never dial; while the connection is down they
// fail at once. paho's own reconnect is off: it hides a refused CONNECT's
// return code, which decides whether a failure is permanent.
type conn struct {
	srv *server
	st  settings
	log *slog.Logger

	// ready is closed once the first dial has finished, either way.
	ready chan struct{}
	stop  chan struct{}
	done  chan struct{}

	mu sync.Mutex
	c  mqtt.Client // nil while down
	// lastErr is why the connection is down, password scrubbed.
	lastErr error
	// dials counts connections made, for tests that show reuse.
	dials int
}

func newConn(srv *server, st settings, log *slog.Logger) *conn {
	c := &conn{srv: srv, st: st, log: log.With("broker", srv.shown),
		ready: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// close stops the connection's goroutine and disconnects.
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
		lost := make(chan error, 1)
		cl, err := c.dial(lost)
		c.mu.Lock()
		if err != nil {
			c.lastErr = err
		} else {
			c.c, c.lastErr = cl, nil
			c.dials++
		}
		c.mu.Unlock()
		if first {
			close(c.ready)
			first = false
		}
		if err != nil {
			c.log.Warn("could not connect to the MQTT broker; trying again", "error", err.Error(), "wait", wait)
			select {
			case <-c.stop:
				return
			case <-time.After(wait):
			}
			wait = min(wait*2, c.st.reconnectWaitMax)
			continue
		}
		wait = c.st.reconnectWait
		c.log.Info("connected to the MQTT broker")
		select {
		case <-c.stop:
			c.mu.Lock()
			c.c = nil
			c.mu.Unlock()
			cl.Disconnect(250)
			return
		case e := <-lost:
			lerr := &lostError{text: "the connection was lost"}
			if e != nil {
				lerr.text = "the connection was lost: " + c.srv.scrub(e.Error())
			}
			c.mu.Lock()
			c.c, c.lastErr = nil, lerr
			c.mu.Unlock()
			c.log.Warn("lost the MQTT connection; reconnecting", "error", lerr.text)
		}
	}
}

// lostError is a connection that was up and went away.
type lostError struct{ text string }

func (e *lostError) Error() string { return e.text }

// ConnectError is a CONNECT the broker answered with a refusal, or that
// failed before it answered (Code 0).
type ConnectError struct {
	// Code is the CONNACK return code (MQTT 3.1.1 §3.2.2.3); 0 when no
	// CONNACK came.
	Code byte
	text string
	err  error
}

func (e *ConnectError) Error() string { return e.text }
func (e *ConnectError) Unwrap() error { return e.err }

// clientID is a fresh client identifier: two plugin processes must never
// share one, or the broker would disconnect the older.
func clientID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "hymical-" + hex.EncodeToString(b)
}

// dial connects once. Every address dialled passes the SSRF guard; TLS,
// for ssl://, is layered on after the dial.
func (c *conn) dial(lost chan error) (mqtt.Client, error) {
	d := c.st.guard.Dialer(&net.Dialer{Timeout: c.st.connectTimeout, KeepAlive: 30 * time.Second})
	srv := c.srv
	opts := mqtt.NewClientOptions().
		AddBroker(srv.broker).
		SetClientID(clientID()).
		SetProtocolVersion(4).
		// A clean session: nothing is queued for the plugin, and a
		// PUBACK is the broker's own acknowledgement.
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(c.st.connectTimeout).
		SetWriteTimeout(c.st.connectTimeout).
		SetKeepAlive(30 * time.Second).
		SetPingTimeout(10 * time.Second).
		SetOrderMatters(false).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) {
			select {
			case lost <- err:
			default:
			}
		}).
		SetCustomOpenConnectionFn(func(uri *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
			nc, err := d.Dial("tcp", uri.Host)
			if err != nil {
				// A refusal of what the broker's name resolved to
				// now is not the broker's for good.
				return nil, pluginkit.NameRefusal(err, uri.Host)
			}
			if !srv.tls {
				return nc, nil
			}
			tc := tls.Client(nc, srv.tlsConfig)
			ctx, cancel := context.WithTimeout(context.Background(), c.st.connectTimeout)
			defer cancel()
			if err := tc.HandshakeContext(ctx); err != nil {
				nc.Close()
				return nil, err
			}
			return tc, nil
		})
	if srv.username != "" {
		opts.SetUsername(srv.username)
		opts.SetPassword(srv.password)
	}
	cl := mqtt.NewClient(opts)
	tok := cl.Connect()
	select {
	case <-tok.Done():
	case <-c.stop:
		go func() { <-tok.Done(); cl.Disconnect(0) }()
		return nil, errClosed
	}
	if err := tok.Error(); err != nil {
		ce := &ConnectError{text: srv.scrub(err.Error()), err: err}
		if ct, ok := tok.(*mqtt.ConnectToken); ok {
			ce.Code = ct.ReturnCode()
		}
		return nil, ce
	}
	return cl, nil
}

// publish sends one QoS 1, not retained message and waits for the broker's
// PUBACK.
func (c *conn) publish(ctx context.Context, topic string, payload []byte) error {
	c.mu.Lock()
	cl, lastErr := c.c, c.lastErr
	c.mu.Unlock()
	if cl == nil {
		if lastErr == nil {
			lastErr = mqtt.ErrNotConnected
		}
		return fmt.Errorf("%w: %w", errNotConnected, lastErr)
	}
	tok := cl.Publish(topic, 1, false, payload)
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// connections is how many connections this conn has made.
func (c *conn) connections() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dials
}
