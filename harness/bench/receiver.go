package bench

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// receiver is the loopback webhook receiver every phase sends to. It
// verifies each signature, so a bench that sent unsigned or mis-signed
// requests would count failures instead of deliveries, and answers 204.
type receiver struct {
	srv *http.Server
	ln  net.Listener
	// verifier checks every path that byPath does not name; nil refuses
	// them.
	verifier *webhook.Verifier
	// byPath holds a verifier for each endpoint's path, for endpoints
	// whose secret the server made (the HTTP mode). It is replaced whole,
	// never changed in place.
	byPath atomic.Pointer[map[string]*webhook.Verifier]
	// arrivals, when set, records when each message arrived.
	arrivals atomic.Pointer[arrivals]
	ok       atomic.Int64
	bad      atomic.Int64
}

// arrivals is when each verified message first reached the receiver, by
// its webhook-id (the delivery id), and how many came again.
type arrivals struct {
	mu    sync.Mutex
	at    map[string]time.Time
	again int64
}

func (a *arrivals) add(id string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, seen := a.at[id]; seen {
		a.again++
		return
	}
	a.at[id] = at
}

// count is how many distinct messages have arrived.
func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at)
}

// startReceiver listens on a loopback port and serves until close. With
// no secrets, only the paths given to verifyPath are served.
func startReceiver(secrets []string) (*receiver, error) {
	var v *webhook.Verifier
	if len(secrets) > 0 {
		var err error
		if v, err = webhook.NewVerifier(secrets); err != nil {
			return nil, fmt.Errorf("receiver: %w", err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("receiver: listen on loopback: %w", err)
	}
	r := &receiver{ln: ln, verifier: v}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// ServeHTTP reads the body, checks the signature and counts.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	arrived := time.Now()
	v := r.verifier
	if byPath := r.byPath.Load(); byPath != nil {
		if pv, ok := (*byPath)[req.URL.Path]; ok {
			v = pv
		}
	}
	if v == nil {
		r.bad.Add(1)
		http.Error(w, "no endpoint at this path", http.StatusNotFound)
		return
	}
	var buf [4096]byte
	n, err := io.ReadFull(req.Body, buf[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		r.bad.Add(1)
		http.Error(w, "body too large or unreadable", http.StatusBadRequest)
		return
	}
	if err := v.Verify(req.Header, buf[:n]); err != nil {
		r.bad.Add(1)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	if a := r.arrivals.Load(); a != nil {
		a.add(req.Header.Get(webhook.HeaderID), arrived)
	}
	r.ok.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// url is where an endpoint numbered i sends.
func (r *receiver) url(i int) string {
	return fmt.Sprintf("http://%s%s", r.ln.Addr(), hookPath(i))
}

func hookPath(i int) string { return fmt.Sprintf("/hook/%d", i) }

// verifyPath checks what arrives for endpoint i with its own secret.
func (r *receiver) verifyPath(i int, secret string) error {
	return r.verifyPaths(map[int]string{i: secret})
}

// verifyPaths is verifyPath for many endpoints at once, by number: the
// map of paths is copied once, not once per endpoint, which at 100,000
// endpoints is the difference between a moment and minutes. Calls must
// not overlap (each copies the map the last one stored); requests being
// served meanwhile are fine.
func (r *receiver) verifyPaths(secrets map[int]string) error {
	next := map[string]*webhook.Verifier{}
	if old := r.byPath.Load(); old != nil {
		next = make(map[string]*webhook.Verifier, len(*old)+len(secrets))
		maps.Copy(next, *old)
	}
	for i, secret := range secrets {
		v, err := webhook.NewVerifier([]string{secret})
		if err != nil {
			return fmt.Errorf("receiver: the secret of endpoint %d: %w", i, err)
		}
		next[hookPath(i)] = v
	}
	r.byPath.Store(&next)
	return nil
}

// record starts recording arrivals afresh and returns where they go.
func (r *receiver) record(expected int) *arrivals {
	a := &arrivals{at: make(map[string]time.Time, expected)}
	r.arrivals.Store(a)
	return a
}

// reset zeroes the counters between phases.
func (r *receiver) reset() {
	r.ok.Store(0)
	r.bad.Store(0)
}

// close stops at once: every phase is over by then, and a graceful
// Shutdown would wait 5 s for the idle connections clients dialed but
// never used.
func (r *receiver) close() { _ = r.srv.Close() }
