package postgres_test

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/hymical/hymical/storage"
)

// openAway opens a Store on db through a TCP relay on loopback that cut
// tears down: every relayed connection is reset and the relay's port stops
// listening, which is what a Store sees of a server that stopped or of a
// network that failed. The shared test server itself is never touched.
func openAway(t *testing.T, db *database) (storage.Store, func()) {
	t.Helper()
	u, err := url.Parse(db.dsn)
	if err != nil || u.Host == "" {
		t.Fatalf("the test DSN must be a postgres:// URL with a host to relay to: %v", err)
	}
	r := newRelay(t, u.Host)
	u.Host = r.ln.Addr().String()
	d := &database{dsn: u.String(), pool: db.pool}
	return d.openStore(t), r.cut
}

// relay copies bytes between its clients and target until cut.
type relay struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []*net.TCPConn
	done   bool
}

func newRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target}
	go r.serve()
	t.Cleanup(r.cut)
	return r
}

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // cut
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		if !r.track(c.(*net.TCPConn), up.(*net.TCPConn)) {
			return
		}
		go pipe(c, up)
		go pipe(up, c)
	}
}

// track keeps the pair so cut can reset it, or closes it if cut already ran.
func (r *relay) track(a, b *net.TCPConn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		a.Close()
		b.Close()
		return false
	}
	r.conns = append(r.conns, a, b)
	return true
}

func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		src.Close()
	}
	dst.Close()
}

// cut stops listening and resets every relayed connection (SO_LINGER 0
// sends RST, as a killed server's kernel does).
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	r.ln.Close()
	for _, c := range r.conns {
		_ = c.SetLinger(0)
		c.Close()
	}
}
