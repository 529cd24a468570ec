//go:build fault

package faulttest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the harness's own raw reads

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

const (
	// leaseSeconds is the shortest lease the configuration accepts with
	// 1 s connect and 1 s read timeouts (it must exceed 1 + 1 + 2).
	leaseSeconds = 5
	lease        = leaseSeconds * time.Second
	maxAttempts  = 10
	adminToken   = "faulttest-admin-token-0123456789abcdef"
	// backendBudget bounds one backend's whole run, so a hang fails the
	// test instead of holding it.
	backendBudget = 5 * time.Minute
	// submitEvery paces the submitter: a steady backlog, so a request is
	// always on the wire when a fault is due.
	submitEvery = 40 * time.Millisecond
	// failRate is how often the receiver answers 503, so retries are part
	// of every run.
	failRate = 0.1
	// sendTimeout is the servers' send deadline (connect + read + the 2 s
	// plugin margin): a request cut off by a fault started at most this
	// long before it.
	sendTimeout = 4 * time.Second
)

// TestFault runs the fault scenarios on PostgreSQL (two servers) and on
// SQLite (one server), and fails unless each run's ledger balances.
func TestFault(t *testing.T) {
	work := t.TempDir()
	bin, plugin := filepath.Join(work, "hymical"), filepath.Join(work, "hymical-plugin-http")
	build(t, bin, "../..")
	build(t, plugin, "../../plugins/http")

	var ledgers []*ledger
	t.Run("postgres", func(t *testing.T) {
		ledgers = append(ledgers, runPostgres(t, newHarness(t, "postgres", work, bin, plugin)))
	})
	t.Run("sqlite", func(t *testing.T) {
		ledgers = append(ledgers, runSQLite(t, newHarness(t, "sqlite", work, bin, plugin)))
	})

	if len(ledgers) == 2 {
		total := &ledger{backend: "total"}
		for _, l := range ledgers {
			total.add(l)
		}
		t.Logf("FAULT LEDGER %s", total)
	}
}

func build(t *testing.T, out, pkg string) {
	t.Helper()
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// harness is one backend's run: its processes, its receiver, what it
// submitted and what it did to them.
type harness struct {
	t       *testing.T
	ctx     context.Context
	backend string
	bin     string
	plugin  string
	work    string
	dbURL   string
	recv    *receiver
	// store and db are the harness's own view of the database.
	store storage.Store
	db    *sql.DB

	mu      sync.Mutex
	servers map[string]*server
	runs    int
	subs    []submission
	faults  []fault
	counts  faultCounts
	start   time.Time
	outage  outage
	hang    hang
	// pace is the submitter's interval: submitEvery, and awaySubmitEvery
	// while the plugin is away.
	pace atomic.Int64
}

type faultCounts struct {
	serverKills, pluginKills, pgRestarts, pauses, outages int
}

// fault is one thing done to a process or the database, the delivery
// whose request was on the wire then (when there was one), and the window
// in which a request may have gone out without its answer being recorded.
type fault struct {
	what       string
	deliveryID string
	from, to   time.Time
	// killed is when a process that may have had a send in hand was
	// killed (zero for other faults): an attempt started before then, or
	// within killGrace after, whose request never arrived is explained.
	killed time.Time
}

// killGrace is how long after a plugin's SIGKILL its host may still hand
// it a send (it has not seen the process exit yet) that then counts as an
// attempt, since it may have gone out.
const killGrace = 250 * time.Millisecond

func (h *harness) logf(format string, args ...any) {
	h.t.Helper()
	h.t.Logf("%s +%5.1fs  %s", h.backend, time.Since(h.start).Seconds(), fmt.Sprintf(format, args...))
}

func newHarness(t *testing.T, backend, work, bin, plugin string) *harness {
	ctx, cancel := context.WithTimeout(t.Context(), backendBudget)
	t.Cleanup(cancel)
	dir := filepath.Join(work, backend)
	h := &harness{t: t, ctx: ctx, backend: backend, bin: bin, plugin: plugin, work: dir,
		recv: newReceiver(uint64(time.Now().UnixNano()), failRate), servers: map[string]*server{}, start: time.Now()}
	h.pace.Store(int64(submitEvery))
	t.Cleanup(h.recv.close)
	return h
}

func runPostgres(t *testing.T, h *harness) *ledger {
	pg := startCluster(t)
	h.dbURL = pg.DSN()
	if out, err := exec.Command(h.bin, "migrate", "--database", h.dbURL).CombinedOutput(); err != nil {
		t.Fatalf("hymical migrate: %v\n%s", err, out)
	}
	h.open("pgx", h.dbURL)
	h.startServer("S1")
	h.startServer("S2")
	h.createEndpoint()
	stop := h.submitter()
	h.wait(2 * time.Second)

	h.killServerMidSend("S1")
	h.wait(1500 * time.Millisecond)
	h.killPluginMidSend()
	h.wait(1500 * time.Millisecond)
	h.restartPostgres(pg)
	h.wait(2 * time.Second)
	h.freezePastLease("S2")
	h.wait(time.Second)
	h.freezePastLease("S1")
	h.wait(time.Second)
	h.killServerMidSend("S2")
	h.wait(2 * time.Second)
	h.pluginOutage()
	h.hangBeside()

	stop()
	return h.finish()
}

func runSQLite(t *testing.T, h *harness) *ledger {
	path := filepath.Join(h.work, "hymical.db")
	h.dbURL = "sqlite:" + path
	h.startServer("S1") // the embedded default migrates its own file
	h.open("sqlite", path)
	h.createEndpoint()
	stop := h.submitter()
	h.wait(2 * time.Second)

	h.killServerMidSend("S1")
	h.wait(2 * time.Second)
	h.killPluginMidSend()
	h.wait(2 * time.Second)
	h.killServerMidSend("S1")
	h.wait(2 * time.Second)
	h.pluginOutage()
	h.hangBeside()

	stop()
	return h.finish()
}

// open opens the harness's own view of the database: the Store the ledger
// is read through, and a raw connection for what the Store API does not
// show (claim tokens).
func (h *harness) open(driver, dsn string) {
	h.t.Helper()
	store, err := database.Open(h.ctx, h.dbURL)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { store.Close() })
	db, err := sql.Open(driver, dsn)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { db.Close() })
	h.store, h.db = store, db
}

