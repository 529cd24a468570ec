// Package connlimit bounds the TCP connections an HTTP server holds: in
// all, and per client address. It owns the counting of accepted
// connections and the choice of which to close when a limit is reached;
// it knows nothing of requests, routes or credentials.
//
// # The design
//
// Without a bound, one client that opens connections and never sends a
// request fills the process's file descriptor table; accept then fails
// with EMFILE, http.Server backs off for up to a second at a time, and
// every legitimate client (and the database pool, and a plugin being
// restarted) waits for a descriptor. Listener keeps the number of
// connections under Max, which is meant to sit a reserve below the
// descriptor limit (see Defaults), so descriptors are always left for
// everything else.
//
// A connection over a limit is accepted and closed at once rather than
// left in the kernel's backlog: a backlog full of a flood's connections
// makes a legitimate client wait behind all of them, and hands the server
// connections whose clients gave up long ago. Closed at once, the client
// learns at once and may retry.
//
// Before refusing, Listener makes room when it can. A connection that is
// waiting, either opened and not yet sent a request (http.StateNew) or a
// keep-alive with nothing to do (http.StateIdle), may be closed: HTTP lets
// a server close an idle connection at any time, and http.Server does so
// itself at its idle timeout. A connection in the middle of a request is
// never closed.
//
// Over the per-address limit, the address's own oldest idle keep-alive
// makes room; an address at its limit whose connections never sent a
// request is refused, since that is what a flood looks like. Over the
// total limit, a newcomer whose address holds less than its share (the
// limit divided among the addresses holding connections) takes the place
// of a waiting connection of an address holding more, preferring one that
// never sent a request, then the oldest; a newcomer whose address already
// holds its share is refused. Legitimate clients, holding few
// connections, thus push out a flood's, while flooding addresses refuse
// one another instead of closing each other's connections in turn (each
// of which its owner would dial again at once).
//
// A client is its TCP peer address, IPv6 counted by its /64 (as
// server/authlimit counts it), so a host cannot multiply its allowance by
// rotating addresses. Loopback is not special: a local flood is still a
// flood. Behind a reverse proxy every client has the proxy's address, and
// MaxPerAddress must allow for that.
package connlimit

import (
	"container/list"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/hymical/hymical/server/authlimit"
)

// Limit names the limit a connection ran into.
type Limit string

const (
	// LimitTotal is Config.Max, the connections of every client together.
	LimitTotal Limit = "total"
	// LimitAddress is Config.MaxPerAddress, one client address's.
	LimitAddress Limit = "address"
)

// warnEvery spaces the warnings about refused connections, so a flood
// cannot flood the log as well.
const warnEvery = time.Minute

// Config configures a Listener.
type Config struct {
	// Max is how many connections may be open at once; at least 1.
	Max int
	// MaxPerAddress is how many of them one client address may hold;
	// from 1 to Max.
	MaxPerAddress int
	// Refused, if set, is called for each connection closed as soon as it
	// was accepted because limit was reached and no waiting connection
	// could make room.
	Refused func(limit Limit)
	// Evicted, if set, is called for each waiting connection closed to
	// make room for a new one under limit.
	Evicted func(limit Limit)
	// Logger gets a warning when connections are refused, at most once a
	// minute; nil means slog.Default().
	Logger *slog.Logger
}

// Listener is a net.Listener whose Accept keeps to the limits. Its
// ConnState method must be the http.Server's ConnState hook, so it knows
// which connections are waiting.
type Listener struct {
	net.Listener
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	total int
	// clients holds the connections of each address that has any.
	clients map[netip.Prefix]*client
	// fresh are the connections that have not sent a request yet, idle
	// the keep-alive connections between requests; oldest first.
	fresh, idle list.List
	// refused counts the refusals since the last warning.
	refused  int
	lastWarn time.Time
}

// client is one address's connections.
type client struct {
	n           int
	fresh, idle list.List
}

// New wraps ln. cfg.Max and cfg.MaxPerAddress must be valid (config
// validation refuses anything else); New clamps them into range rather
// than fail, as a guard for a Config built in code.
func New(ln net.Listener, cfg Config) *Listener {
	cfg.Max = max(cfg.Max, 1)
	cfg.MaxPerAddress = min(max(cfg.MaxPerAddress, 1), cfg.Max)
	l := &Listener{Listener: ln, cfg: cfg, log: cfg.Logger, clients: map[netip.Prefix]*client{}}
	if l.log == nil {
		l.log = slog.Default()
	}
	return l
}

