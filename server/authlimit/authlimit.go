// Package authlimit keeps credentials from being guessed without limit. It
// counts failed authentications per client address and, once an address
// has failed too often within a window, refuses every request it makes to
// a route that takes a credential until the window ends. One Limiter is
// shared by the HTTP API and the console, so switching from one to the
// other buys a guesser nothing.
//
// It owns only those counts, in a fixed amount of memory. It never sees a
// credential: the caller judges the credential and says only whether it
// passed, failed or was absent.
//
// # The design
//
// A client is its TCP peer address, unless that peer is one of the
// Config.TrustedProxies: then it is the address those proxies forwarded
// (see ClientAddr), never one a client wrote itself. An IPv6 address
// counts by its /64, the block one subscriber gets, so rotating through
// the addresses of a single host is no help.
//
// Failures are kept in a table of at most Clients addresses, each with
// the start of its window and its count, in the order their windows
// started. A record is removed only when its window has passed: never to
// make room, so no number of other addresses can flush the record of an
// address that is being refused.
//
// When the table is full of records whose windows are still running, an
// address that has none cannot be told from a guesser's next address, and
// the credentials judged here are not all high-entropy: the admin token
// needs only 16 characters and may be chosen by hand, ingest keys have no
// minimum at all, and the console's login form takes the admin token. So
// an address without a record is not judged without limit either. Such
// addresses share an overflow allowance that is a rate, not a count per
// window: Failures failed guesses a second between them (a burst of
// Failures, refilled evenly). A right credential spends nothing. Only
// when that rate is used up is such an address refused, without judging,
// and for at most a second (Retry-After: 1).
//
// What it costs, and what it buys: an attacker with more addresses than
// the table gets at most Clients × Failures guesses per window plus
// Failures a second, and memory stays fixed. A client that has never
// failed is never refused because other addresses failed in the past:
// once the guessing pauses for a second, every new address is judged
// again, however long the table stays full. It can be refused only while
// the table is full and addresses without a record are failing, at that
// moment, faster than Failures a second; it then gets in on a retry a
// second after the attack stops, not a window later. The earlier design shared one count per
// window and shut every new client out for the whole window after such a
// burst. A client that authenticated before is also remembered (up to
// Clients of them, the most recent; only a right credential can put an
// address there) and is judged even while the rate is used up, until it
// fails once.
//
// A right credential from an address that has its own record past the
// limit is refused like a wrong one: the Limiter cannot tell a lucky
// guess from the owner, and answering it would turn the refusal into an
// oracle. The owner, from any other address, is never refused for
// someone else's failures.
package authlimit

import (
	"container/list"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Defaults for the Config fields that take one.
const (
	DefaultFailures = 10
	DefaultWindow   = 5 * time.Minute
	DefaultClients  = 10000
)

// Outcome is what a caller made of the credential a request presented.
type Outcome int

const (
	// Absent: the request presented no credential to judge (no
	// Authorization header, another scheme, no session cookie). It counts
	// neither way.
	Absent Outcome = iota
	// Passed: the credential is valid.
	Passed
	// Failed: a credential was presented and is not valid.
	Failed
)

// Config configures a Limiter.
type Config struct {
	// Failures is how many failed authentications one client may have
	// within Window; the next request is refused. Zero means
	// DefaultFailures.
	Failures int
	// Window is how long failures are counted from the first one, and so
	// the longest a refusal lasts. Zero means DefaultWindow.
	Window time.Duration
	// Clients bounds the addresses whose failures are remembered, and the
	// addresses remembered as having authenticated. Zero means
	// DefaultClients.
	Clients int
	// Logger gets one warning when a client starts being refused; nil
	// means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// TrustedProxies are the reverse proxies whose Forwarded and
	// X-Forwarded-For entries are believed (see ClientAddr). Empty: the
	// TCP peer is the client, so behind a proxy every client shares the
	// proxy's address and its count.
	TrustedProxies []netip.Prefix
}

// Limiter counts failed authentications. Its methods may be called from
// many goroutines.
type Limiter struct {
	limit  int
	window time.Duration
	max    int
	log    *slog.Logger
	now    func() time.Time
	// trusted is Config.TrustedProxies.
	trusted []netip.Prefix

	mu sync.Mutex
	// failing holds a record per client with failures in a running
	// window; order holds the same records, oldest window first, so the
	// expired ones are found at its front.
	failing map[netip.Prefix]*list.Element
	order   list.List
	// overflowAt is when the overflow's allowance is whole again: each
	// failure of a client the full table has no room for moves it a
	// Failures'th of a second on (from now, if it is past), and such a
	// client is refused while it is more than a second away.
	overflowAt time.Time
	// overflowWarned is when the overflow's last warning was logged.
	overflowWarned time.Time
	// known are clients that authenticated, most recent first.
	known   map[netip.Prefix]*list.Element
	knownBy list.List
}

// record is one client's failures in its current window.
type record struct {
	client   netip.Prefix
	since    time.Time
	failures int
}

// New checks cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	if cfg.Failures < 0 || cfg.Window < 0 || cfg.Clients < 0 {
		return nil, fmt.Errorf("authlimit: Failures (%d), Window (%s) and Clients (%d) must not be negative; use 0 for the defaults", cfg.Failures, cfg.Window, cfg.Clients)
	}
	for i, p := range cfg.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("authlimit: TrustedProxies[%d] is not a valid network: give a CIDR such as 10.0.0.0/8", i)
		}
	}
	l := &Limiter{
		limit:   cmpOr(cfg.Failures, DefaultFailures),
		window:  cmpOr(cfg.Window, DefaultWindow),
		max:     cmpOr(cfg.Clients, DefaultClients),
		log:     cfg.Logger,
		now:     cfg.Now,
		trusted: cfg.TrustedProxies,
		failing: map[netip.Prefix]*list.Element{},
		known:   map[netip.Prefix]*list.Element{},
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.now == nil {
		l.now = time.Now
	}
	return l, nil
}

