package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/storagetest"
)

// backend hands the conformance suite a fresh SQLite file per database.
var backend = storagetest.Backend{
	Name: "sqlite",
	NewDatabase: func(t *testing.T) storagetest.Database {
		t.Helper()
		d := &testDatabase{path: filepath.Join(t.TempDir(), "hymical.db")}
		t.Cleanup(func() {
			if err := d.close(); err != nil {
				t.Errorf("close raw sqlite connection: %v", err)
			}
		})
		return d
	},
}

// testDatabase is one SQLite file. Every Open is a new Store with its own
// connections, as a second process would have.
type testDatabase struct {
	path string

	mu  sync.Mutex
	raw *sql.DB // for Exec and QueryInt, opened on first use
}

func (d *testDatabase) Open(t *testing.T, opts ...storage.OpenOption) storage.Store {
	t.Helper()
	s, err := Open(context.Background(), d.path, opts...)
	if err != nil {
		t.Fatalf("open sqlite store on %s: %v", d.path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close sqlite store: %v", err)
		}
	})
	return s
}

// conn opens a plain connection with the store's pragmas, closed when the
// test that first needed it ends.
func (d *testDatabase) conn() (*sql.DB, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.raw != nil {
		return d.raw, nil
	}
	db, err := sql.Open("sqlite", dsn(d.path, DefaultBusyTimeout, true))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	d.raw = db
	return db, nil
}

func (d *testDatabase) Exec(ctx context.Context, query string) error {
	db, err := d.conn()
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, query)
	return err
}

func (d *testDatabase) QueryInt(ctx context.Context, query string) (int64, error) {
	db, err := d.conn()
	if err != nil {
		return 0, err
	}
	var n int64
	err = db.QueryRowContext(ctx, query).Scan(&n)
	return n, err
}

func (d *testDatabase) QueryString(ctx context.Context, query string) (string, error) {
	db, err := d.conn()
	if err != nil {
		return "", err
	}
	var s string
	err = db.QueryRowContext(ctx, query).Scan(&s)
	return s, err
}

func (d *testDatabase) TimeLiteral(t time.Time) string {
	return strconv.FormatInt(t.UnixMicro(), 10)
}

func (d *testDatabase) BlobLiteral(b []byte) string {
	return "X'" + hex.EncodeToString(b) + "'"
}

// HoldKeyWrites holds the file's write lock in a transaction of its own.
func (d *testDatabase) HoldKeyWrites(t *testing.T) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(d.path, DefaultBusyTimeout, true))
	if err != nil {
		t.Fatal(err)
	}
	// BEGIN IMMEDIATE (the writer's _txlock) takes the write lock at once.
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		db.Close()
		t.Fatalf("take the write lock of %s: %v", d.path, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := tx.Rollback(); err != nil {
				t.Errorf("let the write lock go: %v", err)
			}
			db.Close()
		})
	}
	t.Cleanup(release)
	return release
}

func (d *testDatabase) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.raw == nil {
		return nil
	}
	err := d.raw.Close()
	d.raw = nil
	return err
}

func TestConformance(t *testing.T) { storagetest.Run(t, backend) }

// openStore opens a migrated *Store on a fresh file.
func openStore(t *testing.T) (*Store, *testDatabase) {
	t.Helper()
	db := backend.NewDatabase(t).(*testDatabase)
	s := openOn(t, db.path)
	if _, err := s.Migrate(context.Background(), storage.MigrateParams{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s, db
}

func openOn(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testEndpoint() storage.Endpoint {
	return storage.Endpoint{
		Transport: "http",
		URL:       "http://127.0.0.1:1/hook",
		Secrets:   []storage.Secret{storage.NewSecret("whsec_dGVzdA==", nil)},
	}
}

// seed creates one endpoint and n events, so n pending deliveries due now.
func seed(t *testing.T, s storage.Store, n int) []storage.Delivery {
	t.Helper()
	ctx := context.Background()
	if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: testEndpoint()}); err != nil {
		t.Fatalf("create endpoint: %v", err)
	}
	var out []storage.Delivery
	for i := range n {
		res, err := s.EventCreate(ctx, storage.Event{
			Type:    "submission.received",
			Payload: []byte(`{"n":` + strconv.Itoa(i) + `}`),
		})
		if err != nil {
			t.Fatalf("create event %d: %v", i, err)
		}
		out = append(out, res.Deliveries...)
	}
	return out
}

func TestOpenRefusesWhatIsNotAFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notDir := filepath.Join(dir, "plain")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"empty path", "", "path is empty"},
		{"blank path", "  ", "path is empty"},
		{"in-memory database", ":memory:", "needs a real file"},
		{"URI form", "file:" + filepath.Join(dir, "x.db") + "?mode=memory", "needs a real file"},
		{"question mark in path", filepath.Join(dir, "a?b.db"), "contains '?'"},
		{"missing directory", filepath.Join(dir, "no", "such", "x.db"), "create the directory first"},
		{"parent is a file", filepath.Join(notDir, "x.db"), "is not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := Open(context.Background(), tt.path)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded, want an error containing %q", tt.path, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open(%q) = %v, want an error containing %q", tt.path, err, tt.want)
			}
		})
	}
}

