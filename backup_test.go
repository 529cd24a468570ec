package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/storage"
)

func TestTakeTo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		to       string
		rest     []string
		errorHas string
	}{
		{args: []string{"--to", "b.db"}, to: "b.db"},
		{args: []string{"--config=c.yaml", "-to=b.db", "--database.url=sqlite:x.db"}, to: "b.db", rest: []string{"--config=c.yaml", "--database.url=sqlite:x.db"}},
		{args: []string{"--database.url", "sqlite:x.db", "--to", "b.db"}, to: "b.db", rest: []string{"--database.url", "sqlite:x.db"}},
		{args: []string{"--config=c.yaml"}, errorHas: "needs --to FILE"},
		{args: []string{"--to"}, errorHas: "--to needs a value"},
		{args: []string{"--to="}, errorHas: "--to needs a value"},
		{args: []string{"--to", "a.db", "--to=b.db"}, errorHas: "twice"},
	} {
		to, rest, err := takeTo(tc.args)
		switch {
		case tc.errorHas != "":
			if err == nil || !strings.Contains(err.Error(), tc.errorHas) {
				t.Errorf("takeTo(%q) = %v, want an error saying %q", tc.args, err, tc.errorHas)
			}
		case err != nil || to != tc.to || !slices.Equal(rest, tc.rest):
			t.Errorf("takeTo(%q) = %q, %q, %v; want %q, %q", tc.args, to, rest, err, tc.to, tc.rest)
		}
	}
}

