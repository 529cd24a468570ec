package e2etest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/api/apiwire"
)

// TestServer runs a real `hymical serve` through the helper: its built-in
// http transport delivers to a receiver on loopback, which verifies what
// arrives with the secret CreateEndpoint returned, and SIGTERM stops it
// cleanly. A server that cannot start is reported with its own words.
func TestServer(t *testing.T) {
	t.Parallel()
	hymical, err := BuildHymical(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("delivers and stops", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var got []JSONLLine
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			// Kept as the plugins' lines are, so CheckSeqDelivered
			// reads both.
			body := string(b)
			l := JSONLLine{DeliveryID: r.Header.Get(webhook.HeaderID), Body: &body}
			for name, vs := range r.Header {
				for _, v := range vs {
					l.Headers = append(l.Headers, struct {
						Name  string `json:"name"`
						Value string `json:"value"`
					}{name, v})
				}
			}
			mu.Lock()
			got = append(got, l)
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(recv.Close)
		srv := StartServer(t, ServerOptions{
			Hymical: hymical,
			Flags:   []string{"--webhook.allowed_networks=127.0.0.0/8", "--worker.poll_interval=20ms"},
		})
		ep := srv.CreateEndpoint(fmt.Sprintf(`{"url":%q,"form_ids":["form_e2e"]}`, recv.URL+"/hook"))
		subs := srv.SubmitSeq("form_e2e", 3)
		delivered := srv.WaitDelivered(subs)
		mu.Lock()
		lines := got
		mu.Unlock()
		CheckSeqDelivered(t, lines, ep.Secret, subs, delivered)
		if err := srv.Stop(30 * time.Second); err != nil {
			t.Fatalf("after SIGTERM: %v\n%s", err, srv.Output())
		}
		if strings.Contains(srv.Output(), srv.Token) {
			t.Error("the admin token appeared in the server's output")
		}
	})

	t.Run("a server that does not start says why", func(t *testing.T) {
		t.Parallel()
		s, err := startServer(t, t.TempDir(), ServerOptions{Hymical: hymical, Flags: []string{"--worker.max_attempts=-1"}})
		if s != nil {
			defer s.kill()
		}
		if err == nil || !strings.Contains(err.Error(), "stopped before it listened") || !strings.Contains(err.Error(), "max_attempts") {
			t.Fatalf("startServer with a bad setting: %v; want it to say serve stopped, with serve's words on the setting", err)
		}
	})
}

// fatalRecorder is a testing.TB whose failures are recorded; Fatal ends
// the goroutine as testing's does, so run the check in one of its own.
type fatalRecorder struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Fatal(args ...any) {
	r.Errorf("%s", fmt.Sprint(args...))
	runtime.Goexit()
}

// recordFailures runs check with a fatalRecorder and returns what failed.
func recordFailures(t *testing.T, check func(testing.TB)) []string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r.failed
}