func TestOpenCreatesTheFileAndDoesNotMigrate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "new.db")
	s := openOn(t, path)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file not created: %v", err)
	}
	v, err := s.SchemaVersion(context.Background())
	if err != nil || v != 0 {
		t.Fatalf("SchemaVersion of a fresh file = %d, %v; want 0, nil", v, err)
	}
}

// The database file holds every endpoint's signing secrets: a new one,
// with the -wal and -shm files SQLite makes beside it, is readable by its
// owner only. An existing file keeps the permissions it was given.
func TestOpenCreatesPrivateFiles(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "new.db")
	s := openOn(t, path)
	if _, err := s.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %o, want 600", filepath.Base(f), perm)
		}
	}

	kept := filepath.Join(t.TempDir(), "kept.db")
	if err := os.WriteFile(kept, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(kept, 0o640); err != nil {
		t.Fatal(err)
	}
	openOn(t, kept)
	if fi, err := os.Stat(kept); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("an existing file's mode changed: %v, %v", fi.Mode(), err)
	}
}

// TestOpenWarnsAboutLooseFiles: an existing database, WAL or shared-memory
// file that other users may read is logged, with its mode and the command
// that fixes it, and left as it is. SQLite makes the -wal and -shm files
// with the database file's mode, and makes them again when it is the first
// to open the database, so a loose one outlives that only while another
// process has the database open: the test holds a first store open.
func TestOpenWarnsAboutLooseFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		modes map[string]os.FileMode // suffix → mode, set while a first store is open
		warn  []string               // suffixes warned about
	}{
		{"a private database", nil, nil},
		{"a database older versions made world-readable", map[string]os.FileMode{"": 0o644}, []string{""}},
		{"a group-writable database", map[string]os.FileMode{"": 0o660}, []string{""}},
		{"a readable WAL file", map[string]os.FileMode{"-wal": 0o640}, []string{"-wal"}},
		{"a readable shared-memory file", map[string]os.FileMode{"-shm": 0o604}, []string{"-shm"}},
		{"all three", map[string]os.FileMode{"": 0o644, "-wal": 0o644, "-shm": 0o644}, []string{"", "-wal", "-shm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "old.db")
			first := openOn(t, path)
			if _, err := first.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
				t.Fatal(err)
			}
			for suffix, mode := range tc.modes {
				if err := os.Chmod(path+suffix, mode); err != nil {
					t.Fatal(err)
				}
			}

			var logged bytes.Buffer
			s, err := Open(t.Context(), path, storage.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			var lines []string
			if logged.Len() > 0 {
				lines = strings.Split(strings.TrimSpace(logged.String()), "\n")
			}
			if len(lines) != len(tc.warn) {
				t.Fatalf("logged %d lines, want %d warnings:\n%s", len(lines), len(tc.warn), logged.String())
			}
			for i, suffix := range tc.warn {
				f := path + suffix
				want := fmt.Sprintf("%04o", tc.modes[suffix])
				for _, say := range []string{"level=WARN", "file=" + f, "mode=" + want, "chmod 600 " + f, "leaves the mode as it is"} {
					if !strings.Contains(lines[i], say) {
						t.Errorf("warning %q does not say %q", lines[i], say)
					}
				}
				if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != tc.modes[suffix] {
					t.Errorf("%s changed mode to %v (%v); it must be left as it was", f, fi.Mode(), err)
				}
			}
		})
	}
}

