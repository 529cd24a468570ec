package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// submitted is the answer one submission of the load got.
type submitted struct {
	status     int
	code       string
	retryAfter string
	id         string
}

// TestADatabaseAwayAnswers503AndLosesNothing stops a PostgreSQL cluster of
// the test's own (pg_ctl stop -m fast, then a SIGKILL of the postmaster)
// under about 50 submissions a second: every submission refused meanwhile
// is a 503 with Retry-After, none is a 500, the other routes and /readyz
// say the database is away, and once it is back every submission that got
// a 2xx reaches the receiver.
func TestADatabaseAwayAnswers503AndLosesNothing(t *testing.T) {
	t.Parallel()
	cluster := pgtest.StartCluster(t)
	store, err := postgres.Open(t.Context(), cluster.DSN())
	if err != nil {
		t.Fatal(err)
	}
	migrate(t, store)
	f := newFixtureOn(t, store, nil, nil)
	rc := newReceiver(t, http.StatusOK)
	endpointID, _ := f.createEndpoint(map[string]any{"url": rc.URL})
	f.runPool()

	var (
		mu      sync.Mutex
		answers []submitted
		wg      sync.WaitGroup
	)
	client := &http.Client{Timeout: 30 * time.Second}
	post := func(n int) {
		defer wg.Done()
		body := fmt.Sprintf(`{"n":%d}`, n)
		r, err := http.NewRequest("POST", f.srv.URL+"/v1/forms/contact/submissions", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		r.Header.Set("Authorization", "Bearer "+ingestKey)
		r.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(r)
		if err != nil {
			t.Errorf("submission %d: %v", n, err)
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var v struct {
			SubmissionID string `json:"submission_id"`
			Error        struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(raw, &v)
		mu.Lock()
		answers = append(answers, submitted{status: resp.StatusCode, code: v.Error.Code, retryAfter: resp.Header.Get("Retry-After"), id: v.SubmissionID})
		mu.Unlock()
	}
	// The load: one submission every 20 ms, each on its own, so a slow
	// answer does not slow the rate, until stop is closed.
	stop := make(chan struct{})
	loadDone := make(chan struct{})
	var stopOnce sync.Once
	stopLoad := func() {
		stopOnce.Do(func() { close(stop) })
		<-loadDone
		wg.Wait()
	}
	// Registered after the fixture's, so it runs before the server closes
	// when the test fails part way.
	t.Cleanup(stopLoad)
	go func() {
		defer close(loadDone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				wg.Add(1)
				go post(n)
			}
		}
	}()
	// refusedSince counts every refusal, whatever its status; which
	// status each got is checked once the load is over.
	refusedSince := func(from int) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range answers[from:] {
			if a.status/100 != 2 {
				n++
			}
		}
		return n
	}
	seen := func() int { mu.Lock(); defer mu.Unlock(); return len(answers) }
	accepted := func(from int) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range answers[from:] {
			if a.status/100 == 2 {
				n++
			}
		}
		return n
	}
	// away checks, while the database is away, that submissions are
	// refused and that the other routes and /readyz say so.
	away := func(how string) {
		t.Helper()
		from := seen()
		testwait.For(t, 30*time.Second, func() error {
			if refusedSince(from) < 25 {
				return fmt.Errorf("after %s: fewer than 25 submissions refused yet", how)
			}
			return nil
		})
		// Every route that reaches the store (ingest is the load itself).
		dlv := "/v1/deliveries/dlv_00000000000000000000000000000000"
		for _, route := range []req{
			{method: "POST", path: "/v1/events", token: ingestKey, body: map[string]any{"type": "order.paid", "payload": map[string]any{"n": 1}}},
			{method: "POST", path: "/v1/endpoints", token: adminToken, body: map[string]any{"url": rc.URL}},
			{method: "GET", path: "/v1/endpoints", token: adminToken},
			{method: "GET", path: "/v1/endpoints/" + endpointID, token: adminToken},
			{method: "PATCH", path: "/v1/endpoints/" + endpointID, token: adminToken, body: map[string]any{"event_types": []string{}}},
			{method: "DELETE", path: "/v1/endpoints/" + endpointID, token: adminToken},
			{method: "POST", path: "/v1/endpoints/" + endpointID + "/disable", token: adminToken},
			{method: "POST", path: "/v1/endpoints/" + endpointID + "/enable", token: adminToken},
			{method: "POST", path: "/v1/endpoints/" + endpointID + "/rotate-secret", token: adminToken},
			{method: "POST", path: "/v1/endpoints/" + endpointID + "/test", token: adminToken},
			{method: "GET", path: "/v1/deliveries", token: adminToken},
			{method: "POST", path: "/v1/deliveries/replay", token: adminToken, body: map[string]any{"state": "failed"}},
			{method: "GET", path: dlv, token: adminToken},
			{method: "GET", path: dlv + "/attempts", token: adminToken},
			{method: "GET", path: dlv + "/payload", token: adminToken},
			{method: "POST", path: dlv + "/replay", token: adminToken},
			{method: "GET", path: dlv + "/replays", token: adminToken},
		} {
			r := f.send(route)
			if code, _ := r.errorCode(t); r.status != http.StatusServiceUnavailable || code != "storage_unavailable" || r.header.Get("Retry-After") == "" {
				t.Errorf("after %s: %s %s answered %d %s, Retry-After %q; want 503 storage_unavailable with Retry-After",
					how, route.method, route.path, r.status, code, r.header.Get("Retry-After"))
			}
		}
		r := f.send(req{method: "GET", path: "/readyz"})
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.raw), "not reachable") {
			t.Errorf("after %s: /readyz answered %d %s, want 503 saying the database is not reachable", how, r.status, r.raw)
		}
	}
	back := func(how string) {
		t.Helper()
		from := seen()
		testwait.For(t, 60*time.Second, func() error {
			if accepted(from) < 25 {
				return fmt.Errorf("after %s: fewer than 25 submissions accepted yet", how)
			}
			return nil
		})
	}

	back("start")
	cluster.Stop("fast")
	away("pg_ctl stop -m fast")
	cluster.Start()
	back("a restart after the stop")
	cluster.Kill()
	away("SIGKILL of the postmaster")
	cluster.Start()
	back("a restart after the kill")
	stopLoad()

	var ids []string
	counts := map[string]int{}
	for _, a := range answers {
		switch {
		case a.status/100 == 2:
			ids = append(ids, a.id)
			counts["2xx"]++
		case a.status == http.StatusServiceUnavailable && a.retryAfter != "" && (a.code == "storage_unavailable" || a.code == "timeout"):
			counts["503 "+a.code]++
		default:
			counts[fmt.Sprintf("wrong: %d %s, Retry-After %q", a.status, a.code, a.retryAfter)]++
		}
	}
	t.Logf("%d submissions: %v", len(answers), counts)
	for kind, n := range counts {
		if strings.HasPrefix(kind, "wrong: ") {
			t.Errorf("%d submissions answered %s; want 2xx, or 503 storage_unavailable or timeout with Retry-After", n, strings.TrimPrefix(kind, "wrong: "))
		}
	}

	testwait.For(t, 90*time.Second, func() error {
		got := map[string]bool{}
		for _, r := range rc.requests() {
			var v struct {
				Submission struct {
					ID string `json:"id"`
				} `json:"submission"`
			}
			if err := json.Unmarshal(r.body, &v); err == nil {
				got[v.Submission.ID] = true
			}
		}
		var missing []string
		for _, id := range ids {
			if !got[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d of %d accepted submissions not delivered yet, e.g. %s", len(missing), len(ids), missing[0])
		}
		return nil
	})
}