// TestCheckSeqDelivered holds the check to what a receiver must refuse:
// each case breaks one rule in lines that are otherwise right.
func TestCheckSeqDelivered(t *testing.T) {
	t.Parallel()
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	subs := make([]apiwire.IngestResult, n)
	for i := range subs {
		subs[i] = apiwire.IngestResult{SubmissionID: fmt.Sprintf("sub_%d", i), Deliveries: []string{fmt.Sprintf("dlv_%d", i)}}
	}
	// line signs submission seq's event, carrying data, as delivery id.
	line := func(t *testing.T, id string, seq int, data SeqData) JSONLLine {
		t.Helper()
		raw, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		body, err := json.Marshal(webhook.Event{Type: webhook.EventSubmissionReceived, Submission: webhook.Submission{ID: subs[seq].SubmissionID, FormID: "form_1", Data: raw}})
		if err != nil {
			t.Fatal(err)
		}
		h, err := webhook.SignHeaders(id, time.Now(), body, secret)
		if err != nil {
			t.Fatal(err)
		}
		s := string(body)
		l := JSONLLine{DeliveryID: id, Attempt: 1, Body: &s}
		for name := range h {
			l.Headers = append(l.Headers, struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			}{name, h.Get(name)})
		}
		return l
	}
	good := func(t *testing.T, seq int) JSONLLine {
		return line(t, subs[seq].Deliveries[0], seq, SeqData{Seq: seq, Note: seqNote})
	}
	attempts := func(a ...int) map[string]apiwire.DeliveryDetail {
		m := map[string]apiwire.DeliveryDetail{}
		for i, n := range a {
			m[subs[i].Deliveries[0]] = apiwire.DeliveryDetail{Delivery: apiwire.Delivery{ID: subs[i].Deliveries[0], State: apiwire.StateDelivered, Attempts: n}}
		}
		return m
	}
	tests := []struct {
		name      string
		lines     func(t *testing.T) []JSONLLine
		delivered map[string]apiwire.DeliveryDetail
		says      string // empty: the check passes
	}{
		{
			name:      "one verified line per submission passes",
			lines:     func(t *testing.T) []JSONLLine { return []JSONLLine{good(t, 0), good(t, 2), good(t, 1)} },
			delivered: attempts(1, 1, 1),
		},
		{
			name:      "a line per attempt of a retried delivery passes",
			lines:     func(t *testing.T) []JSONLLine { return []JSONLLine{good(t, 0), good(t, 1), good(t, 1), good(t, 2)} },
			delivered: attempts(1, 2, 1),
		},
		{
			name:      "more lines than attempts fails",
			lines:     func(t *testing.T) []JSONLLine { return []JSONLLine{good(t, 0), good(t, 1), good(t, 1), good(t, 2)} },
			delivered: attempts(1, 1, 1),
			says:      "written twice",
		},
		{
			name:      "a missing submission fails",
			lines:     func(t *testing.T) []JSONLLine { return []JSONLLine{good(t, 0), good(t, 1)} },
			delivered: attempts(1, 1, 1),
			says:      "2 lines are distinct; want 3",
		},
		{
			name: "a signature that does not verify fails",
			lines: func(t *testing.T) []JSONLLine {
				l := good(t, 2)
				tampered := strings.Replace(*l.Body, `"seq":2`, `"seq":3`, 1)
				l.Body = &tampered
				return []JSONLLine{good(t, 0), good(t, 1), l}
			},
			delivered: attempts(1, 1, 1),
			says:      "does not verify",
		},
		{
			name: "a body that is not the one submitted fails",
			lines: func(t *testing.T) []JSONLLine {
				return []JSONLLine{good(t, 0), good(t, 1), line(t, subs[2].Deliveries[0], 2, SeqData{Seq: 2, Note: "<&> u"})}
			},
			delivered: attempts(1, 1, 1),
			says:      "want it as submitted",
		},
		{
			name: "a line under another delivery's id fails",
			lines: func(t *testing.T) []JSONLLine {
				return []JSONLLine{good(t, 0), good(t, 1), line(t, subs[1].Deliveries[0], 2, SeqData{Seq: 2, Note: seqNote})}
			},
			delivered: attempts(1, 1, 1),
			says:      "want its delivery dlv_2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lines := tt.lines(t)
			failed := recordFailures(t, func(tb testing.TB) { CheckSeqDelivered(tb, lines, secret, subs, tt.delivered) })
			switch {
			case tt.says == "" && len(failed) > 0:
				t.Fatalf("the check failed: %v", failed)
			case tt.says != "" && (len(failed) == 0 || !strings.Contains(strings.Join(failed, "\n"), tt.says)):
				t.Fatalf("the check said %v; want a failure saying %q", failed, tt.says)
			}
			for _, f := range failed {
				if strings.Contains(f, secret) {
					t.Errorf("a failure shows the secret: %s", f)
				}
			}
		})
	}
}
