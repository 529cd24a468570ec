package brokertest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/testwait"
)

// Cut stands between clients and a server on its own loopback port and
// can cut them off: Stop resets every connection and refuses new ones, as
// a crashed broker or a lost route would look to a client, while the
// server behind it keeps running and keeps its data. Restart listens
// again on the same port.
type Cut struct {
	t      testing.TB
	target string

	mu    sync.Mutex
	addr  string
	ln    net.Listener
	conns map[net.Conn]struct{}
	done  chan struct{}
	// gen counts the listens, so a connection accepted before a Stop
	// is not forwarded after the Restart that follows it.
	gen int
}

// NewCut forwards a new loopback port to target until the test ends.
func NewCut(t testing.TB, target string) *Cut {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cut{t: t, target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	c.serve(ln)
	t.Cleanup(c.Stop)
	return c
}

// Addr is host:port of the forwarding port, for the client to dial.
func (c *Cut) Addr() string { return c.addr }

// Stop resets every forwarded connection and closes the port, so dials
// are refused. Calling it again does nothing.
func (c *Cut) Stop() {
	c.mu.Lock()
	ln, done := c.ln, c.done
	c.ln = nil
	for conn := range c.conns {
		// A reset, not an orderly close: the client sees what a killed
		// server's host would send it.
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
		delete(c.conns, conn)
	}
	c.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
		<-done
	}
}

// Restart listens on the same port again, retrying while the port is
// still held by the connections just reset.
func (c *Cut) Restart() {
	c.t.Helper()
	testwait.For(c.t, 10*time.Second, func() error {
		ln, err := net.Listen("tcp", c.addr)
		if err != nil {
			return fmt.Errorf("listening again on %s: %w", c.addr, err)
		}
		c.serve(ln)
		return nil
	})
}

func (c *Cut) serve(ln net.Listener) {
	done := make(chan struct{})
	c.mu.Lock()
	c.gen++
	c.ln, c.done = ln, done
	gen := c.gen
	c.mu.Unlock()
	go func() {
		defer close(done)
		for {
			client, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					c.t.Logf("cut %s: accept: %v", c.addr, err)
				}
				return
			}
			go c.forward(client, gen)
		}
	}()
}

// forward copies both ways between client and a new connection to the
// target, until either side ends or Stop cuts them.
func (c *Cut) forward(client net.Conn, gen int) {
	server, err := net.Dial("tcp", c.target)
	if err != nil {
		_ = client.Close()
		return
	}
	c.mu.Lock()
	if c.ln == nil || c.gen != gen { // cut while dialling
		c.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	c.conns[client] = struct{}{}
	c.conns[server] = struct{}{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		// Either side ending ends both, as one TCP connection would.
		_ = dst.Close()
		_ = src.Close()
	}
	wg.Add(2)
	go pipe(server, client)
	go pipe(client, server)
	wg.Wait()
	c.mu.Lock()
	delete(c.conns, client)
	delete(c.conns, server)
	c.mu.Unlock()
}
