package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// limitReceiver counts what arrives at one path: how many requests were in
// progress at once, and when each arrived.
type limitReceiver struct {
	inFlight, peak atomic.Int64
	mu             sync.Mutex
	arrivals       []time.Time
	hold           time.Duration
}

func (r *limitReceiver) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	now := r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	for p := r.peak.Load(); now > p && !r.peak.CompareAndSwap(p, now); p = r.peak.Load() {
	}
	r.mu.Lock()
	r.arrivals = append(r.arrivals, time.Now())
	r.mu.Unlock()
	time.Sleep(r.hold)
	w.WriteHeader(http.StatusNoContent)
}

// TestEndpointLimitsHoldAcrossServerProcesses runs three real `hymical
// serve` processes on one PostgreSQL database, each with several workers,
// against two endpoints on a loopback receiver: one capped at two sends in
// flight, one limited to 20 sends a second. The receiver, not the store,
// says whether the limits held across the processes.
func TestEndpointLimitsHoldAcrossServerProcesses(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("go", "build", "-o", filepath.Join(dir, "hymical"), ".").CombinedOutput(); err != nil {
		t.Fatalf("build hymical: %v\n%s", err, b)
	}
	ctx := t.Context()
	store, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}

	capped := &limitReceiver{hold: 30 * time.Millisecond}
	rated := &limitReceiver{}
	mux := http.NewServeMux()
	mux.Handle("/capped", capped)
	mux.Handle("/rated", rated)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	receiver := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = receiver.Serve(ln) }()
	defer receiver.Close()

	const capLimit, rate, burst, n = 2, 20.0, 1, 30
	endpoint := func(path string, mutate func(*storage.Endpoint)) {
		e := storage.Endpoint{
			Transport: "http",
			URL:       "http://" + ln.Addr().String() + path,
			FormIDs:   []string{"form_" + strings.TrimPrefix(path, "/")},
			Secrets:   []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)},
		}
		mutate(&e)
		if _, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: e}); err != nil {
			t.Fatal(err)
		}
	}
	endpoint("/capped", func(e *storage.Endpoint) { e.MaxInFlight = capLimit })
	endpoint("/rated", func(e *storage.Endpoint) { e.RateLimit, e.RateBurst = rate, burst })
	for _, form := range []string{"form_capped", "form_rated"} {
		for range n {
			sub := storage.NewID("sub")
			if _, err := store.EventCreate(ctx, storage.Event{Type: "submission.received", FormID: form, SubmissionID: sub,
				Payload: []byte(fmt.Sprintf(`{"type":"submission.received","submission":{"id":%q}}`, sub))}); err != nil {
				t.Fatal(err)
			}
		}
	}

	for i := range 3 {
		startLimitServer(t, dir, dsn, i)
	}
	testwait.For(t, 60*time.Second, func() error {
		st, err := store.DeliveryStats(ctx, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if st.ByState[storage.StateDelivered] != 2*n {
			return fmt.Errorf("not all delivered: %+v", st.ByState)
		}
		return nil
	})

	if p := capped.peak.Load(); p > capLimit || p < 2 {
		t.Fatalf("the capped endpoint saw %d requests at once across 3 servers; want the cap, %d (and at least 2, or nothing overlapped)", p, capLimit)
	}
	rated.mu.Lock()
	arrivals := slices.Clone(rated.arrivals)
	rated.mu.Unlock()
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	least := time.Duration(float64(n-burst) / rate * float64(time.Second))
	if span := arrivals[len(arrivals)-1].Sub(arrivals[0]); span < least*9/10 {
		t.Fatalf("%d requests to the rated endpoint arrived over %s; a limit of %v/s shared by 3 servers needs at least %s", len(arrivals), span, rate, least)
	}
	if len(arrivals) != n {
		t.Fatalf("the rated endpoint got %d requests, want %d: a deferral must not be a send", len(arrivals), n)
	}
	ds, err := store.DeliveryList(ctx, storage.DeliveryListParams{Limit: 2*n + 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Attempts != 1 {
			t.Fatalf("delivery %s took %d attempts; deferring must spend none", d.ID, d.Attempts)
		}
	}
}

// startLimitServer starts one `hymical serve` on the database and waits for
// it to listen; it is killed with its plugins when the test ends.
func startLimitServer(t *testing.T, dir, dsn string, i int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "hymical"), "serve",
		"--database.url="+dsn,
		"--server.listen=127.0.0.1:0",
		"--plugins.dir="+dir,
		"--webhook.allowed_networks=127.0.0.0/8",
		"--worker.concurrency=8",
		"--worker.batch_size=4",
		"--worker.poll_interval=20ms",
		"--log.level=warn")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + os.TempDir(),
		"FORMS_SERVER_ADMIN_TOKEN=test-admin-token-0123456789"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var logs syncbuf.Buffer
	cmd.Stderr = &logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.Contains(sc.Text(), " listening on ") {
				close(listening)
				signalled = true
			}
		}
	}()
	select {
	case <-listening:
	case <-time.After(30 * time.Second):
		t.Fatalf("server %d did not listen within 30 s:\n%s", i, logs.String())
	}
}
