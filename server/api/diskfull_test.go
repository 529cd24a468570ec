package api_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite"
)

func init() {
	msqlite.RegisterConnectionHook(capWriterPages)
}

// capWriterPages gives a store on a file named capped-N.db a writer that
// may not grow the file past N pages: SQLite's max_page_count, a setting
// of each connection, makes a write that needs a page beyond it fail with
// SQLITE_FULL, as a full disk does. Other files and connections are left
// as they are.
func capWriterPages(conn msqlite.ExecQuerierContext, dsn string) error {
	path, query, _ := strings.Cut(dsn, "?")
	name, capped := strings.CutPrefix(filepath.Base(path), "capped-")
	if !capped || !strings.Contains(query, "_txlock=immediate") { // the store's writer
		return nil
	}
	pages, err := strconv.Atoi(strings.TrimSuffix(name, ".db"))
	if err != nil {
		return fmt.Errorf("capped database %s: %w", path, err)
	}
	_, err = conn.ExecContext(context.Background(), "PRAGMA max_page_count = "+strconv.Itoa(pages), nil)
	return err
}

// ballast stands for the other files on the database's volume: a
// connection of its own, capped like the store's writer, that fills every
// page left under the cap and gives them back when dropped.
type ballast struct {
	t    *testing.T
	conn *sql.Conn
}

func newBallast(t *testing.T, path string, pages int) *ballast {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(t.Context(), "PRAGMA max_page_count = "+strconv.Itoa(pages)); err != nil {
		t.Fatal(err)
	}
	return &ballast{t: t, conn: conn}
}

// fill writes rows, large and then smaller, until none fits.
func (b *ballast) fill() {
	b.t.Helper()
	ctx := b.t.Context()
	if _, err := b.conn.ExecContext(ctx, "CREATE TABLE ballast (b BLOB)"); err != nil {
		b.t.Fatal(err)
	}
	for _, size := range []int{1 << 16, 1 << 12, 1 << 9, 1 << 6} {
		for {
			_, err := b.conn.ExecContext(ctx, "INSERT INTO ballast VALUES (zeroblob(?))", size)
			var se *msqlite.Error
			if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL {
				break
			}
			if err != nil {
				b.t.Fatalf("fill the ballast: %v", err)
			}
		}
	}
}

// free drops the ballast: its pages are free for the store's writer.
func (b *ballast) free() {
	b.t.Helper()
	if _, err := b.conn.ExecContext(b.t.Context(), "DROP TABLE ballast"); err != nil {
		b.t.Fatal(err)
	}
}

func (b *ballast) count(table string) int {
	b.t.Helper()
	var n int
	if err := b.conn.QueryRowContext(b.t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		b.t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// runPatientPool runs a worker pool with concurrency senders over store
// until the test ends, through a plugin host of its own whose sends wait a
// minute for an answer: the receiver's held requests must not time out
// and be recorded while the test fills the disk, however slow the machine.
func runPatientPool(t *testing.T, store storage.Store, concurrency int, health worker.StoreObserver) {
	t.Helper()
	host, err := pluginhost.New(t.Context(), pluginhost.Config{Dir: filepath.Dir(httpPlugin), Plugins: []pluginhost.PluginConfig{{
		Name:     "http",
		Settings: map[string]string{"allowed_networks": "127.0.0.0/8", "connect_timeout": "5s", "read_timeout": "60s"},
	}}}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	pool, err := worker.New(store, host, worker.Config{
		Concurrency: concurrency, BatchSize: concurrency, EndpointShare: 1,
		Lease: 2 * time.Minute, SendTimeout: 70 * time.Second, PollInterval: 20 * time.Millisecond, MaxCycleAttempts: 5,
		Retry: worker.RetrySchedule{Delays: []time.Duration{50 * time.Millisecond}}, StoreHealth: health,
	}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pool.Run: %v", err)
		}
	})
}

// gatedReceiver is a receiver on loopback that holds every request until
// released, then answers 200, and keeps the bodies it got.
type gatedReceiver struct {
	*httptest.Server
	gate    chan struct{}
	mu      sync.Mutex
	waiting int
	bodies  [][]byte
}

func newGatedReceiver(t *testing.T) *gatedReceiver {
	rc := &gatedReceiver{gate: make(chan struct{})}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.waiting++
		rc.mu.Unlock()
		select {
		case <-rc.gate:
		case <-r.Context().Done():
		}
		rc.mu.Lock()
		rc.waiting--
		rc.bodies = append(rc.bodies, body)
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	return rc
}

// held is how many requests wait at the gate.
func (rc *gatedReceiver) held() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.waiting
}

// release answers the requests held and every one after.
func (rc *gatedReceiver) release() { close(rc.gate) }

func (rc *gatedReceiver) requests() [][]byte {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([][]byte(nil), rc.bodies...)
}

// spaceWatch passes what the worker pool tells the store health on, and
// keeps the failures for the test to see.
type spaceWatch struct {
	next   worker.StoreObserver
	mu     sync.Mutex
	failed []error
}

func (w *spaceWatch) Observe(err error) {
	if errors.Is(err, storage.ErrNoSpace) {
		w.mu.Lock()
		w.failed = append(w.failed, err)
		w.mu.Unlock()
	}
	w.next.Observe(err)
}

