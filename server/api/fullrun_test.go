package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/worker"
)

// receiver is a real HTTP server on loopback that records what it gets and
// answers what the test says.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	status int
	got    []received
}

type received struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, status int) *receiver {
	rc := &receiver{status: status}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{header: r.Header.Clone(), body: body})
		status := rc.status
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) answer(status int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.status = status
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// runPool runs a real worker pool over the fixture's store, sending through
// the real http plugin, until the test ends.
func (f *fixture) runPool() {
	f.t.Helper()
	pool, err := worker.New(f.store, loopbackHost, worker.Config{
		Concurrency: 2, BatchSize: 2, Lease: 8 * time.Second, SendTimeout: 3 * time.Second,
		PollInterval: 20 * time.Millisecond, MaxCycleAttempts: 5,
		Retry: worker.RetrySchedule{Delays: []time.Duration{50 * time.Millisecond}},
	}, quietLogger())
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("pool.Run: %v", err)
		}
	})
}

// waitState polls the delivery through the API until it is in state.
func (f *fixture) waitState(id, state string) response {
	f.t.Helper()
	var r response
	testwait.For(f.t, 20*time.Second, func() error {
		r = f.admin("GET", "/v1/deliveries/"+id, nil).must(f.t, http.StatusOK)
		if r.str("state") != state {
			return fmt.Errorf("delivery never became %s: %s", state, r.raw)
		}
		return nil
	})
	return r
}

// TestFullRun drives one delivery through its whole life over the API:
// register, submit, fail at the receiver, replay once the receiver is
// fixed, delivered, and the history says so; then a secret rotation, after
// which a receiver holding either secret can verify.
func TestFullRun(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		recv := newReceiver(t, http.StatusBadRequest)
		epID, secret := f.createEndpoint(map[string]any{"url": recv.URL + "/hook", "form_ids": []string{"contact"}})
		f.runPool()

		sub := f.submit("contact", map[string]any{"email": "a@example.com"}).must(t, http.StatusAccepted)
		id := ids(sub, "deliveries")[0]

		failed := f.waitState(id, "failed")
		if failed.body["attempts"] != 1.0 || failed.body["cycle_attempts"] != 1.0 || failed.str("completed_at") == "" {
			t.Fatalf("failed delivery: %s", failed.raw)
		}

		recv.answer(http.StatusOK)
		f.send(req{method: "POST", path: "/v1/deliveries/" + id + "/replay", token: adminToken,
			header: map[string]string{"Hymical-Operator": "on-call"}}).must(t, http.StatusOK)
		done := f.waitState(id, "delivered")
		if done.body["attempts"] != 2.0 || done.body["cycle_attempts"] != 1.0 || done.str("endpoint_id") != epID {
			t.Fatalf("after replay: attempts %v cycle_attempts %v, want 2 and 1: %s", done.body["attempts"], done.body["cycle_attempts"], done.raw)
		}

		as := f.admin("GET", "/v1/deliveries/"+id+"/attempts", nil).must(t, http.StatusOK).list("attempts")
		var history []string
		for _, v := range as {
			a := v.(map[string]any)
			history = append(history, strings.Join([]string{
				a["outcome"].(string), jsonNum(a["http_status"]), jsonNum(a["number"]), jsonBool(a["late"]),
			}, " "))
		}
		if strings.Join(history, ", ") != "permanent 400 1 on-time, delivered 200 2 on-time" {
			t.Fatalf("attempt history = %v", history)
		}
		if detail := done.list("attempt_history"); len(detail) != 2 {
			t.Fatalf("GET delivery shows %d attempts, want 2", len(detail))
		}
		rs := f.admin("GET", "/v1/deliveries/"+id+"/replays", nil).must(t, http.StatusOK).list("replays")
		if len(rs) != 1 || rs[0].(map[string]any)["actor"] != "api:on-call" || rs[0].(map[string]any)["previous_state"] != "failed" {
			t.Fatalf("replay audit: %v", rs)
		}

		reqs := recv.requests()
		if len(reqs) != 2 {
			t.Fatalf("receiver got %d requests, want 2", len(reqs))
		}
		for i, r := range reqs {
			if err := webhook.Verify(r.header, r.body, secret); err != nil {
				t.Fatalf("request %d does not verify with the secret the API showed: %v", i+1, err)
			}
			if r.header.Get("webhook-id") != id || !strings.Contains(string(r.body), sub.str("submission_id")) {
				t.Fatalf("request %d: webhook-id %q, body %s", i+1, r.header.Get("webhook-id"), r.body)
			}
		}
		if string(reqs[0].body) != string(reqs[1].body) {
			t.Fatal("the replay sent different bytes")
		}

		t.Run("after rotate-secret both secrets verify", func(t *testing.T) {
			next := f.admin("POST", "/v1/endpoints/"+epID+"/rotate-secret", nil).must(t, http.StatusOK).str("secret")
			sub := f.submit("contact", map[string]any{"email": "b@example.com"}).must(t, http.StatusAccepted)
			f.waitState(ids(sub, "deliveries")[0], "delivered")
			reqs := recv.requests()
			last := reqs[len(reqs)-1]
			for name, s := range map[string]string{"old": secret, "new": next} {
				if err := webhook.Verify(last.header, last.body, s); err != nil {
					t.Fatalf("a receiver holding only the %s secret cannot verify during the grace: %v", name, err)
				}
			}
		})
	})
}