// Accept waits for a connection within the limits and returns it; the
// connections it closes on the way are not errors.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// Open is how many accepted connections are open now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// admit counts c in, closing a waiting connection to make room if it must,
// or closes c and returns nil.
func (l *Listener) admit(c net.Conn) *conn {
	addr := authlimit.ClientOf(c.RemoteAddr().String())
	var (
		victims  []*conn
		evicted  []Limit
		refused  Limit
		warn     bool
		refusals int
	)
	l.mu.Lock()
	held := 0
	if cl := l.clients[addr]; cl != nil {
		held = cl.n
		if held >= l.cfg.MaxPerAddress {
			// Only an idle keep-alive of its own makes room: an address
			// at its limit with connections that never sent a request is
			// what a flood looks like, and refusing it costs less than
			// closing one of its connections for it to dial again.
			if e := cl.idle.Front(); e != nil {
				v := e.Value.(*conn)
				l.release(v)
				victims, evicted = append(victims, v), append(evicted, LimitAddress)
				held--
			} else {
				refused = LimitAddress
			}
		}
	}
	if refused == "" && l.total >= l.cfg.Max {
		if v := l.victim(held); v != nil {
			l.release(v)
			victims, evicted = append(victims, v), append(evicted, LimitTotal)
		} else {
			refused = LimitTotal
		}
	}
	var tc *conn
	if refused == "" {
		tc = &conn{Conn: c, l: l, addr: addr, counted: true}
		cl := l.clients[addr]
		if cl == nil {
			cl = &client{}
			l.clients[addr] = cl
		}
		cl.n++
		l.total++
		l.wait(tc, waitFresh)
	} else {
		l.refused++
		refusals = l.refused
		if now := time.Now(); now.Sub(l.lastWarn) >= warnEvery {
			warn, l.lastWarn, l.refused = true, now, 0
		}
	}
	l.mu.Unlock()

	// Closed before the new connection is handed on, so the descriptors
	// in use never exceed the limit.
	for i, v := range victims {
		v.Conn.Close()
		if l.cfg.Evicted != nil {
			l.cfg.Evicted(evicted[i])
		}
	}
	if tc != nil {
		return tc
	}
	c.Close()
	if l.cfg.Refused != nil {
		l.cfg.Refused(refused)
	}
	if warn {
		l.log.Warn("refusing connections: a connection limit is reached and every connection is busy with a request",
			"limit", l.limitKey(refused), "value", l.limitValue(refused), "client", authlimit.DisplayClient(addr), "refused_since_last_warning", refusals)
	}
	return nil
}

func (l *Listener) limitKey(limit Limit) string {
	if limit == LimitAddress {
		return "server.max_connections_per_address"
	}
	return "server.max_connections"
}

func (l *Listener) limitValue(limit Limit) int {
	if limit == LimitAddress {
		return l.cfg.MaxPerAddress
	}
	return l.cfg.Max
}

// ConnState is the http.Server's ConnState hook: it keeps track of which
// connections are waiting and may make room.
func (l *Listener) ConnState(c net.Conn, state http.ConnState) {
	// Served over TLS, the hook sees the *tls.Conn around the connection
	// Accept returned.
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = w.NetConn()
	}
	tc, ok := c.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !tc.counted {
		return
	}
	switch state {
	case http.StateIdle:
		l.unwait(tc)
		l.wait(tc, waitIdle)
	case http.StateActive, http.StateHijacked, http.StateClosed:
		// StateNew needs nothing: Accept has put it with the fresh ones.
		l.unwait(tc)
	}
}

// waitKind is which list of waiting connections a connection is on.
type waitKind int

const (
	notWaiting waitKind = iota
	waitFresh
	waitIdle
)

// wait puts tc at the back of the waiting connections of its kind.
// l.mu is held.
func (l *Listener) wait(tc *conn, kind waitKind) {
	cl := l.clients[tc.addr]
	tc.kind = kind
	if kind == waitFresh {
		tc.el, tc.clientEl = l.fresh.PushBack(tc), cl.fresh.PushBack(tc)
	} else {
		tc.el, tc.clientEl = l.idle.PushBack(tc), cl.idle.PushBack(tc)
	}
}

// unwait takes tc off the waiting connections. l.mu is held.
func (l *Listener) unwait(tc *conn) {
	cl := l.clients[tc.addr]
	switch tc.kind {
	case waitFresh:
		l.fresh.Remove(tc.el)
		cl.fresh.Remove(tc.clientEl)
	case waitIdle:
		l.idle.Remove(tc.el)
		cl.idle.Remove(tc.clientEl)
	}
	tc.kind, tc.el, tc.clientEl = notWaiting, nil, nil
}

// release stops counting tc. l.mu is held.
func (l *Listener) release(tc *conn) {
	if !tc.counted {
		return
	}
	l.unwait(tc)
	tc.counted = false
	l.total--
	cl := l.clients[tc.addr]
	if cl.n--; cl.n == 0 {
		delete(l.clients, tc.addr)
	}
}

// victimScan bounds how many waiting connections victim looks at, so the
// cost of an accept at the limit does not grow with the connections held.
const victimScan = 64

// victim chooses the waiting connection that makes room, at the total
// limit, for a newcomer whose address holds held connections: none when
// that address already holds its share of the limit (the limit divided
// among the addresses holding connections), so flooding addresses refuse
// one another instead of taking turns closing each other's connections.
// Otherwise, among the oldest victimScan connections that never sent a
// request (or, when none of them will do, the oldest idle ones), the
// oldest of the address holding the most, if it holds more than the
// newcomer's. l.mu is held.
func (l *Listener) victim(held int) *conn {
	if n := len(l.clients); n > 0 && held >= l.cfg.Max/n {
		return nil
	}
	for _, waiting := range []*list.List{&l.fresh, &l.idle} {
		var best *conn
		most := held
		i := 0
		for e := waiting.Front(); e != nil && i < victimScan; e, i = e.Next(), i+1 {
			v := e.Value.(*conn)
			if n := l.clients[v.addr].n; n > most {
				best, most = v, n
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// conn is an accepted connection, counted until it is closed.
type conn struct {
	net.Conn
	l    *Listener
	addr netip.Prefix

	// Guarded by l.mu: counted is false once the connection has been
	// let go (closed, or closed to make room); kind, el and clientEl
	// place it among the waiting connections.
	counted      bool
	kind         waitKind
	el, clientEl *list.Element
}

// Close closes the connection and stops counting it.
func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.release(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite passes on to the TCP connection, which http.Server uses to
// close gracefully after an error response.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