func (h *harness) wait(d time.Duration) {
	select {
	case <-time.After(d):
	case <-h.ctx.Done():
		h.t.Fatalf("the run outlasted its budget of %s", backendBudget)
	}
}

// api sends one request to a server's API with the admin token.
func (h *harness) api(ctx context.Context, s *server, method, path, key string, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	// Short: a frozen server must not stall the submitter.
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// createEndpoint registers the receiver, for form "fault", through the API
// and hands it the one-time secret to verify with.
func (h *harness) createEndpoint() {
	h.t.Helper()
	status, raw, err := h.api(h.ctx, h.usableServers()[0], http.MethodPost, "/v1/endpoints", "",
		fmt.Sprintf(`{"url":%q,"form_ids":["fault"],"description":"fault harness receiver"}`, h.recv.srv.URL+"/hook"))
	if err != nil || status != http.StatusCreated {
		h.t.Fatalf("create the endpoint: %d %s %v", status, raw, err)
	}
	var ep apiwire.EndpointCreated
	if err := json.Unmarshal(raw, &ep); err != nil || ep.Secret == "" {
		h.t.Fatalf("endpoint answer without a secret: %s", raw)
	}
	h.recv.setSecret(ep.Secret)
}

// submission is one form submission the API accepted.
type submission struct {
	key, submissionID, deliveryID string
	// at is when the API accepted it.
	at time.Time
}

// submitter submits one submission every h.pace until stop is called. A
// submission already under way when stop is called is seen through, so
// every event the API made is one the harness knows about. A test that
// fails before calling stop stops it in its cleanup.
func (h *harness) submitter() func() {
	quit := make(chan struct{})
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(h.ctx)
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			if !h.submit(ctx, i) {
				return
			}
			select {
			case <-quit:
				return
			case <-time.After(time.Duration(h.pace.Load())):
			}
		}
	}()
	var once sync.Once
	halt := func() {
		once.Do(func() {
			close(quit)
			<-done
		})
	}
	h.t.Cleanup(func() {
		cancel() // a failed test does not wait for a submission under way
		halt()
	})
	return func() {
		halt()
		h.mu.Lock()
		n := len(h.subs)
		h.mu.Unlock()
		h.logf("submitter stopped after %d submissions", n)
	}
}

// submit makes submission i to form "fault", the healthy endpoint's.
func (h *harness) submit(ctx context.Context, i int) bool {
	sub, ok := h.post(ctx, i, "fault", fmt.Sprintf("fault-%s-%d", h.backend, i), fmt.Sprintf(`{"n":%d,"email":"n%d@example.com"}`, i, i))
	if ok {
		h.mu.Lock()
		h.subs = append(h.subs, sub)
		h.mu.Unlock()
	}
	return ok
}

