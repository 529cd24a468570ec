package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// receiver is the loopback webhook receiver every phase sends to. It
// verifies each signature, so a bench that sent unsigned or mis-signed
// requests would count failures instead of deliveries, and answers 204.
type receiver struct {
	srv      *http.Server
	ln       net.Listener
	verifier *webhook.Verifier
	ok       atomic.Int64
	bad      atomic.Int64
}

// startReceiver listens on a loopback port and serves until close.
func startReceiver(secrets []string) (*receiver, error) {
	v, err := webhook.NewVerifier(secrets)
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
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
	var buf [4096]byte
	n, err := io.ReadFull(req.Body, buf[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		r.bad.Add(1)
		http.Error(w, "body too large or unreadable", http.StatusBadRequest)
		return
	}
	if err := r.verifier.Verify(req.Header, buf[:n]); err != nil {
		r.bad.Add(1)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	r.ok.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// url is where an endpoint numbered i sends.
func (r *receiver) url(i int) string {
	return fmt.Sprintf("http://%s/hook/%d", r.ln.Addr(), i)
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
