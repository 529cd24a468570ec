package plugincheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hymical/hymical/sdk/transport"
)

// target is where the checked plugin sends: the endpoints the check uses
// and what arrived at each.
type target interface {
	// settings are the plugin-wide settings the target needs.
	settings() map[string]string
	// good is an endpoint the plugin must accept and deliver to.
	good() transport.Endpoint
	// refused is one it must refuse before sending anything.
	refused() transport.Endpoint
	// hanging is one that takes the message and never answers.
	hanging() transport.Endpoint
	// arrived is what reached the good endpoint.
	arrived() ([]arrival, error)
	// refusedArrivals counts what reached the refused one, which must be
	// nothing; hangArrivals what reached the hanging one.
	refusedArrivals() int
	hangArrivals() int
	refusedName() string
	// releaseHang lets what the hanging endpoint holds go, before the
	// plugin is stopped: a plugin blocked on it must still be able to
	// exit when asked (a Node process does not exit while a thread of its
	// pool is stuck in a system call).
	releaseHang()
	close()
}

// httpTarget runs receivers on loopback: the good one and the hanging one
// on 127.0.0.1, which the plugin's guard is told to allow, and the refused
// one on 127.0.0.2, which it is not, so a plugin that ignores its guard
// is caught sending there rather than to any other machine.
type httpTarget struct {
	okRecv, badRecv *receiver
	release         chan struct{}
	releaseOnce     sync.Once
}

func newHTTPTarget() (*httpTarget, error) {
	t := &httpTarget{release: make(chan struct{})}
	var err error
	if t.okRecv, err = listen("127.0.0.1:0", t.release); err != nil {
		return nil, err
	}
	if t.badRecv, err = listen("127.0.0.2:0", t.release); err != nil {
		t.okRecv.close()
		return nil, fmt.Errorf("a receiver on 127.0.0.2, outside the network the plugin is allowed: %w", err)
	}
	return t, nil
}

func (t *httpTarget) settings() map[string]string {
	return map[string]string{"allowed_networks": "127.0.0.1/32"}
}

func (t *httpTarget) good() transport.Endpoint {
	return transport.Endpoint{URL: "http://" + t.okRecv.addr + "/ok"}
}

func (t *httpTarget) refused() transport.Endpoint {
	return transport.Endpoint{URL: "http://" + t.badRecv.addr + "/ok"}
}

func (t *httpTarget) hanging() transport.Endpoint {
	return transport.Endpoint{URL: "http://" + t.okRecv.addr + "/hang"}
}

func (t *httpTarget) arrived() ([]arrival, error) { return t.okRecv.at("/ok"), nil }
func (t *httpTarget) refusedArrivals() int        { return len(t.badRecv.at("")) }
func (t *httpTarget) hangArrivals() int           { return len(t.okRecv.at("/hang")) }
func (t *httpTarget) refusedName() string {
	return "http://" + t.badRecv.addr + " (loopback, not allowed)"
}

func (t *httpTarget) releaseHang() { t.releaseOnce.Do(func() { close(t.release) }) }

func (t *httpTarget) close() {
	t.releaseHang()
	t.okRecv.close()
	t.badRecv.close()
}

// receiver is an HTTP server that keeps every request it gets. A request
// to /hang is held until the check ends or the client gives up.
type receiver struct {
	addr    string
	srv     *http.Server
	release <-chan struct{}
	mu      sync.Mutex
	got     map[string][]arrival // by path
}

func listen(addr string, release <-chan struct{}) (*receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &receiver{addr: ln.Addr().String(), release: release, got: map[string][]arrival{}}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	headers := map[string]string{}
	for k, v := range req.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	r.mu.Lock()
	r.got[req.URL.Path] = append(r.got[req.URL.Path], arrival{headers: headers, body: body})
	r.mu.Unlock()
	if req.URL.Path == "/hang" {
		select {
		case <-req.Context().Done():
		case <-r.release:
		}
		return
	}
	w.WriteHeader(http.StatusOK)
}