// post sends submission i to whichever server can take it, again with the
// same Idempotency-Key until an answer comes back: through a server's
// death or a database restart the submission is made once, never twice.
func (h *harness) post(ctx context.Context, i int, form, key, body string) (submission, bool) {
	deadline := time.Now().Add(90 * time.Second)
	for try := 0; ; try++ {
		if servers := h.usableServers(); len(servers) > 0 {
			s := servers[(i+try)%len(servers)]
			status, raw, err := h.api(ctx, s, http.MethodPost, "/v1/forms/"+form+"/submissions", key, body)
			switch {
			case err != nil || status >= 500:
				// The server or its database is away: try again.
			case status == http.StatusAccepted || status == http.StatusOK:
				var res apiwire.IngestResult
				if err := json.Unmarshal(raw, &res); err != nil || len(res.Deliveries) != 1 || res.SubmissionID == "" {
					h.t.Errorf("submission %s: answer %d %s, want one delivery", key, status, raw)
					return submission{}, false
				}
				return submission{key: key, submissionID: res.SubmissionID, deliveryID: res.Deliveries[0], at: time.Now()}, true
			default:
				h.t.Errorf("submission %s refused: %d %s", key, status, raw)
				return submission{}, false
			}
		}
		if ctx.Err() != nil {
			return submission{}, false
		}
		if time.Now().After(deadline) {
			h.t.Errorf("submission %s was not accepted within 90 s", key)
			return submission{}, false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// noteFault records a fault that began at began and whose effects on
// in-flight requests were over by now plus a second.
func (h *harness) noteFault(what, deliveryID string, began time.Time) {
	h.addFault(fault{what: what, deliveryID: deliveryID, from: began.Add(-sendTimeout), to: time.Now().Add(time.Second)})
}

// noteKill is noteFault for a kill, at began, of a process that may have
// had a send in hand.
func (h *harness) noteKill(what, deliveryID string, began time.Time) {
	h.addFault(fault{what: what, deliveryID: deliveryID, from: began.Add(-sendTimeout), to: time.Now().Add(time.Second), killed: began})
}

func (h *harness) addFault(f fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, f)
}

// killServerMidSend SIGKILLs a server while its plugin has a request on
// the wire, then starts a new process in its place. The request is
// answered to a plugin nobody listens to any more; the claim is recovered
// when its lease runs out, and the delivery is sent again.
func (h *harness) killServerMidSend(name string) {
	h.t.Helper()
	s := h.server(name)
	req, _, _ := h.heldFrom(func(x *server) bool { return x == s })
	began := time.Now()
	s.kill()
	h.recv.release()
	h.mu.Lock()
	h.counts.serverKills++
	h.mu.Unlock()
	h.noteKill("SIGKILL of "+name+" mid-send", req.deliveryID, began)
	h.logf("SIGKILLed %s (run %d) while its request for %s was on the wire", name, s.run, req.deliveryID)
	h.startServer(name)
}

// killPluginMidSend SIGKILLs a plugin process while it has a request on
// the wire. Its host reports the send as retryable and starts another.
func (h *harness) killPluginMidSend() {
	h.t.Helper()
	req, pid, s := h.heldFrom(func(*server) bool { return true })
	began := time.Now()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	h.recv.release()
	h.mu.Lock()
	h.counts.pluginKills++
	h.mu.Unlock()
	h.noteKill("SIGKILL of "+s.name+"'s plugin mid-send", req.deliveryID, began)
	h.logf("SIGKILLed the plugin (pid %d) of %s while its request for %s was on the wire", pid, s.name, req.deliveryID)
}

// restartPostgres crashes the database under both servers and starts it
// again.
func (h *harness) restartPostgres(pg *pgtest.Cluster) {
	h.t.Helper()
	began := time.Now()
	pg.Stop("immediate")
	h.logf("PostgreSQL crashed (immediate stop)")
	h.wait(2 * time.Second)
	pg.Start()
	h.mu.Lock()
	h.counts.pgRestarts++
	h.mu.Unlock()
	h.logf("PostgreSQL started again")
	// A worker retries recording an answer until its claim's lease ends;
	// one cut off for longer gives it up, and the delivery is sent again.
	h.wait(lease)
	h.noteFault("PostgreSQL crash and restart", "", began)
}

// claimTokens reads the claim token of every row that carries one.
func (h *harness) claimTokens() map[string]string {
	h.t.Helper()
	rows, err := h.db.QueryContext(h.ctx, `SELECT id, claim_token FROM webhook_deliveries WHERE claim_token IS NOT NULL`)
	if err != nil {
		h.t.Fatalf("read claim tokens: %v", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, token string
		if err := rows.Scan(&id, &token); err != nil {
			h.t.Fatal(err)
		}
		out[id] = token
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// freezePastLease is the paused worker the claim token exists for: a
// server is SIGSTOPped while its plugin has a request on the wire, stays
// frozen until the other server has taken over every claim it held, and
// is then thawed. Its request was answered meanwhile; its completion must
// be refused by the fence and recorded as a late attempt.
func (h *harness) freezePastLease(name string) {
	h.t.Helper()
	s := h.server(name)
	req, _, _ := h.heldFrom(func(x *server) bool { return x == s })
	s.usable.Store(false)
	_ = syscall.Kill(s.pid, syscall.SIGSTOP)
	frozenAt := time.Now()
	before := h.claimTokens()
	h.recv.release()
	if _, ok := before[req.deliveryID]; !ok {
		h.t.Fatalf("%s was frozen with its request for %s on the wire, but that delivery carries no claim", name, req.deliveryID)
	}
	h.logf("SIGSTOPped %s while its request for %s was on the wire; %d claims out", name, req.deliveryID, len(before))

	// Every claim out at the freeze ends: the other server's by
	// completion, the frozen server's only by being claimed again.
	for {
		now := h.claimTokens()
		left := 0
		for id, token := range before {
			if now[id] == token {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Since(frozenAt) > 6*lease {
			h.t.Fatalf("%d claims of frozen %s were not taken over within %s", left, name, 6*lease)
		}
		h.wait(100 * time.Millisecond)
	}
	h.logf("every claim out at the freeze was taken over after %.1fs (lease %s)", time.Since(frozenAt).Seconds(), lease)
	_ = syscall.Kill(s.pid, syscall.SIGCONT)
	s.usable.Store(true)

	deadline := time.Now().Add(20 * time.Second)
	for !h.hasLate(req.deliveryID) {
		if time.Now().After(deadline) {
			h.t.Fatalf("thawed %s never recorded its request for %s as a late attempt", name, req.deliveryID)
		}
		h.wait(50 * time.Millisecond)
	}
	h.mu.Lock()
	h.counts.pauses++
	h.mu.Unlock()
	h.noteFault("SIGSTOP of "+name+" past the lease", req.deliveryID, frozenAt)
	h.logf("thawed %s; its request for %s is recorded as a late attempt", name, req.deliveryID)
}

func (h *harness) hasLate(deliveryID string) bool {
	as, err := h.store.AttemptList(h.ctx, deliveryID)
	if err != nil {
		return false // the database may be restarting; ask again
	}
	for _, a := range as {
		if a.Late {
			return true
		}
	}
	return false
}

// finish waits for every delivery to the healthy endpoint to end (the hung
// endpoint's never do), stops the servers the way an operator does, and
// balances the ledger.
func (h *harness) finish() *ledger {
	h.t.Helper()
	h.recv.release()
	deadline := time.Now().Add(90 * time.Second)
	for {
		open, err := h.openHealthy()
		if err == nil && open == 0 {
			break
		}
		if time.Now().After(deadline) {
			h.logf("deliveries still open after 90 s: %d (%v)", open, err)
			break
		}
		h.wait(250 * time.Millisecond)
	}
	h.logf("every delivery to the healthy endpoint has ended")
	for _, s := range h.usableServers() {
		s.stop(h.t)
	}
	l := h.balance()
	h.t.Logf("FAULT LEDGER %s", l)
	for _, f := range h.faults {
		h.t.Logf("  fault: %s, on delivery %q", f.what, f.deliveryID)
	}
	for _, p := range l.problems {
		h.t.Errorf("ledger: %s", p)
	}
	if !l.balanced() {
		h.t.Errorf("the ledger does not balance: %s", l)
		for _, s := range h.allRuns() {
			h.t.Logf("log of %s:\n%s", s, readTail(s))
		}
	}
	return l
}

// openHealthy counts the deliveries not to the hung endpoint that are
// pending or processing.
func (h *harness) openHealthy() (int, error) {
	rows, err := h.db.QueryContext(h.ctx, `SELECT endpoint_id, count(*) FROM webhook_deliveries
		WHERE state IN ('pending', 'processing') GROUP BY endpoint_id`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	h.mu.Lock()
	hung := h.hang.endpointID
	h.mu.Unlock()
	open := 0
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return 0, err
		}
		if id != hung {
			open += n
		}
	}
	return open, rows.Err()
}

func (h *harness) allRuns() []string {
	matches, _ := filepath.Glob(filepath.Join(h.work, "run*", "server.log"))
	return matches
}
