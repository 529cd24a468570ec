package connlimit_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/server/connlimit"
)

// What a held connection does while the newcomer arrives.
const (
	fresh = "fresh" // opened, never sent a request
	idle  = "idle"  // answered once, kept alive
	busy  = "busy"  // a request in progress
)

type held struct {
	from, does string
}

// TestListenerKeepsToItsLimits runs a real http.Server on a real loopback
// listener: the held connections are opened in order, oldest first, then
// a newcomer asks for a page. Addresses are 127.0.0.x, which Linux routes
// to the loopback interface, so each x is a client of its own.
func TestListenerKeepsToItsLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		max, perAddr  int
		hold          []held
		newcomer      string
		wantServed    bool
		wantClosed    []int // indexes into hold: closed to make room
		wantRefused   connlimit.Limit
		wantEvictedBy connlimit.Limit
	}{
		{
			name: "a newcomer under both limits is served and closes nothing",
			max:  4, perAddr: 2,
			hold:       []held{{"127.0.0.2", fresh}, {"127.0.0.3", idle}},
			newcomer:   "127.0.0.4",
			wantServed: true,
		},
		{
			name: "one address over its limit loses its own oldest idle connection, not another's",
			max:  8, perAddr: 3,
			hold:       []held{{"127.0.0.3", idle}, {"127.0.0.2", fresh}, {"127.0.0.2", idle}, {"127.0.0.2", idle}},
			newcomer:   "127.0.0.2",
			wantServed: true, wantClosed: []int{2}, wantEvictedBy: connlimit.LimitAddress,
		},
		{
			name: "one address at its limit with connections that never sent a request is refused",
			max:  8, perAddr: 2,
			hold:        []held{{"127.0.0.2", fresh}, {"127.0.0.2", fresh}},
			newcomer:    "127.0.0.2",
			wantRefused: connlimit.LimitAddress,
		},
		{
			name: "at the total limit an address holding its share is refused rather than push out another's",
			max:  4, perAddr: 4,
			hold:        []held{{"127.0.0.2", fresh}, {"127.0.0.3", fresh}, {"127.0.0.2", fresh}, {"127.0.0.3", fresh}},
			newcomer:    "127.0.0.2",
			wantRefused: connlimit.LimitTotal,
		},
		{
			name: "at the total limit a newcomer pushes out a connection of the address holding most, not a lone client's",
			max:  4, perAddr: 4,
			hold:       []held{{"127.0.0.3", fresh}, {"127.0.0.2", fresh}, {"127.0.0.2", fresh}, {"127.0.0.2", fresh}},
			newcomer:   "127.0.0.4",
			wantServed: true, wantClosed: []int{1}, wantEvictedBy: connlimit.LimitTotal,
		},
		{
			name: "one address whose connections are all busy is refused while others are served",
			max:  8, perAddr: 2,
			hold:        []held{{"127.0.0.3", idle}, {"127.0.0.2", busy}, {"127.0.0.2", busy}},
			newcomer:    "127.0.0.2",
			wantRefused: connlimit.LimitAddress,
		},
		{
			name: "at the total limit a connection that never sent a request makes room before an idle one",
			max:  3, perAddr: 3,
			hold:       []held{{"127.0.0.2", idle}, {"127.0.0.3", fresh}, {"127.0.0.4", fresh}},
			newcomer:   "127.0.0.5",
			wantServed: true, wantClosed: []int{1}, wantEvictedBy: connlimit.LimitTotal,
		},
		{
			name: "at the total limit the connection idle longest makes room when none is fresh",
			max:  3, perAddr: 3,
			hold:       []held{{"127.0.0.2", busy}, {"127.0.0.3", idle}, {"127.0.0.4", idle}},
			newcomer:   "127.0.0.5",
			wantServed: true, wantClosed: []int{1}, wantEvictedBy: connlimit.LimitTotal,
		},
		{
			name: "at the total limit with every connection busy the newcomer is refused",
			max:  2, perAddr: 2,
			hold:        []held{{"127.0.0.2", busy}, {"127.0.0.3", busy}},
			newcomer:    "127.0.0.4",
			wantRefused: connlimit.LimitTotal,
		},
		{
			name: "loopback's own address is a client like any other",
			max:  8, perAddr: 1,
			hold:        []held{{"127.0.0.1", busy}},
			newcomer:    "127.0.0.1",
			wantRefused: connlimit.LimitAddress,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var (
				mu               sync.Mutex
				refused, evicted []connlimit.Limit
			)
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ln := connlimit.New(inner, connlimit.Config{
				Max: tt.max, MaxPerAddress: tt.perAddr,
				Refused: func(l connlimit.Limit) { mu.Lock(); refused = append(refused, l); mu.Unlock() },
				Evicted: func(l connlimit.Limit) { mu.Lock(); evicted = append(evicted, l); mu.Unlock() },
				Logger:  slog.New(slog.DiscardHandler),
			})
			release, started := make(chan struct{}), make(chan struct{}, len(tt.hold))
			mux := http.NewServeMux()
			mux.HandleFunc("/fast", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
			mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
				started <- struct{}{}
				<-release
				io.WriteString(w, "ok")
			})
			srv := &http.Server{Handler: mux, ConnState: ln.ConnState, ReadHeaderTimeout: time.Minute}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { srv.Close() })
			var once sync.Once
			unblock := func() { once.Do(func() { close(release) }) }
			t.Cleanup(unblock)
			addr := inner.Addr().String()

			conns := make([]*client, len(tt.hold))
			for i, h := range tt.hold {
				conns[i] = dial(t, h.from, addr)
				switch h.does {
				case fresh:
					wantWaiting(t, ln, i+1, countOf(tt.hold[:i+1], fresh), countOf(tt.hold[:i+1], idle))
				case idle:
					if got := conns[i].get(t, "/fast"); got != "ok" {
						t.Fatalf("held connection %d: %q", i, got)
					}
					wantWaiting(t, ln, i+1, countOf(tt.hold[:i+1], fresh), countOf(tt.hold[:i+1], idle))
				case busy:
					conns[i].send(t, "/block")
					<-started
				}
			}

			newcomer := dial(t, tt.newcomer, addr)
			newcomer.send(t, "/fast")
			body, err := newcomer.read()
			if served := err == nil && body == "ok"; served != tt.wantServed {
				t.Errorf("newcomer served = %v (%q, %v), want %v", served, body, err, tt.wantServed)
			}
			if n := ln.Open(); n > tt.max {
				t.Errorf("%d connections open, over the limit of %d", n, tt.max)
			}

			// Every held connection is either closed, or still served.
			unblock()
			for i, c := range conns {
				wantClosed := false
				for _, j := range tt.wantClosed {
					wantClosed = wantClosed || i == j
				}
				var got string
				var err error
				switch tt.hold[i].does {
				case busy:
					got, err = c.read()
				default:
					if err = c.trySend("/fast"); err == nil {
						got, err = c.read()
					}
				}
				if open := err == nil && got == "ok"; open == wantClosed {
					t.Errorf("held connection %d (%s from %s): served=%v (%q, %v), want closed=%v", i, tt.hold[i].does, tt.hold[i].from, open, got, err, wantClosed)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if tt.wantRefused != "" && (len(refused) != 1 || refused[0] != tt.wantRefused) {
				t.Errorf("refused %v, want one by %s", refused, tt.wantRefused)
			}
			if tt.wantRefused == "" && len(refused) > 0 {
				t.Errorf("refused %v, want none", refused)
			}
			if want := len(tt.wantClosed); len(evicted) != want || (want > 0 && evicted[0] != tt.wantEvictedBy) {
				t.Errorf("evicted %v, want %d by %s", evicted, want, tt.wantEvictedBy)
			}
		})
	}
}