// MustNew is New for a Config known to be valid, such as the zero one.
func MustNew(cfg Config) *Limiter {
	l, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return l
}

func cmpOr[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// Client is the address r counts as coming from (ClientAddr with the
// Limiter's trusted proxies), for logs that name a client.
func (l *Limiter) Client(r *http.Request) string {
	return ClientAddr(r, l.trusted)
}

// CheckRequest is Check for the client r comes from (see Client).
func (l *Limiter) CheckRequest(r *http.Request, judge func() Outcome) (wait time.Duration) {
	return l.Check(l.Client(r), judge)
}

// Check runs judge for a request from remoteAddr (an http.Request's
// RemoteAddr) unless that client has failed too often, and counts what
// judge says. It returns zero when judge ran, or how long the client must
// wait when it did not.
//
// judge runs under the Limiter's lock, so the limit holds exactly even
// against guesses sent in parallel; it must be quick (a constant-time
// comparison of digests) and must not call the Limiter.
func (l *Limiter) Check(remoteAddr string, judge func() Outcome) (wait time.Duration) {
	client := ClientOf(remoteAddr)
	var warn func()
	defer func() {
		// Logged after the lock is released: a slow log writer must not
		// hold up every authentication.
		if warn != nil {
			warn()
		}
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()

	rec := l.lookup(client, now)
	overflow := false
	switch {
	case rec != nil:
		if rec.failures >= l.limit {
			return l.rest(rec, now)
		}
	case !l.roomFor(now) && l.known[client] == nil:
		overflow = true
		if wait := l.overflowWait(now); wait > 0 {
			return wait
		}
	}

	switch judge() {
	case Passed:
		l.remember(client)
	case Failed:
		l.forget(client)
		if rec == nil && !overflow && l.roomFor(now) {
			rec = &record{client: client, since: now}
			l.failing[client] = l.order.PushBack(rec)
		}
		if rec == nil {
			warn = l.overflowFailed(client, now)
			break
		}
		if rec.failures == 0 {
			rec.since = now
		}
		rec.failures++
		if rec.failures == l.limit {
			warn = l.warning(rec, now)
		}
	}
	return 0
}

// overflowWait is how long a client without a record must wait while
// the table is full: zero while the overflow has a failure to spare.
func (l *Limiter) overflowWait(now time.Time) time.Duration {
	// From now when overflowAt is past: its zero value is so far back that
	// the subtraction would saturate.
	return max(maxTime(l.overflowAt, now).Add(l.overflowStep()).Sub(now)-time.Second, 0)
}

// overflowStep is what one failure spends of the overflow's second.
func (l *Limiter) overflowStep() time.Duration {
	return time.Second / time.Duration(l.limit)
}

// overflowFailed spends one failure of the overflow, and returns the
// warning to log when that used it up and none was logged within the
// last window, so an attack that goes on is logged once a window.
func (l *Limiter) overflowFailed(client netip.Prefix, now time.Time) func() {
	l.overflowAt = maxTime(l.overflowAt, now).Add(l.overflowStep())
	if l.overflowWait(now) == 0 || (!l.overflowWarned.IsZero() && now.Sub(l.overflowWarned) < l.window) {
		return nil
	}
	l.overflowWarned = now
	tableFull := len(l.failing)
	return func() {
		l.log.Warn("too many failed authentications from client addresses beyond the full table of failing addresses: an address not in it that has not authenticated recently is refused for up to a second while the failures go on",
			"client", DisplayClient(client), "failures_per_second", l.limit, "table", tableFull, "retry_after", time.Second)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// lookup returns client's record, dropping it first when its window has
// passed.
func (l *Limiter) lookup(client netip.Prefix, now time.Time) *record {
	el := l.failing[client]
	if el == nil {
		return nil
	}
	rec := el.Value.(*record)
	if now.Sub(rec.since) >= l.window {
		l.order.Remove(el)
		delete(l.failing, client)
		return nil
	}
	return rec
}

// roomFor reports whether the table can take one more record, first
// removing the records whose windows have passed: they sit at the front,
// since records are added in the order their windows start and never move.
func (l *Limiter) roomFor(now time.Time) bool {
	for len(l.failing) >= l.max {
		el := l.order.Front()
		rec := el.Value.(*record)
		if now.Sub(rec.since) < l.window {
			return false
		}
		l.order.Remove(el)
		delete(l.failing, rec.client)
	}
	return true
}

// rest is how long rec's window still runs, at least a nanosecond.
func (l *Limiter) rest(rec *record, now time.Time) time.Duration {
	return max(rec.since.Add(l.window).Sub(now), 1)
}

// remember notes that client authenticated, dropping the least recent
// client when the list is full.
func (l *Limiter) remember(client netip.Prefix) {
	if el := l.known[client]; el != nil {
		l.knownBy.MoveToFront(el)
		return
	}
	if len(l.known) >= l.max {
		last := l.knownBy.Back()
		l.knownBy.Remove(last)
		delete(l.known, last.Value.(netip.Prefix))
	}
	l.known[client] = l.knownBy.PushFront(client)
}

// forget drops client from the clients that authenticated: one failure
// and it is judged like any other again.
func (l *Limiter) forget(client netip.Prefix) {
	if el := l.known[client]; el != nil {
		l.knownBy.Remove(el)
		delete(l.known, client)
	}
}

// warning is the one log line of a burst: the moment a client reaches
// the limit. The refusals that follow are not logged, so a guessing loop
// cannot flood the log.
func (l *Limiter) warning(rec *record, now time.Time) func() {
	retry := l.rest(rec, now).Round(time.Second)
	return func() {
		l.log.Warn("too many failed authentications from one client address: it is refused on every authenticated route until the window ends",
			"client", DisplayClient(rec.client), "failures", rec.failures, "retry_after", retry)
	}
}

// Remembered is how many client addresses the Limiter holds a record of:
// those with failures in a running window plus those that authenticated.
// It never exceeds twice Config.Clients.
func (l *Limiter) Remembered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.failing) + len(l.known)
}

// ClientOf is the client an http.Request's RemoteAddr counts as: an IPv4
// address itself, an IPv6 address its /64. An address that does not parse
// (a Unix socket, a test's made-up value) is the zero Prefix, one client
// for all of them.
func ClientOf(remoteAddr string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remoteAddr)
	var addr netip.Addr
	if err == nil {
		addr = ap.Addr()
	} else if a, err := netip.ParseAddr(remoteAddr); err == nil {
		addr = a
	} else {
		return netip.Prefix{}
	}
	addr = addr.Unmap().WithZone("")
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, err := addr.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// DisplayClient is a client (from ClientOf) as logged: an IPv4 address
// without its /32, an IPv6 block as its /64.
func DisplayClient(p netip.Prefix) string {
	switch {
	case !p.IsValid():
		return "unknown"
	case p.Addr().Is4():
		return p.Addr().String()
	}
	return p.String()
}

// RetryAfter is the value of a Retry-After header for a wait: whole
// seconds, rounded up, at least 1.
func RetryAfter(wait time.Duration) string {
	s := math.Ceil(wait.Seconds())
	return strconv.Itoa(max(int(s), 1))
}