func (w *spaceWatch) failures() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]error(nil), w.failed...)
}

// until waits for cond, failing the test with what after two minutes:
// long enough for the worker's claim loop, which backs off up to 30 s
// while the database is full, to come round again on a loaded machine.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 2*time.Minute, func() error {
		if !cond() {
			return fmt.Errorf("still waiting for %s", what)
		}
		return nil
	})
}

// When the database runs out of space, ingest answers 503 with
// Retry-After and says what to do, and /readyz says the store is full, so
// nothing is accepted that is not kept. The worker's own writes fail too,
// and it rides them out. Once space is freed, the refused submissions sent
// again are accepted, /readyz is ready, and every accepted submission is
// delivered.
func TestAFullDatabaseRefusesIngestLosesNothingAndRecovers(t *testing.T) {
	t.Parallel()
	const pages = 2048 // 8 MiB
	path := filepath.Join(t.TempDir(), fmt.Sprintf("capped-%d.db", pages))
	store, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	migrate(t, store)
	disk := newBallast(t, path, pages)
	health := &api.StoreHealth{}
	f := newFixture(t, backend{open: func(*testing.T) (storage.Store, func(string) int) { return store, disk.count }},
		func(o *api.Options) { o.StoreHealth = health })
	recv := newGatedReceiver(t)
	f.createEndpoint(map[string]any{"url": recv.URL + "/hook"})

	pad := strings.Repeat("x", 500)
	submit := func(n int) response {
		return f.submit("contact", map[string]any{"n": n, "pad": pad})
	}
	// n → submission id of every submission answered 2xx.
	accepted := map[int]string{}
	n := 0
	// Accepted before the disk fills; the worker claims and sends them,
	// and the receiver holds every request, so the attempts are recorded
	// after it has filled: more of them than fit in one page (an attempt
	// row is over 100 bytes).
	for ; n < 100; n++ {
		accepted[n] = submit(n).must(t, http.StatusAccepted).str("submission_id")
	}
	const inFlight = 64
	watch := &spaceWatch{next: health}
	runPatientPool(t, f.store, inFlight, watch)
	until(t, "the worker to have its sends out", func() bool { return recv.held() == inFlight })
	disk.fill()
	var refused []int
	for ; len(refused) < 3; n++ {
		if n > 5000 {
			t.Fatalf("%d submissions fit on a full disk", len(accepted))
		}
		r := submit(n)
		switch r.status {
		case http.StatusAccepted:
			accepted[n] = r.str("submission_id")
			continue
		case http.StatusServiceUnavailable:
		default:
			t.Fatalf("submission %d on a full disk: %d %s, want 202 or 503", n, r.status, r.raw)
		}
		refused = append(refused, n)
		code, msg := r.errorCode(t)
		if code != "storage_full" || !strings.Contains(msg, "out of space") || !strings.Contains(msg, "free space") ||
			!strings.Contains(msg, "send it again later") {
			t.Fatalf("submission refused for lack of space: %s %q, want storage_full saying to send it again and to free space", code, msg)
		}
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra <= 0 {
			t.Fatalf("503 for lack of space has Retry-After %q, want a number of seconds", r.header.Get("Retry-After"))
		}
	}
	if got := disk.count("webhook_events"); got != len(accepted) {
		t.Fatalf("%d events stored, %d submissions accepted: a refused one was kept, or an accepted one lost", got, len(accepted))
	}
	ready := f.send(req{method: "GET", path: "/readyz"}).must(t, http.StatusServiceUnavailable)
	if code, msg := ready.errorCode(t); code != "not_ready" || !strings.Contains(msg, "database is out of space") ||
		!strings.Contains(msg, "grow the volume") {
		t.Fatalf("readyz on a full disk: %s %q, want it to say the database is out of space and what to do", code, msg)
	}
	submit(refused[0]).must(t, http.StatusServiceUnavailable)

	recv.release()
	until(t, "the worker's recording of an attempt to meet the full disk", func() bool {
		for _, err := range watch.failures() {
			if strings.Contains(err.Error(), "complete deliveries") {
				return true
			}
		}
		return false
	})

	disk.free()
	for _, n := range refused {
		accepted[n] = submit(n).must(t, http.StatusAccepted).str("submission_id")
	}
	f.send(req{method: "GET", path: "/readyz"}).must(t, http.StatusOK)

	delivered := func() map[string]bool {
		got := map[string]bool{}
		for _, raw := range recv.requests() {
			var body struct {
				Submission struct {
					ID string `json:"id"`
				} `json:"submission"`
			}
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("the receiver got %q: %v", raw, err)
			}
			got[body.Submission.ID] = true
		}
		return got
	}
	until(t, "every accepted submission to reach the receiver", func() bool {
		got := delivered()
		for _, id := range accepted {
			if !got[id] {
				return false
			}
		}
		return true
	})
	until(t, "every delivery to be recorded as delivered", func() bool {
		return disk.count("webhook_deliveries WHERE state = 'delivered'") == len(accepted)
	})
	if got := disk.count("webhook_deliveries"); got != len(accepted) {
		t.Fatalf("%d deliveries for %d accepted submissions", got, len(accepted))
	}
	t.Logf("%d submissions accepted, %d refused while full and accepted when sent again; the worker met the full disk %d times",
		len(accepted), len(refused), len(watch.failures()))
}