// at is what arrived at path; "" means anywhere.
func (r *receiver) at(path string) []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	if path != "" {
		return append([]arrival(nil), r.got[path]...)
	}
	var all []arrival
	for _, a := range r.got {
		all = append(all, a...)
	}
	return all
}

func (r *receiver) close() { _ = r.srv.Close() }

// jsonlTarget is a temporary directory: the plugin's root, a file in it to
// append to, a FIFO in it that nobody reads (an append to it blocks, as a
// receiver that hangs does), and a file outside it, which the plugin must
// refuse.
type jsonlTarget struct {
	dir, root string
	// reader is the FIFO's read end once releaseHang opened it.
	reader *os.File
}

func newJSONLTarget() (*jsonlTarget, error) {
	dir, err := os.MkdirTemp("", "hymical-plugin-check-")
	if err != nil {
		return nil, err
	}
	t := &jsonlTarget{dir: dir, root: filepath.Join(dir, "root")}
	for _, d := range []string{t.root, filepath.Join(dir, "outside")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.close()
			return nil, err
		}
	}
	if err := mkfifo(t.hangPath()); err != nil {
		t.close()
		return nil, fmt.Errorf("a FIFO to stand for a receiver that hangs: %w", err)
	}
	return t, nil
}

func (t *jsonlTarget) goodPath() string { return filepath.Join(t.root, "deliveries.jsonl") }
func (t *jsonlTarget) hangPath() string { return filepath.Join(t.root, "hang.jsonl") }
func (t *jsonlTarget) refusedPath() string {
	return filepath.Join(t.dir, "outside", "deliveries.jsonl")
}

func (t *jsonlTarget) settings() map[string]string { return map[string]string{"root": t.root} }

func (t *jsonlTarget) good() transport.Endpoint {
	return transport.Endpoint{Config: map[string]string{"path": t.goodPath()}}
}

func (t *jsonlTarget) refused() transport.Endpoint {
	return transport.Endpoint{Config: map[string]string{"path": t.refusedPath()}}
}

func (t *jsonlTarget) hanging() transport.Endpoint {
	return transport.Endpoint{Config: map[string]string{"path": t.hangPath()}}
}

func (t *jsonlTarget) refusedName() string { return t.refusedPath() + " (outside the root)" }

func (t *jsonlTarget) refusedArrivals() int {
	if _, err := os.Stat(t.refusedPath()); err == nil {
		return 1
	}
	return 0
}

// hangArrivals is 0: nothing can be read from a FIFO nobody opened for
// reading without taking what the plugin wrote.
func (t *jsonlTarget) hangArrivals() int { return 0 }

// jsonLine is a line as the example plugins write it.
type jsonLine struct {
	DeliveryID string `json:"delivery_id"`
	Headers    []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"headers"`
	Body       *string `json:"body"`
	BodyBase64 []byte  `json:"body_base64"`
}

func (t *jsonlTarget) arrived() ([]arrival, error) {
	f, err := os.Open(t.goodPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []arrival
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var l jsonLine
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("line %d of %s is not a JSON line with delivery_id, headers and body: %w", len(out)+1, t.goodPath(), err)
		}
		a := arrival{headers: map[string]string{}, body: l.BodyBase64}
		if l.Body != nil {
			a.body = []byte(*l.Body)
		}
		for _, h := range l.Headers {
			a.headers[strings.ToLower(h.Name)] = h.Value
		}
		out = append(out, a)
	}
	return out, sc.Err()
}

// releaseHang opens the FIFO for reading, which ends the wait of a writer
// blocked opening it; the read end stays open until close, so the writer's
// line has somewhere to go.
func (t *jsonlTarget) releaseHang() {
	if t.reader != nil {
		return
	}
	f, err := os.OpenFile(t.hangPath(), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err == nil {
		t.reader = f
	}
}

func (t *jsonlTarget) close() {
	if t.reader != nil {
		_ = t.reader.Close()
	}
	_ = os.RemoveAll(t.dir)
}
