//go:build fault

package faulttest

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// maxHold bounds how long the receiver keeps a request waiting while
// holding: well inside the 1 s read timeout, so a held request is answered,
// not timed out, unless the harness kills its sender first.
const maxHold = 700 * time.Millisecond

// receiver is the endpoint every delivery goes to: a real HTTP server on
// loopback that verifies each signature with sdk/webhook, logs every
// request it was sent, answers 200 or, now and then, 503, and on demand
// holds requests open so a fault can land while one is on the wire.
type receiver struct {
	srv  *httptest.Server
	port int

	mu       sync.Mutex
	secret   string
	rng      *rand.Rand
	failRate float64
	gate     chan struct{} // non-nil while holding; closed to release
	seq      int
	held     map[int]heldRequest
	log      []request
}

// request is one request as the receiver saw and answered it.
type request struct {
	deliveryID   string
	submissionID string
	// timestamp is webhook-timestamp: the attempt's start, in unix seconds.
	timestamp int64
	status    int
	verified  bool
	// arrived is when the request reached the receiver; at is when the
	// receiver answered it (the hung receiver never does: zero).
	arrived, at time.Time
}

type heldRequest struct {
	deliveryID string
	remotePort int
	since      time.Time
}

func newReceiver(seed uint64, failRate float64) *receiver {
	rc := &receiver{rng: rand.New(rand.NewPCG(seed, 8)), failRate: failRate, held: map[int]heldRequest{}}
	rc.srv = httptest.NewServer(rc)
	rc.port = rc.srv.Listener.Addr().(*net.TCPAddr).Port
	return rc
}

func (rc *receiver) setSecret(s string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.secret = s
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, _ := io.ReadAll(r.Body)
	var payload struct {
		Submission struct {
			ID string `json:"id"`
		} `json:"submission"`
	}
	_ = json.Unmarshal(body, &payload)
	ts, _ := strconv.ParseInt(r.Header.Get(webhook.HeaderTimestamp), 10, 64)
	_, port, _ := net.SplitHostPort(r.RemoteAddr)
	remotePort, _ := strconv.Atoi(port)

	rc.mu.Lock()
	verified := rc.secret != "" && webhook.Verify(r.Header, body, rc.secret) == nil
	gate := rc.gate
	rc.seq++
	id := rc.seq
	if gate != nil {
		rc.held[id] = heldRequest{deliveryID: r.Header.Get(webhook.HeaderID), remotePort: remotePort, since: time.Now()}
	}
	rc.mu.Unlock()

	if gate != nil {
		timer := time.NewTimer(maxHold)
		select {
		case <-gate:
		case <-timer.C:
		case <-r.Context().Done():
		}
		timer.Stop()
	}

	rc.mu.Lock()
	delete(rc.held, id)
	status := http.StatusOK
	if rc.rng.Float64() < rc.failRate {
		status = http.StatusServiceUnavailable
	}
	// Logged whether or not the sender is still there to read the
	// answer: the request reached the receiver either way.
	rc.log = append(rc.log, request{deliveryID: r.Header.Get(webhook.HeaderID), submissionID: payload.Submission.ID,
		timestamp: ts, status: status, verified: verified, arrived: arrived, at: time.Now()})
	rc.mu.Unlock()
	w.WriteHeader(status)
}

// hold makes every request from now on wait, up to maxHold, for release.
func (rc *receiver) hold() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.gate == nil {
		rc.gate = make(chan struct{})
	}
}

func (rc *receiver) release() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.gate != nil {
		close(rc.gate)
		rc.gate = nil
	}
}

// fresh lists the requests held for less than 300 ms: ones a fault can
// still land on before the receiver answers them by itself.
func (rc *receiver) fresh() []heldRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []heldRequest
	for _, h := range rc.held {
		if time.Since(h.since) < 300*time.Millisecond {
			out = append(out, h)
		}
	}
	return out
}

func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.log...)
}

func (rc *receiver) close() { rc.srv.Close() }

// heldFrom holds requests until one is on the wire from a plugin process
// that pick accepts, and returns that request, the plugin's pid and the
// server that runs it, still holding. The sender is found through the
// kernel: the request's client port is a socket that one plugin process
// has open.
func (h *harness) heldFrom(pick func(*server) bool) (heldRequest, int, *server) {
	h.t.Helper()
	h.recv.hold()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		plugins := h.pluginPIDs()
		for _, req := range h.recv.fresh() {
			inode, ok := socketInode(req.remotePort, h.recv.port)
			if !ok {
				continue
			}
			for pid, s := range plugins {
				if pick(s) && s.alive() && holdsSocket(pid, inode) {
					return req, pid, s
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.recv.release()
	h.t.Fatalf("no request from the chosen server reached the receiver within 20 s: is the submitter running?")
	return heldRequest{}, 0, nil
}

// hungReceiver is an endpoint that accepts every request, reads it, and
// never answers: each request stays open until its sender gives up (its
// read timeout) or the harness ends. It logs each request as it arrives,
// with status 0, no answer. With answerAfter set it is a slow receiver
// instead: it answers 204 that long after a request arrived, and logs the
// answer.
type hungReceiver struct {
	srv         *httptest.Server
	quit        chan struct{}
	answerAfter time.Duration

	mu   sync.Mutex
	open int
	log  []request
}

func newHungReceiver() *hungReceiver { return newSlowReceiver(0) }

// newSlowReceiver is a receiver that answers after answerAfter; zero means
// never.
func newSlowReceiver(answerAfter time.Duration) *hungReceiver {
	hr := &hungReceiver{quit: make(chan struct{}), answerAfter: answerAfter}
	hr.srv = httptest.NewServer(hr)
	return hr
}

func (hr *hungReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	var answer <-chan time.Time
	if hr.answerAfter > 0 {
		t := time.NewTimer(hr.answerAfter)
		defer t.Stop()
		answer = t.C
	}
	// Read the whole body, so the server notices the sender hanging up.
	body, _ := io.ReadAll(r.Body)
	var payload struct {
		Submission struct {
			ID string `json:"id"`
		} `json:"submission"`
	}
	_ = json.Unmarshal(body, &payload)
	ts, _ := strconv.ParseInt(r.Header.Get(webhook.HeaderTimestamp), 10, 64)
	hr.mu.Lock()
	hr.open++
	i := len(hr.log)
	hr.log = append(hr.log, request{deliveryID: r.Header.Get(webhook.HeaderID), submissionID: payload.Submission.ID,
		timestamp: ts, arrived: arrived})
	hr.mu.Unlock()
	select {
	case <-answer:
		w.WriteHeader(http.StatusNoContent)
		hr.mu.Lock()
		hr.log[i].status, hr.log[i].at = http.StatusNoContent, time.Now()
		hr.mu.Unlock()
	case <-r.Context().Done():
	case <-hr.quit:
	}
	hr.mu.Lock()
	hr.open--
	hr.mu.Unlock()
}

func (hr *hungReceiver) requests() []request {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	return append([]request(nil), hr.log...)
}

func (hr *hungReceiver) openRequests() int {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	return hr.open
}

// close lets every request still open go, then stops the server.
func (hr *hungReceiver) close() {
	close(hr.quit)
	hr.srv.Close()
}