func TestEveryConnectionHasThePragmas(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	want := map[string]string{
		"journal_mode": "wal",
		"foreign_keys": "1",
		"synchronous":  "1", // NORMAL
		"busy_timeout": "10000",
	}
	pools := map[string]*sql.DB{"writer": s.writer, "reader": s.reader}
	for name, db := range pools {
		// Hold several reader connections at once so the check is not only
		// of the first one.
		var conns []*sql.Conn
		for range 3 {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			if name == "writer" {
				break
			}
		}
		for i, c := range conns {
			for pragma, v := range want {
				var got string
				if err := c.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
					t.Fatalf("%s conn %d: PRAGMA %s: %v", name, i, pragma, err)
				}
				if got != v {
					t.Errorf("%s conn %d: PRAGMA %s = %s, want %s", name, i, pragma, got, v)
				}
			}
		}
		for _, c := range conns {
			c.Close()
		}
	}
	if got := s.writer.Stats().MaxOpenConnections; got != 1 {
		t.Errorf("writer allows %d connections, want exactly 1", got)
	}
	// The reader pool refuses writes.
	if _, err := s.reader.ExecContext(ctx, `DELETE FROM webhook_endpoints`); err == nil {
		t.Error("a write through the reader pool succeeded; it must be query_only")
	}
}