func countOf(hold []held, does string) int {
	n := 0
	for _, h := range hold {
		if h.does == does {
			n++
		}
	}
	return n
}

// wantWaiting waits until the listener has accepted open connections, of
// which fresh and idle are waiting, so the next one is younger.
func wantWaiting(t *testing.T, ln *connlimit.Listener, open, fresh, idle int) {
	t.Helper()
	testwait.For(t, 10*time.Second, func() error {
		f, i := ln.Waiting()
		if n := ln.Open(); n != open || f != fresh || i != idle {
			return fmt.Errorf("%d open, %d fresh, %d idle; want %d, %d, %d", n, f, i, open, fresh, idle)
		}
		return nil
	})
}

// client is one raw TCP connection speaking HTTP/1.1.
type client struct {
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, from, to string) *client {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := d.Dial("tcp", to)
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { conn.Close() })
	// A bound on a broken test, not a measurement.
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return &client{conn: conn, r: bufio.NewReader(conn)}
}

func (c *client) trySend(path string) error {
	_, err := fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: hymical.test\r\n\r\n", path)
	return err
}

func (c *client) send(t *testing.T, path string) {
	t.Helper()
	if err := c.trySend(path); err != nil {
		t.Fatal(err)
	}
}

// read reads one response and returns its body; an error when the
// server closed the connection instead.
func (c *client) read() (string, error) {
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func (c *client) get(t *testing.T, path string) string {
	t.Helper()
	c.send(t, path)
	body, err := c.read()
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func TestDefaultsKeepAReserve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fdLimit              uint64
		wantMax, wantPerAddr int
	}{
		{fdLimit: 2048, wantMax: 2048 - 128 - 256, wantPerAddr: 256},
		{fdLimit: 1024, wantMax: 1024 - 128 - 128, wantPerAddr: 192},
		{fdLimit: 0, wantMax: 1024 - 128 - 128, wantPerAddr: 192}, // unknown: the common soft limit
		{fdLimit: 256, wantMax: 256 - 128 - 32, wantPerAddr: 24},
		{fdLimit: 100, wantMax: 16, wantPerAddr: 4}, // too few to keep the reserve: a floor
		{fdLimit: 1 << 20, wantMax: connlimit.DefaultMaxCeiling, wantPerAddr: connlimit.DefaultPerAddressCeiling},
		{fdLimit: ^uint64(0), wantMax: connlimit.DefaultMaxCeiling, wantPerAddr: connlimit.DefaultPerAddressCeiling},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.fdLimit), func(t *testing.T) {
			t.Parallel()
			gotMax, gotPer := connlimit.Defaults(tt.fdLimit)
			if gotMax != tt.wantMax || gotPer != tt.wantPerAddr {
				t.Errorf("Defaults(%d) = %d, %d; want %d, %d", tt.fdLimit, gotMax, gotPer, tt.wantMax, tt.wantPerAddr)
			}
		})
	}
}

func TestLimitsResolveTheConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                 string
		max, perAddr         int
		fdLimit              uint64
		wantMax, wantPerAddr int
		wantWarning          string
	}{
		{name: "both from the descriptor limit", fdLimit: 2048, wantMax: 1664, wantPerAddr: 256},
		{name: "a total set, the address share from it", max: 100, fdLimit: 2048, wantMax: 100, wantPerAddr: 25},
		{name: "both set", max: 100, perAddr: 100, fdLimit: 2048, wantMax: 100, wantPerAddr: 100},
		{name: "a total the descriptors cannot hold", max: 5000, fdLimit: 2048, wantMax: 5000, wantPerAddr: 256,
			wantWarning: "server.max_connections is 5000, but the descriptor limit of 2048 leaves room for 1664 connections"},
		{name: "a share over the derived total", perAddr: 2000, fdLimit: 2048, wantMax: 1664, wantPerAddr: 1664,
			wantWarning: "server.max_connections_per_address is 2000, more than the 1664 connections allowed in all"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gotMax, gotPer, warnings := connlimit.Limits(tt.max, tt.perAddr, tt.fdLimit)
			if gotMax != tt.wantMax || gotPer != tt.wantPerAddr {
				t.Errorf("Limits = %d, %d; want %d, %d", gotMax, gotPer, tt.wantMax, tt.wantPerAddr)
			}
			switch {
			case tt.wantWarning == "" && len(warnings) > 0:
				t.Errorf("warnings %q, want none", warnings)
			case tt.wantWarning != "" && (len(warnings) != 1 || !strings.HasPrefix(warnings[0], tt.wantWarning)):
				t.Errorf("warnings %q, want one beginning %q", warnings, tt.wantWarning)
			}
		})
	}
}