func jsonNum(v any) string {
	f, ok := v.(float64)
	if !ok {
		return "null"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

func jsonBool(v any) string {
	if v == true {
		return "late"
	}
	return "on-time"
}

// TestSubmittedDataArrivesByteForByte submits objects written in many ways
// over HTTP and checks that the receiver, behind the real http plugin, gets
// each one's bytes in submission.data (and in event.data for POST
// /v1/events) exactly as they were sent, and that the message verifies.
func TestSubmittedDataArrivesByteForByte(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		recv := newReceiver(t, http.StatusOK)
		_, secret := f.createEndpoint(map[string]any{"url": recv.URL + "/hook"})
		f.runPool()

		bodies := []string{
			`{"comment":"<b>Tom & Jerry</b>"}`,
			"{ \"a\" : [1, 2,\n  3],\t\"b\":{} }",
			`{"e":"\u00e9\n\"\/","emoji":"😀","raw":"é"}`,
			`{"n":1.0E+2,"m":-0.000,"big":123456789012345678901234567890}`,
			`{"z":1,"a":2,"m":3}`,
		}
		want := map[string]string{} // delivery id → data as sent
		for _, body := range bodies {
			sub := f.send(req{method: "POST", path: "/v1/forms/contact/submissions", token: ingestKey, body: body}).must(t, http.StatusAccepted)
			want[ids(sub, "deliveries")[0]] = body
			ev := f.send(req{method: "POST", path: "/v1/events", token: ingestKey,
				body: `{"type":"form.updated","payload":` + body + `}`}).must(t, http.StatusAccepted)
			want[ids(ev, "deliveries")[0]] = body
		}
		for id := range want {
			f.waitState(id, "delivered")
		}
		reqs := recv.requests()
		if len(reqs) != len(want) {
			t.Fatalf("receiver got %d requests, want %d", len(reqs), len(want))
		}
		for _, r := range reqs {
			if err := webhook.Verify(r.header, r.body, secret); err != nil {
				t.Fatalf("a delivery does not verify: %v", err)
			}
			var got struct {
				Submission *struct{ Data json.RawMessage } `json:"submission"`
				Event      *struct{ Data json.RawMessage } `json:"event"`
			}
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatalf("body %s: %v", r.body, err)
			}
			var data json.RawMessage
			switch {
			case got.Submission != nil:
				data = got.Submission.Data
			case got.Event != nil:
				data = got.Event.Data
			}
			sent := want[r.header.Get("webhook-id")]
			if stored := f.payload(r.header.Get("webhook-id")); !bytes.Equal(stored, r.body) {
				t.Errorf("GET …/payload differs from the body that was signed and sent:\n got %s\nsent %s", stored, r.body)
			}
			if string(data) != sent {
				t.Errorf("delivered data differs from what was sent:\n got %s\nsent %s", data, sent)
			}
		}
	})
}