// Two Stores on one file stand for two processes: SQLite's file lock and
// busy_timeout must serialise their claims without a single SQLITE_BUSY, and
// no row may be claimed twice.
func TestTwoStoresClaimConcurrentlyWithoutOverlapOrBusy(t *testing.T) {
	t.Parallel()
	const deliveries, perStore = 240, 6
	first, db := openStore(t)
	second := openOn(t, db.path)
	seed(t, first, deliveries)
	ctx := context.Background()

	var (
		mu      sync.Mutex
		claimed = map[string]int{}
		errs    []error
		wg      sync.WaitGroup
	)
	for _, s := range []*Store{first, second} {
		for range perStore {
			wg.Go(func() {
				for {
					claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 3, Lease: time.Hour})
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
					if len(claims) == 0 {
						return
					}
					for _, c := range claims {
						mu.Lock()
						claimed[c.Delivery.ID]++
						mu.Unlock()
						if _, _, err := s.DeliveryComplete(ctx, storage.DeliveryCompleteParams{
							DeliveryID: c.Delivery.ID, Token: c.Token, Outcome: storage.OutcomeDelivered,
							HTTPStatus: 200,
						}); err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("concurrent claim or complete failed: %v", err)
	}
	if len(claimed) != deliveries {
		t.Errorf("%d distinct deliveries claimed, want %d", len(claimed), deliveries)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Errorf("delivery %s claimed %d times, want once", id, n)
		}
	}
	stats, err := second.DeliveryStats(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if stats.ByState[storage.StateDelivered] != deliveries || stats.Due != 0 {
		t.Errorf("stats after the run = %+v, want %d delivered and none due", stats, deliveries)
	}
}

// With WAL, a reader sees its snapshot while the writer commits, and reads
// go on while another connection holds the write lock.
func TestReadersAndTheWriterDoNotBlockEachOther(t *testing.T) {
	t.Parallel()
	s, db := openStore(t)
	ds := seed(t, s, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// A long read transaction elsewhere does not stop this store writing.
	other, err := sql.Open("sqlite", dsn(db.path, DefaultBusyTimeout, false))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	readTx, err := other.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var before int
	if err := readTx.QueryRowContext(ctx, `SELECT count(*) FROM webhook_events`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EventCreate(ctx, storage.Event{Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("write while a reader holds a snapshot: %v", err)
	}
	var during int
	if err := readTx.QueryRowContext(ctx, `SELECT count(*) FROM webhook_events`).Scan(&during); err != nil {
		t.Fatal(err)
	}
	readTx.Rollback()
	if during != before {
		t.Errorf("reader's snapshot moved from %d to %d events mid-transaction", before, during)
	}

	// A write transaction held open elsewhere does not stop this store reading.
	writeConn, err := sql.Open("sqlite", dsn(db.path, DefaultBusyTimeout, true))
	if err != nil {
		t.Fatal(err)
	}
	defer writeConn.Close()
	writeTx, err := writeConn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer writeTx.Rollback()
	if _, err := writeTx.ExecContext(ctx, `UPDATE webhook_deliveries SET attempts = 7`); err != nil {
		t.Fatal(err)
	}
	got, err := s.DeliveryGet(ctx, ds[0].ID)
	if err != nil {
		t.Fatalf("read while another connection holds the write lock: %v", err)
	}
	if got.Attempts != 0 {
		t.Errorf("read saw an uncommitted write: attempts = %d", got.Attempts)
	}
}

// A writer that outwaits busy_timeout gets an error that says what happened
// and what to check, not a bare SQLITE_BUSY, and that is ErrResources.
func TestLockHeldPastTheBusyTimeoutSaysSo(t *testing.T) {
	t.Parallel()
	_, db := openStore(t)
	ctx := context.Background()
	s, err := open(ctx, db.path, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	holder, err := sql.Open("sqlite", dsn(db.path, DefaultBusyTimeout, true))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	tx, err := holder.BeginTx(ctx, nil) // BEGIN IMMEDIATE: takes the write lock
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: testEndpoint()})
	tx.Rollback()
	if err == nil {
		t.Fatal("EndpointCreate succeeded while another connection held the write lock")
	}
	for _, want := range []string{"create endpoint", "stayed locked", db.path, "another process"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// A passing want of a resource, so the API answers 503 storage_busy
	// with Retry-After rather than 500.
	if !errors.Is(err, storage.ErrResources) {
		t.Errorf("lock timeout %v is not storage.ErrResources", err)
	}
	for _, sentinel := range []error{storage.ErrNotFound, storage.ErrConflict, storage.ErrInvalid, storage.ErrClaimLost, storage.ErrNoSpace, storage.ErrUnavailable} {
		if errors.Is(err, sentinel) {
			t.Errorf("lock timeout maps to %v; it is ErrResources and none of the other sentinels", sentinel)
		}
	}
	if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: testEndpoint()}); err != nil {
		t.Fatalf("EndpointCreate once the lock is released: %v", err)
	}
}

func TestNativeErrorsMapToSentinels(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	d := seed(t, s, 1)[0]
	tests := []struct {
		name string
		sql  string
		want error
	}{
		{"primary key taken", `INSERT INTO webhook_endpoints (id, transport, secrets, created_at, updated_at)
			SELECT id, 'http', '[]', 0, 0 FROM webhook_endpoints`, storage.ErrConflict},
		{"unique pair taken", `INSERT INTO webhook_deliveries (id, endpoint_id, event_id, state, next_attempt_at, created_at)
			SELECT 'dlv_other', endpoint_id, event_id, 'pending', 0, 0 FROM webhook_deliveries`, storage.ErrConflict},
		{"check violated", `UPDATE webhook_deliveries SET state = 'lost'`, storage.ErrInvalid},
		{"no row", `SELECT id FROM webhook_deliveries WHERE id = 'dlv_none'`, storage.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.write(ctx, "probe", func(tx *sql.Tx) error {
				var id string
				if strings.HasPrefix(tt.sql, "SELECT") {
					return tx.QueryRowContext(ctx, tt.sql).Scan(&id)
				}
				_, err := tx.ExecContext(ctx, tt.sql)
				return err
			})
			if !errors.Is(err, tt.want) {
				t.Fatalf("error = %v, want %v", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "sqlite: probe: ") {
				t.Errorf("error %q does not name the operation", err)
			}
		})
	}
	// The failed writes left nothing behind.
	got, err := s.DeliveryGet(ctx, d.ID)
	if err != nil || got.State != storage.StatePending {
		t.Fatalf("delivery after failed writes = %+v, %v; want it pending", got, err)
	}
}

// Times are INTEGER microseconds since the epoch, and come back in UTC.
func TestTimesAreIntegerMicroseconds(t *testing.T) {
	t.Parallel()
	s, db := openStore(t)
	ctx := context.Background()
	if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: testEndpoint()}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.FixedZone("X", 5*3600))
	res, err := s.EventCreate(ctx, storage.Event{Type: "t", Payload: []byte(`{}`), CreatedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	want := at.UTC().Truncate(time.Microsecond)
	if got := res.Deliveries[0].NextAttemptAt; got != want {
		t.Errorf("next_attempt_at came back as %v, want %v", got, want)
	}
	raw, err := db.QueryInt(ctx, `SELECT next_attempt_at FROM webhook_deliveries WHERE typeof(next_attempt_at) = 'integer'`)
	if err != nil {
		t.Fatal(err)
	}
	if raw != at.UnixMicro() {
		t.Errorf("stored next_attempt_at = %d, want %d", raw, at.UnixMicro())
	}
	if lit := db.TimeLiteral(at); lit != strconv.FormatInt(at.UnixMicro(), 10) {
		t.Errorf("TimeLiteral = %s", lit)
	}
}

// Two processes migrating one file at the same moment apply every step
// exactly once between them.
func TestConcurrentMigrateAppliesEachStepOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	stores := []*Store{openOn(t, path), openOn(t, path), openOn(t, path)}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied []string
	)
	for _, s := range stores {
		wg.Go(func() {
			res, err := s.Migrate(context.Background(), storage.MigrateParams{})
			if err != nil {
				t.Errorf("migrate: %v", err)
				return
			}
			mu.Lock()
			applied = append(applied, res.Applied...)
			mu.Unlock()
		})
	}
	wg.Wait()
	sort.Strings(applied)
	want := []string{"0001_initial", "0002_claim_token", "0003_cycle_attempts", "0004_workers", "0005_claim_order_indexes", "0006_endpoint_controls", "0007_unsent_reason", "0008_fair_share", "0009_secrets_key", "0010_endpoint_delete", "0011_operation_keys", "0012_promote_of", "0013_endpoint_forms", "0014_endpoint_queues", "0015_queue_versions", "0016_access", "0017_endpoint_headers", "0018_console_sessions", "0019_portal_link_sessions"}
	if !slices.Equal(applied, want) {
		t.Errorf("applied across processes = %v, want %v", applied, want)
	}
}

// Replay reads the state and then writes. Under a deferred transaction two
// processes doing that at once would fail with SQLITE_BUSY instead of
// waiting; BEGIN IMMEDIATE makes them queue, so exactly one replays and the
// rest see a delivery that is no longer terminal.
func TestReplaysRacingAcrossStoresQueueOnTheWriteLock(t *testing.T) {
	t.Parallel()
	first, db := openStore(t)
	stores := []*Store{first, openOn(t, db.path), openOn(t, db.path), openOn(t, db.path)}
	ctx := context.Background()
	for _, d := range seed(t, first, 5) {
		claims, err := first.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 1, Lease: time.Minute})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim %s: %v, %v", d.ID, claims, err)
		}
		if _, _, err := first.DeliveryComplete(ctx, storage.DeliveryCompleteParams{
			DeliveryID: claims[0].Delivery.ID, Token: claims[0].Token, Outcome: storage.OutcomePermanent,
		}); err != nil {
			t.Fatal(err)
		}
		const perStore = 3
		var (
			wg                sync.WaitGroup
			mu                sync.Mutex
			replayed, refused int
		)
		begin := make(chan struct{})
		for _, s := range stores {
			for range perStore {
				wg.Go(func() {
					<-begin
					_, err := s.DeliveryReplay(ctx, storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: "ops"})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						replayed++
					case errors.Is(err, storage.ErrNotTerminal):
						refused++
					default:
						t.Errorf("replay %s: %v", d.ID, err)
					}
				})
			}
		}
		close(begin)
		wg.Wait()
		if replayed != 1 || refused != len(stores)*perStore-1 {
			t.Fatalf("delivery %s: %d replays succeeded and %d were refused, want 1 and %d", d.ID, replayed, refused, len(stores)*perStore-1)
		}
		if rs, err := first.ReplayList(ctx, d.ID); err != nil || len(rs) != 1 {
			t.Fatalf("delivery %s: %d replay records, %v; want 1", d.ID, len(rs), err)
		}
	}
}

