package main

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/sdk/webhook"
)

// running is one receiver process's worth of serve on a loopback port.
type running struct {
	base string
	stop func()
}

func (r running) hookURL() string { return r.base + WebhookPath }

func start(t *testing.T, dbPath, secret string) running {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, dbPath, []string{secret}, slog.New(slog.NewTextHandler(logs, nil))) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			// Shutdown waits for connections that never sent a request;
			// the client's spare ones would hold it for seconds.
			http.DefaultClient.CloseIdleConnections()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
			if t.Failed() {
				t.Logf("receiver log:\n%s", logs)
			}
		})
	}
	t.Cleanup(stop)
	r := running{base: "http://" + ln.Addr().String(), stop: stop}
	// The listener queues connections until serve has opened the database
	// and is serving, so one answered request means it is ready.
	resp, err := http.Get(r.base + "/submissions")
	if err != nil {
		t.Fatalf("receiver did not come up: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("receiver did not come up: GET /submissions = %s", resp.Status)
	}
	return r
}

func newSecret(t *testing.T) string {
	t.Helper()
	s, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// deliver POSTs body signed as attempt of delivery deliveryID.
func deliver(t *testing.T, url, deliveryID string, body []byte, secret string) int {
	t.Helper()
	h, err := webhook.SignHeaders(deliveryID, time.Now(), body, secret)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// stored counts the rows the receiver's work wrote, for one submission or,
// with an empty id, for all.
func stored(t *testing.T, dbPath, subID string) int {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(dbPath))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM submissions WHERE ? = '' OR submission_id = ?`, subID, subID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func event(t *testing.T, subID string) []byte {
	t.Helper()
	b, err := sampleEvent(subID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTheSameDeliveryTwiceIsStoredOnce(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "receiver.db")
	secret := newSecret(t)
	r := start(t, db, secret)
	const sub = "sub_48984534f33749c49a88de2d59400dce"
	body := event(t, sub)

	if got := deliver(t, r.hookURL(), "dlv_1", body, secret); got != http.StatusNoContent {
		t.Fatalf("first delivery: %d, want 204", got)
	}
	// Two more attempts, each signed afresh: a retry after a lost answer,
	// then an operator's replay. Both keep the delivery id and the body.
	for range 2 {
		if got := deliver(t, r.hookURL(), "dlv_1", body, secret); got != http.StatusOK {
			t.Fatalf("repeat: %d, want 200", got)
		}
	}
	if n := stored(t, db, sub); n != 1 {
		t.Fatalf("the submission was stored %d times, want 1", n)
	}

	resp, err := http.Get(r.base + "/submissions")
	if err != nil {
		t.Fatal(err)
	}
	listing, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Count(string(listing), sub) != 1 || !strings.Contains(string(listing), "Ada Lovelace") {
		t.Fatalf("GET /submissions = %q, want the submission once", listing)
	}
}

func TestConcurrentDeliveriesAreStoredOnce(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "receiver.db")
	secret := newSecret(t)
	r := start(t, db, secret)

	subs := []string{newID("sub"), newID("sub"), newID("sub"), newID("sub")}
	const each = 8
	var mu sync.Mutex
	// Every submission's count exists before any sender runs: the senders
	// read the outer map, so it is not written while they do.
	statuses := map[string]map[int]int{}
	for _, sub := range subs {
		statuses[sub] = map[int]int{}
	}
	var wg sync.WaitGroup
	for _, sub := range subs {
		body := event(t, sub)
		for range each {
			wg.Go(func() {
				got := deliver(t, r.hookURL(), "dlv_"+sub[4:], body, secret)
				mu.Lock()
				statuses[sub][got]++
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	for _, sub := range subs {
		if s := statuses[sub]; s[http.StatusNoContent] != 1 || s[http.StatusOK] != each-1 {
			t.Errorf("%s: statuses %v, want one 204 and %d 200", sub, s, each-1)
		}
		if n := stored(t, db, sub); n != 1 {
			t.Errorf("%s stored %d times, want 1", sub, n)
		}
	}
	if n := stored(t, db, ""); n != len(subs) {
		t.Fatalf("%d rows, want %d", n, len(subs))
	}
}

func TestARestartedReceiverRemembers(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "receiver.db")
	secret := newSecret(t)
	sub := newID("sub")
	body := event(t, sub)

	first := start(t, db, secret)
	if got := deliver(t, first.hookURL(), "dlv_1", body, secret); got != http.StatusNoContent {
		t.Fatalf("first delivery: %d", got)
	}
	first.stop()

	second := start(t, db, secret)
	if got := deliver(t, second.hookURL(), "dlv_1", body, secret); got != http.StatusOK {
		t.Fatalf("after a restart the repeat got %d, want 200", got)
	}
	if n := stored(t, db, sub); n != 1 {
		t.Fatalf("stored %d times, want 1", n)
	}
}

func TestFailedWorkIsNotRecordedAndTheRetryStoresIt(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "receiver.db")
	secret := newSecret(t)
	r := start(t, dbPath, secret)
	sub := newID("sub")
	body := event(t, sub)

	// Break the work from outside, as a full disk or a bad migration would.
	admin, err := sql.Open("sqlite", sqliteDSN(dbPath))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	exec := func(q string) {
		t.Helper()
		if _, err := admin.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`ALTER TABLE submissions RENAME TO parked`)
	if got := deliver(t, r.hookURL(), "dlv_1", body, secret); got != http.StatusInternalServerError {
		t.Fatalf("delivery with the work failing: %d, want 500", got)
	}
	var recorded int
	if err := admin.QueryRowContext(t.Context(), `SELECT count(*) FROM `+webhook.DefaultDedupeTable).Scan(&recorded); err != nil || recorded != 0 {
		t.Fatalf("%d ids recorded (%v) after the work failed, want 0", recorded, err)
	}
	exec(`ALTER TABLE parked RENAME TO submissions`)
	if got := deliver(t, r.hookURL(), "dlv_1", body, secret); got != http.StatusNoContent {
		t.Fatalf("the retry: %d, want 204", got)
	}
	if n := stored(t, dbPath, sub); n != 1 {
		t.Fatalf("stored %d times, want 1", n)
	}
}

func TestAForgedDeliveryIsRefused(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "receiver.db")
	r := start(t, db, newSecret(t))
	if got := deliver(t, r.hookURL(), "dlv_1", event(t, newID("sub")), newSecret(t)); got != http.StatusUnauthorized {
		t.Fatalf("a delivery signed with another secret: %d, want 401", got)
	}
	if n := stored(t, db, ""); n != 0 {
		t.Fatalf("%d rows stored from a forged delivery", n)
	}
}

// The README's manual try: `receiver send` against a running receiver.
func TestTheSendCommand(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "receiver.db")
	secret := newSecret(t)
	r := start(t, db, secret)
	env := func(k string) string {
		if k == SecretEnv {
			return secret
		}
		return ""
	}
	var out, errOut bytes.Buffer
	sub := newID("sub")
	if err := run(t.Context(), []string{"send", "-url", r.hookURL(), "-times", "3", "-submission", sub}, env, &out, &errOut); err != nil {
		t.Fatalf("send: %v\n%s", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "204") || !strings.Contains(lines[1], "200 OK (already processed)") || !strings.Contains(lines[2], "200") {
		t.Fatalf("send printed:\n%s", out.String())
	}
	if n := stored(t, db, sub); n != 1 {
		t.Fatalf("stored %d times, want 1", n)
	}
}

func TestServeNeedsTheSecret(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"serve", "-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "r.db")}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), SecretEnv) {
		t.Fatalf("serve without a secret = %v, want an error naming %s", err, SecretEnv)
	}
	err = run(t.Context(), []string{"serve", "-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "r.db")}, func(string) string { return "whsec_%%%" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "base64") || strings.Contains(err.Error(), "%%%") {
		t.Fatalf("serve with a bad secret = %v, want an error that does not repeat it", err)
	}
}
