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

	"github.com/hymical/hymical/plugins/internal/broker"
)

// errClosed is what a send after Close gets.
var errClosed = errors.New("the mqtt transport is shutting down")

// errNotConnected wraps the reason a send found the connection down.
var errNotConnected = errors.New("not connected")

// conn is one broker connection, kept up by its own goroutine (the Loop)
// and shared by every send to that broker. paho's own reconnect is off: it
// hides a refused CONNECT's return code, which decides whether a failure
// is permanent.
type conn struct {
	*broker.Loop
	srv *server
	st  settings
	log *slog.Logger

	mu sync.Mutex
	c  mqtt.Client // nil while down
	// lastErr is why the connection is down, password scrubbed.
	lastErr error
	// dials counts connections made, for tests that show reuse.
	dials int
}

// newConn starts the connection to tgt's broker.
func newConn(tgt target, st settings, log *slog.Logger) *conn {
	srv := tgt.server
	log = log.With("broker", srv.shown)
	c := &conn{Loop: broker.NewLoop(log, "MQTT"), srv: srv, st: st, log: log}
	go c.Run(st.Common, c.connect)
	return c
}

// connect dials once and, on success, makes the connection the one sends
// use and returns the watch on it.
func (c *conn) connect() (func() bool, error) {
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
	if err != nil {
		return nil, err
	}
	return func() bool { return c.watch(cl, lost) }, nil
}

// watch waits until the connection is lost (true) or Close is called
// (false, after disconnecting).
func (c *conn) watch(cl mqtt.Client, lost <-chan error) bool {
	select {
	case <-c.Stopping():
		c.mu.Lock()
		c.c = nil
		c.mu.Unlock()
		cl.Disconnect(250)
		return false
	case e := <-lost:
		lerr := &lostError{text: "the connection was lost"}
		if e != nil {
			lerr.text = "the connection was lost: " + c.srv.scrub(e.Error())
		}
		c.mu.Lock()
		c.c, c.lastErr = nil, lerr
		c.mu.Unlock()
		c.log.Warn("lost the MQTT connection; reconnecting", "error", lerr.text)
		return true
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
	d := c.st.Guard.Dialer(&net.Dialer{Timeout: c.st.ConnectTimeout, KeepAlive: 30 * time.Second})
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
		SetConnectTimeout(c.st.ConnectTimeout).
		SetWriteTimeout(c.st.ConnectTimeout).
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
				return nil, err
			}
			if !srv.tls {
				return nc, nil
			}
			tc := tls.Client(nc, srv.tlsConfig)
			ctx, cancel := context.WithTimeout(context.Background(), c.st.ConnectTimeout)
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
	case <-c.Stopping():
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