func TestMigrateExplainsANewerDatabase(t *testing.T) {
	t.Parallel()
	s, db := openStore(t)
	ctx := context.Background()
	if err := db.Exec(ctx, `INSERT INTO hymical_schema_migrations (version, name, applied_at) VALUES (99, 'future', 0)`); err != nil {
		t.Fatal(err)
	}
	_, err := s.Migrate(ctx, storage.MigrateParams{})
	if !errors.Is(err, storage.ErrSchemaUnknown) {
		t.Fatalf("migrate a database at version 99 = %v, want ErrSchemaUnknown", err)
	}
	for _, want := range []string{"version 99", "up to 19", "upgrade the hymical binary"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := s.Migrate(ctx, storage.MigrateParams{To: 2}); !errors.Is(err, storage.ErrSchemaUnknown) {
		t.Errorf("migrate to 2 on a database at 99 = %v, want ErrSchemaUnknown", err)
	}
}

// Callers range over and index these without nil checks, whichever method
// handed them the value.
func TestEmptyCollectionsComeBackEmptyNotNil(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	check := func(how string, e storage.Endpoint) {
		t.Helper()
		if e.Config == nil || e.EventTypes == nil || e.FormIDs == nil {
			t.Errorf("%s: config %v, event types %v, form ids %v: want empty, not nil", how, e.Config == nil, e.EventTypes == nil, e.FormIDs == nil)
		}
	}
	created, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: testEndpoint()})
	if err != nil {
		t.Fatal(err)
	}
	check("create", created.Endpoint)
	got, err := s.EndpointGet(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	check("get", got)
	updated, err := s.EndpointUpdate(ctx, testEndpointWithID(created.ID))
	if err != nil {
		t.Fatal(err)
	}
	check("update", updated)
	list, err := s.EndpointList(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("list = %d, %v", len(list), err)
	}
	check("list", list[0])

	res, err := s.EventCreate(ctx, storage.Event{Type: "t", FormID: "nobody-listens", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	d := res.Deliveries[0] // the endpoint names no forms, so it matches
	as, err := s.AttemptList(ctx, d.ID)
	if err != nil || as == nil {
		t.Errorf("attempts of a fresh delivery = %v, %v; want empty, not nil", as, err)
	}
	rs, err := s.ReplayList(ctx, d.ID)
	if err != nil || rs == nil {
		t.Errorf("replays of a fresh delivery = %v, %v; want empty, not nil", rs, err)
	}
	ws, err := s.WorkerList(ctx, time.Time{})
	if err != nil || ws == nil {
		t.Errorf("workers = %v, %v; want empty, not nil", ws, err)
	}
	ds, err := s.DeliveryList(ctx, storage.DeliveryListParams{Filter: storage.DeliveryFilter{State: storage.StateFailed}})
	if err != nil || ds == nil {
		t.Errorf("failed deliveries = %v, %v; want empty, not nil", ds, err)
	}
	claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 1, Lease: time.Minute, Now: d.NextAttemptAt.Add(-time.Hour)})
	if err != nil || claims == nil {
		t.Errorf("claims when nothing is due = %v, %v; want empty, not nil", claims, err)
	}
}