// TestBackupReadsServesConfiguration: hymical backup finds the database
// in the config file serve is given, and needs no admin token, which only
// serving does.
func TestBackupReadsServesConfiguration(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "hymical.db")
	s, err := database.Open(t.Context(), "sqlite:"+db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	cfg := filepath.Join(dir, "hymical.yaml")
	if err := os.WriteFile(cfg, []byte("database:\n  url: sqlite:"+db+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"FORMS_SERVER_ADMIN_TOKEN", "FORMS_DATABASE_URL"} {
		t.Setenv(name, "") // restored after the test
		os.Unsetenv(name)
	}
	to := filepath.Join(dir, "backup.db")
	var out bytes.Buffer
	if err := run(t.Context(), []string{"backup", "--config", cfg, "--to", to}, &out, &out); err != nil {
		t.Fatalf("hymical backup --config: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "copied "+db) {
		t.Errorf("hymical backup does not say it copied %s:\n%s", db, out.String())
	}
	if _, err := os.Stat(to); err != nil {
		t.Error(err)
	}
}

// TestBackupUnderLoadRestores is a self-hoster's backup and restore, with
// real parts: hymical backup copies the database of a running serve while
// submissions flow in and deliveries complete at a receiver on loopback;
// the copy holds every submission accepted before the backup began, is
// consistent (each delivery's attempts counter matches its attempt rows)
// and agrees with the source on every delivery that had finished; put
// back in a new directory with the key file, it runs a server that has
// the same endpoints and deliveries, whose every endpoint's secret opens
// and signs a delivery the receiver verifies with the secret it was given
// at the start.
func TestBackupUnderLoadRestores(t *testing.T) {
	src, restored := t.TempDir(), t.TempDir()
	if err := e2etest.BuildPlugins(src, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	const token = "test-admin-token-0123456789"
	t.Setenv("FORMS_SERVER_ADMIN_TOKEN", token)
	// Short timeouts, so a claim the copy caught in flight is taken over
	// soon by the restored server.
	flags := []string{"--worker.retry_delays=50ms", "--worker.max_attempts=2",
		"--webhook.connect_timeout_seconds=1", "--webhook.read_timeout_seconds=1", "--worker.lease_seconds=5"}

	// The receiver: /ok answers 200, /slow 200 after a while, /fail 500,
	// so deliveries end delivered and failed, and some are in flight.
	// Every request is verified first, with the secret its endpoint was
	// created with.
	var mu sync.Mutex
	secrets := map[string]string{} // path → signing secret
	verified := map[string]bool{}  // webhook-id → verified
	var bad []string               // what failed to verify
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		secret := secrets[r.URL.Path]
		err := webhook.Verify(r.Header, body, secret)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s %s: %v", r.URL.Path, r.Header.Get("webhook-id"), err))
		} else {
			verified[r.Header.Get("webhook-id")] = true
		}
		mu.Unlock()
		switch r.URL.Path {
		case "/slow":
			time.Sleep(30 * time.Millisecond)
		case "/fail":
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer recv.Close()

	ctx := t.Context()
	base, _, _ := startServe(t, src, flags...)
	api := apiCaller(t, token)
	endpointIDs := map[string]string{} // endpoint id → path
	for _, path := range []string{"/ok", "/slow", "/fail"} {
		var out bytes.Buffer
		if err := run(ctx, []string{"endpoints", "add", "--server", base, "--url", recv.URL + path, "--form", "form_backup"}, &out, &out); err != nil {
			t.Fatalf("endpoints add: %v\n%s", err, out.String())
		}
		secret := regexp.MustCompile(`whsec_[A-Za-z0-9+/=]+`).FindString(out.String())
		id := regexp.MustCompile(`ep_[0-9a-f]{32}`).FindString(out.String())
		if secret == "" || id == "" {
			t.Fatalf("endpoints add printed no id or secret:\n%s", out.String())
		}
		mu.Lock()
		secrets[path] = secret
		mu.Unlock()
		endpointIDs[id] = path
	}

	// The load: submissions one after another until stopped, each
	// recorded with whether it was accepted before the backup began.
	var (
		loadMu        sync.Mutex
		backupStarted bool
		backupDone    bool
		acceptedFirst []string // event ids answered 202 before the backup began
		acceptedAfter int      // how many were answered after it ended
	)
	stopLoad := make(chan struct{})
	var load sync.WaitGroup
	load.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			default:
			}
			var res struct {
				EventID string `json:"event_id"`
			}
			api("POST", base+"/v1/forms/form_backup/submissions", fmt.Sprintf(`{"n":%d}`, i), http.StatusAccepted, &res)
			loadMu.Lock()
			if !backupStarted {
				acceptedFirst = append(acceptedFirst, res.EventID)
			} else if backupDone {
				acceptedAfter++
			}
			loadMu.Unlock()
		}
	})
	defer func() {
		select {
		case <-stopLoad:
		default:
			close(stopLoad)
		}
		load.Wait()
	}()

	// The backup starts once deliveries have both been delivered and failed.
	testwait.For(t, 30*time.Second, func() error {
		for _, state := range []string{"delivered", "failed"} {
			var page deliveryPage
			api("GET", base+"/v1/deliveries?limit=1&state="+state, "", http.StatusOK, &page)
			if len(page.Deliveries) == 0 {
				return fmt.Errorf("no delivery is %s yet", state)
			}
		}
		return nil
	})
	loadMu.Lock()
	backupStarted = true
	loadMu.Unlock()
	copyPath := filepath.Join(t.TempDir(), "backup.db")
	var backupOut bytes.Buffer
	if err := run(ctx, []string{"backup", "--to", copyPath, "--database.url=sqlite:" + filepath.Join(src, "hymical.db")}, &backupOut, &backupOut); err != nil {
		t.Fatalf("hymical backup: %v\n%s", err, backupOut.String())
	}
	keyFile := filepath.Join(src, "hymical.db.key")
	for _, want := range []string{"copied", "encrypted under the key with id", keyFile, "keep the key apart from the copy"} {
		if !strings.Contains(backupOut.String(), want) {
			t.Errorf("hymical backup does not say %q:\n%s", want, backupOut.String())
		}
	}
	loadMu.Lock()
	backupDone = true
	loadMu.Unlock()
	// Submissions go on past the copy for a while.
	testwait.For(t, 30*time.Second, func() error {
		loadMu.Lock()
		defer loadMu.Unlock()
		if acceptedAfter < 20 {
			return fmt.Errorf("%d submissions accepted since the backup ended, want 20", acceptedAfter)
		}
		return nil
	})
	close(stopLoad)
	load.Wait()

	// The copy, read as it is: consistent, and holding what was
	// accepted before it began.
	copied := readDeliveries(t, copyPath)
	t.Logf("the copy: %d endpoints, %d events, deliveries by state %v", copied.endpoints, len(copied.events), copied.byState())
	if len(copied.inconsistent) > 0 {
		t.Errorf("deliveries whose attempts counter does not match their attempt rows in the copy: %v", copied.inconsistent)
	}
	if copied.endpoints != len(endpointIDs) {
		t.Errorf("the copy has %d endpoints, want %d", copied.endpoints, len(endpointIDs))
	}
	loadMu.Lock()
	for _, id := range acceptedFirst {
		if !copied.events[id] {
			t.Errorf("event %s, accepted before the backup began, is not in the copy", id)
		}
	}
	t.Logf("%d submissions accepted before the backup began", len(acceptedFirst))
	loadMu.Unlock()
	// What had finished in the copy is what the source still says:
	// terminal is terminal.
	source := readDeliveries(t, filepath.Join(src, "hymical.db"))
	if len(source.deliveries) <= len(copied.deliveries) {
		t.Errorf("the source has %d deliveries, the copy %d: the load did not go on past the backup", len(source.deliveries), len(copied.deliveries))
	}
	for id, d := range copied.deliveries {
		if d.terminal() && source.deliveries[id] != d {
			t.Errorf("delivery %s is %+v in the copy and %+v in the source", id, d, source.deliveries[id])
		}
	}

	// Restore: the copy as the database file of a new directory, the key
	// file beside it, and a server started on them.
	for from, to := range map[string]string{copyPath: filepath.Join(restored, "hymical.db"), keyFile: filepath.Join(restored, "hymical.db.key")} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rbase, _, _ := startServe(t, restored, append(flags, "--plugins.dir="+src)...)
	var eps struct {
		Endpoints []struct {
			ID string `json:"id"`
		} `json:"endpoints"`
	}
	api("GET", rbase+"/v1/endpoints?limit=500", "", http.StatusOK, &eps)
	if len(eps.Endpoints) != copied.endpoints {
		t.Errorf("the restored server has %d endpoints, the copy %d", len(eps.Endpoints), copied.endpoints)
	}
	got := listDeliveries(t, api, rbase)
	restoredStates := map[string]int{}
	for _, d := range got {
		restoredStates[d.state]++
	}
	// Read while its workers already run, so pending and processing may
	// have moved on; the terminal ones are compared one by one below.
	t.Logf("the restored server: %d endpoints, deliveries by state %v", len(eps.Endpoints), restoredStates)
	if len(got) != len(copied.deliveries) {
		t.Errorf("the restored server has %d deliveries, the copy %d", len(got), len(copied.deliveries))
	}
	for id, d := range copied.deliveries {
		r, ok := got[id]
		switch {
		case !ok:
			t.Errorf("delivery %s of the copy is not on the restored server", id)
		case d.terminal() && r != d:
			t.Errorf("delivery %s is %+v in the copy and %+v on the restored server", id, d, r)
		case r.attempts < d.attempts:
			t.Errorf("delivery %s has %d attempts on the restored server, %d in the copy", id, r.attempts, d.attempts)
		}
	}
	// The restored server finishes what was left, and every endpoint's
	// secret signs a test delivery its receiver verifies.
	var tests []string
	for id := range endpointIDs {
		var d struct {
			ID string `json:"id"`
		}
		api("POST", rbase+"/v1/endpoints/"+id+"/test", "", http.StatusAccepted, &d)
		tests = append(tests, d.ID)
	}
	testwait.For(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range tests {
			if !verified[id] {
				return fmt.Errorf("the test delivery %s from the restored server was not verified at its receiver", id)
			}
		}
		return nil
	})
	testwait.For(t, 60*time.Second, func() error {
		for id, d := range listDeliveries(t, api, rbase) {
			if !d.terminal() {
				return fmt.Errorf("delivery %s is still %s on the restored server", id, d.state)
			}
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("requests that did not verify: %q", bad)
	}
}

// delivery is what the test compares of a delivery.
type delivery struct {
	state    string
	attempts int
}

func (d delivery) terminal() bool { return d.state == "delivered" || d.state == "failed" }

// snapshot is what readDeliveries finds in a database file.
type snapshot struct {
	endpoints    int
	events       map[string]bool
	deliveries   map[string]delivery
	inconsistent []string // deliveries whose attempts counter is not their attempt rows' count
}

func (s snapshot) byState() map[string]int {
	m := map[string]int{}
	for _, d := range s.deliveries {
		m[d.state]++
	}
	return m
}

// readDeliveries reads a database file directly, read-only.
func readDeliveries(t *testing.T, path string) snapshot {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := snapshot{events: map[string]bool{}, deliveries: map[string]delivery{}}
	if err := db.QueryRow(`SELECT count(*) FROM webhook_endpoints WHERE deleted_at IS NULL`).Scan(&s.endpoints); err != nil {
		t.Fatal(err)
	}
	query := func(q string, scan func(*sql.Rows) error) {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				t.Fatal(err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	query(`SELECT id FROM webhook_events`, func(r *sql.Rows) error {
		var id string
		err := r.Scan(&id)
		s.events[id] = true
		return err
	})
	query(`SELECT d.id, d.state, d.attempts, (SELECT count(*) FROM webhook_delivery_attempts a WHERE a.delivery_id = d.id) FROM webhook_deliveries d`, func(r *sql.Rows) error {
		var id string
		var d delivery
		var rows int
		err := r.Scan(&id, &d.state, &d.attempts, &rows)
		s.deliveries[id] = d
		if rows != d.attempts {
			s.inconsistent = append(s.inconsistent, fmt.Sprintf("%s: attempts %d, %d attempt rows", id, d.attempts, rows))
		}
		return err
	})
	return s
}

type deliveryPage struct {
	Deliveries []struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Attempts int    `json:"attempts"`
	} `json:"deliveries"`
	NextCursor *string `json:"next_cursor"`
}

// listDeliveries reads every delivery through a server's API.
func listDeliveries(t *testing.T, api func(method, url, body string, want int, out any), base string) map[string]delivery {
	t.Helper()
	got := map[string]delivery{}
	cursor := ""
	for {
		var page deliveryPage
		api("GET", base+"/v1/deliveries?limit=500"+cursor, "", http.StatusOK, &page)
		for _, d := range page.Deliveries {
			got[d.ID] = delivery{state: d.State, attempts: d.Attempts}
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			return got
		}
		cursor = "&cursor=" + *page.NextCursor
	}
}

// apiCaller calls a server's API with the admin token and decodes the
// answer, failing the test on any other status.
func apiCaller(t *testing.T, token string) func(method, url, body string, want int, out any) {
	return func(method, url, body string, want int, out any) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != want {
			t.Errorf("%s %s: %d, want %d: %s", method, url, res.StatusCode, want, b)
			return
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Errorf("%s %s: %v: %s", method, url, err, b)
			}
		}
	}
}
