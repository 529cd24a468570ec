package webhook_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// submissionBody is a payload shaped the way the server writes it.
func submissionBody(id string) []byte {
	return []byte(`{"type":"submission.received","submission":{"id":"` + id +
		`","form_id":"form_contact","data":{"name":"Ada Lovelace","email":"ada@example.com"},"created_at":"2026-03-01T12:00:00.123Z"}}`)
}

// recorder is a handler func that counts and keeps what it was given.
type recorder struct {
	mu     sync.Mutex
	events []webhook.Event
	fail   atomic.Int32 // fail this many calls, then succeed
}

func (r *recorder) handle(_ context.Context, ev webhook.Event) error {
	if r.fail.Load() > 0 {
		r.fail.Add(-1)
		return errors.New("downstream is down: password=hunter2")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// logBuffer collects a handler's log, written from its goroutines while
// the test reads it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// receiver is a Handler served over real HTTP on loopback.
type receiver struct {
	url    string
	secret string
	rec    *recorder
	logs   *logBuffer
}

func newReceiver(t *testing.T, opts ...webhook.HandlerOption) *receiver {
	t.Helper()
	r := &receiver{secret: mustSecret(t), rec: &recorder{}, logs: &logBuffer{}}
	d, err := webhook.NewMemoryDeduper(webhook.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h, err := webhook.NewHandler(mustVerifier(t, []string{r.secret}), d, r.rec.handle, append([]webhook.HandlerOption{webhook.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// post sends body with headers and returns the status and response text.
func post(t *testing.T, url string, h http.Header, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(text)
}

func signed(t *testing.T, msgID string, ts time.Time, body []byte, secrets ...string) http.Header {
	t.Helper()
	h, err := webhook.SignHeaders(msgID, ts, body, secrets...)
	if err != nil {
		t.Fatalf("SignHeaders: %v", err)
	}
	return h
}

func TestHandlerProcessesASubmissionOnce(t *testing.T) {
	t.Parallel()
	r := newReceiver(t)
	body := submissionBody(subID)
	ts := time.Now()
	h := signed(t, "dlv_0001", ts, body, r.secret)

	if status, text := post(t, r.url, h, body); status != http.StatusNoContent {
		t.Fatalf("first delivery: %d %q, want 204", status, text)
	}
	if r.rec.count() != 1 {
		t.Fatalf("handler ran %d times, want 1", r.rec.count())
	}
	ev := r.rec.events[0]
	if ev.Type != webhook.EventSubmissionReceived || ev.Submission.ID != subID || ev.Submission.FormID != "form_contact" {
		t.Errorf("event = %+v", ev)
	}
	if !ev.Submission.CreatedAt.Equal(time.Date(2026, 3, 1, 12, 0, 0, 123e6, time.UTC)) {
		t.Errorf("created_at = %s", ev.Submission.CreatedAt)
	}
	var data map[string]string
	if err := json.Unmarshal(ev.Submission.Data, &data); err != nil || data["email"] != "ada@example.com" {
		t.Errorf("data = %s (%v)", ev.Submission.Data, err)
	}
	if ev.MessageID != "dlv_0001" || ev.Timestamp.Unix() != ts.Unix() || !bytes.Equal(ev.Raw, body) {
		t.Errorf("message id %q, timestamp %s, raw %q", ev.MessageID, ev.Timestamp, ev.Raw)
	}

	redeliveries := []struct {
		name    string
		headers http.Header
	}{
		{"the same request again", h},
		{"a later attempt, signed anew", signed(t, "dlv_0001", ts.Add(30*time.Second), body, r.secret)},
		{"a replay from another delivery of the submission", signed(t, "dlv_0002", ts.Add(time.Minute), body, r.secret)},
	}
	for _, rd := range redeliveries {
		status, text := post(t, r.url, rd.headers, body)
		if status != http.StatusOK {
			t.Errorf("%s: %d %q, want 200", rd.name, status, text)
		}
	}
	if r.rec.count() != 1 {
		t.Fatalf("after redeliveries the handler ran %d times, want 1", r.rec.count())
	}
}

func TestHandlerConcurrentDeliveriesRunOnce(t *testing.T) {
	t.Parallel()
	r := newReceiver(t)
	body := submissionBody(subID)
	h := signed(t, "dlv_0001", time.Now(), body, r.secret)
	const n = 25
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			status, _ := post(t, r.url, h, body)
			statuses <- status
		})
	}
	wg.Wait()
	close(statuses)
	got := map[int]int{}
	for s := range statuses {
		got[s]++
	}
	if got[http.StatusNoContent] != 1 || got[http.StatusOK] != n-1 {
		t.Fatalf("statuses %v, want one 204 and %d 200", got, n-1)
	}
	if r.rec.count() != 1 {
		t.Fatalf("handler ran %d times, want 1", r.rec.count())
	}
}

func TestHandlerFailureIsRetriedAndNotRecorded(t *testing.T) {
	t.Parallel()
	r := newReceiver(t)
	r.rec.fail.Store(1)
	body := submissionBody(subID)
	h := signed(t, "dlv_0001", time.Now(), body, r.secret)

	status, text := post(t, r.url, h, body)
	if status != http.StatusInternalServerError {
		t.Fatalf("failing handler: %d %q, want 500", status, text)
	}
	if strings.Contains(text, "hunter2") || strings.Contains(text, "downstream") {
		t.Errorf("the 500 response echoes the handler's error: %q", text)
	}
	if !strings.Contains(r.logs.String(), "downstream is down") {
		t.Errorf("the handler's error is not logged:\n%s", r.logs)
	}
	// The sender retries; the id was not recorded, so the work runs now.
	if status, text := post(t, r.url, h, body); status != http.StatusNoContent {
		t.Fatalf("retry: %d %q, want 204", status, text)
	}
	if status, _ := post(t, r.url, h, body); status != http.StatusOK {
		t.Fatalf("after success: %d, want 200", status)
	}
	if r.rec.count() != 1 {
		t.Fatalf("handler succeeded %d times, want 1", r.rec.count())
	}
}

func TestHandlerRefusals(t *testing.T) {
	t.Parallel()
	const limit = 2048
	r := newReceiver(t, webhook.WithMaxBodyBytes(limit))
	now := time.Now()
	good := submissionBody(subID)
	goodH := signed(t, "dlv_1", now, good, r.secret)
	goodSig := goodH.Get(webhook.HeaderSignature)

	// A valid event padded to exactly the limit, and one byte more.
	pad := func(n int) []byte {
		base := `{"type":"submission.received","submission":{"id":"sub_big","data":{"x":""}}}`
		return []byte(strings.Replace(base, `"x":""`, `"x":"`+strings.Repeat("a", n-len(base))+`"`, 1))
	}
	atLimit, overLimit := pad(limit), pad(limit+1)

	without := func(name string) http.Header {
		h := goodH.Clone()
		h.Del(name)
		return h
	}
	cases := []struct {
		name   string
		method string
		header http.Header
		body   []byte
		status int
		says   string
		runs   bool
	}{
		{name: "a body at the limit is accepted", header: signed(t, "dlv_2", now, atLimit, r.secret), body: atLimit, status: http.StatusNoContent, runs: true},
		{name: "a body over the limit", header: signed(t, "dlv_3", now, overLimit, r.secret), body: overLimit, status: http.StatusRequestEntityTooLarge, says: "larger than 2048 bytes"},
		{name: "an altered body", header: goodH, body: bytes.Replace(good, []byte("Ada"), []byte("Eve"), 1), status: http.StatusUnauthorized, says: "no matching signature"},
		{name: "signed with another secret", header: signed(t, "dlv_1", now, good, mustSecret(t)), body: good, status: http.StatusUnauthorized, says: "no matching signature"},
		{name: "no signature header", header: without(webhook.HeaderSignature), body: good, status: http.StatusUnauthorized, says: "missing webhook-signature header"},
		{name: "no id header", header: without(webhook.HeaderID), body: good, status: http.StatusUnauthorized, says: "missing webhook-id header"},
		{name: "a stale timestamp", header: signed(t, "dlv_1", now.Add(-time.Hour), good, r.secret), body: good, status: http.StatusUnauthorized, says: "outside the tolerance"},
		{name: "a malformed timestamp", header: func() http.Header {
			h := goodH.Clone()
			h.Set(webhook.HeaderTimestamp, "+"+strconv.FormatInt(now.Unix(), 10))
			return h
		}(), body: good, status: http.StatusUnauthorized, says: "malformed webhook-timestamp"},
		{name: "signed but not JSON", header: signed(t, "dlv_4", now, []byte("name=Ada"), r.secret), body: []byte("name=Ada"), status: http.StatusBadRequest, says: "not a JSON event"},
		{name: "signed but without a submission id", header: signed(t, "dlv_5", now, []byte(`{"type":"submission.received","submission":{}}`), r.secret), body: []byte(`{"type":"submission.received","submission":{}}`), status: http.StatusBadRequest, says: "submission.id"},
		{name: "another event type is acknowledged, not handled", header: signed(t, "dlv_6", now, []byte(`{"type":"form.deleted","form":{"id":"form_1"}}`), r.secret), body: []byte(`{"type":"form.deleted","form":{"id":"form_1"}}`), status: http.StatusNoContent},
		{name: "a GET", method: http.MethodGet, header: goodH, status: http.StatusMethodNotAllowed},
	}
	// Run in order: the one accepted case must be the only handler run.
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := r.rec.count()
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req, err := http.NewRequestWithContext(t.Context(), method, r.url, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, vs := range tc.header {
				req.Header[k] = vs
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			text, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d %q, want %d", resp.StatusCode, text, tc.status)
			}
			if !strings.Contains(string(text), tc.says) {
				t.Errorf("response %q does not say %q", text, tc.says)
			}
			if ran := r.rec.count() > before; ran != tc.runs {
				t.Errorf("handler ran: %v, want %v", ran, tc.runs)
			}
			for _, leak := range []string{r.secret, strings.TrimPrefix(r.secret, "whsec_"), strings.TrimPrefix(goodSig, "v1,")} {
				if strings.Contains(string(text), leak) {
					t.Errorf("response %q leaks %q", text, leak)
				}
			}
		})
	}
	logs := r.logs.String()
	for _, leak := range []string{r.secret, strings.TrimPrefix(r.secret, "whsec_"), strings.TrimPrefix(goodSig, "v1,"), "ada@example.com"} {
		if strings.Contains(logs, leak) {
			t.Errorf("the log leaks %q:\n%s", leak, logs)
		}
	}
}

func TestNewHandlerRefuses(t *testing.T) {
	t.Parallel()
	v := mustVerifier(t, []string{mustSecret(t)})
	d, err := webhook.NewMemoryDeduper(webhook.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fn := func(context.Context, webhook.Event) error { return nil }
	cases := []struct {
		name string
		make func() (*webhook.Handler, error)
		says string
	}{
		{"no verifier", func() (*webhook.Handler, error) { return webhook.NewHandler(nil, d, fn) }, "verifier is nil"},
		{"no deduper", func() (*webhook.Handler, error) { return webhook.NewHandler(v, nil, fn) }, "deduper is nil"},
		{"no func", func() (*webhook.Handler, error) { return webhook.NewHandler(v, d, nil) }, "func is nil"},
		{"no SQL deduper", func() (*webhook.Handler, error) {
			return webhook.NewTxHandler(v, nil, func(context.Context, *sql.Tx, webhook.Event) error { return nil })
		}, "deduper is nil"},
		{"zero body limit", func() (*webhook.Handler, error) { return webhook.NewHandler(v, d, fn, webhook.WithMaxBodyBytes(0)) }, "must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := tc.make(); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want one saying %q", err, tc.says)
			}
		})
	}
}