func testEndpointWithID(id string) storage.Endpoint {
	e := testEndpoint()
	e.ID = id
	return e
}

// The claim must walk the ordered partial indexes and stop at its limit:
// the (state, id) index would make it read and sort every pending row.
func TestClaimWalksTheOrderedIndexes(t *testing.T) {
	s, _ := openStore(t)
	rows, err := s.writer.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+claimSQL,
		sql.Named("now", 1), sql.Named("lease", 1), sql.Named("limit", 8))
	if err != nil {
		t.Fatalf("explain claim: %v", err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(detail + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"INDEX webhook_deliveries_pending_order (next_attempt_at<?)", "INDEX webhook_deliveries_processing_order"} {
		if !strings.Contains(plan.String(), want) {
			t.Errorf("claim plan lacks %q:\n%s", want, plan.String())
		}
	}
	if strings.Contains(plan.String(), "webhook_deliveries_state") {
		t.Errorf("claim plan reads the (state, id) index:\n%s", plan.String())
	}
}

// The fan-out's read must probe its indexes, not scan the endpoints: the
// form index's key for each form, the partial index of every-form
// endpoints, and each endpoint found by its key. SQLite plans without
// statistics here, as a fresh file does.
func TestFanOutProbesTheFormIndex(t *testing.T) {
	s, _ := openStore(t)
	rows, err := s.writer.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+fanOutEndpointsSQL, `["form_a"]`, `[]`)
	if err != nil {
		t.Fatalf("explain fan-out: %v", err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(detail + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SEARCH e USING INDEX sqlite_autoindex_webhook_endpoints_1 (id=?)",
		"SEARCH f USING PRIMARY KEY (form_id=?)", "USING INDEX webhook_endpoints_every_form"} {
		if !strings.Contains(plan.String(), want) {
			t.Errorf("fan-out plan lacks %q:\n%s", want, plan.String())
		}
	}
	for _, line := range strings.Split(plan.String(), "\n") {
		if line == "SCAN e" || line == "SCAN f" || line == "SCAN a" {
			t.Errorf("fan-out plan scans a table (%s):\n%s", line, plan.String())
		}
	}
}
