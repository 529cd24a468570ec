package api_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
	"github.com/hymical/hymical/storage/sqlite"
)

const (
	adminToken = "test-admin-token-0123456789abcdef0123"
	ingestKey  = "test-ingest-key-fedcba9876543210"
	ingestKey2 = "test-ingest-key-second-0000000000"
)

// The real plugin hosts every test shares, started once in TestMain with
// the real plugins/http binary: loopbackHost allows 127.0.0.0/8 so a
// receiver on loopback can be registered; strictHost has the plugin's
// default guard, which refuses loopback.
var (
	loopbackHost *pluginhost.Host
	strictHost   *pluginhost.Host
	// httpPlugin is the built plugins/http binary, for a test that needs a
	// host of its own.
	httpPlugin string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "hymical-api-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, pluginhost.BinaryPrefix+"http"), "../../plugins/http").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build the http plugin: %v\n%s", err, out)
		return 1
	}
	httpPlugin = filepath.Join(dir, pluginhost.BinaryPrefix+"http")
	ctx := context.Background()
	loopbackHost, err = pluginhost.New(ctx, pluginhost.Config{Dir: dir, Plugins: []pluginhost.PluginConfig{{
		Name:     "http",
		Settings: map[string]string{"allowed_networks": "127.0.0.0/8", "connect_timeout": "1s", "read_timeout": "2s"},
	}}}, quietLogger())
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the loopback plugin host:", err)
		return 1
	}
	defer loopbackHost.Close()
	strictHost, err = pluginhost.New(ctx, pluginhost.Config{Dir: dir}, quietLogger())
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the strict plugin host:", err)
		return 1
	}
	defer strictHost.Close()
	return m.Run()
}

func quietLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// backend opens a fresh migrated store and a direct connection to the same
// database, used only to count rows, so a test can prove a refused request
// wrote nothing.
type backend struct {
	open func(t *testing.T) (storage.Store, func(table string) int)
}

var backends = map[string]backend{
	"sqlite": {open: func(t *testing.T) (storage.Store, func(string) int) {
		path := filepath.Join(t.TempDir(), "hymical.db")
		s, err := sqlite.Open(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		migrate(t, s)
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return s, func(table string) int {
			t.Helper()
			var n int
			if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
				t.Fatalf("count %s: %v", table, err)
			}
			return n
		}
	}},
	"postgres": {open: func(t *testing.T) (storage.Store, func(string) int) {
		dsn := pgtest.NewDatabase(t)
		s, err := postgres.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		migrate(t, s)
		return s, func(table string) int {
			t.Helper()
			conn, err := pgx.Connect(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			var n int
			if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
				t.Fatalf("count %s: %v", table, err)
			}
			return n
		}
	}},
}

func migrate(t *testing.T, s storage.Store) {
	t.Helper()
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
}

// forEachBackend runs fn as a parallel subtest on every backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// fixture is the real handler on a real loopback server over a real store.
type fixture struct {
	t     *testing.T
	store storage.Store
	count func(table string) int
	srv   *httptest.Server
	logs  *syncbuf.Buffer
}

// newFixture serves the API over a fresh store of backend b. edit may
// change the options before New.
func newFixture(t *testing.T, b backend, edit func(*api.Options)) *fixture {
	t.Helper()
	store, count := b.open(t)
	return newFixtureOn(t, store, count, edit)
}

// newFixtureOn serves the API over a store the test has opened.
func newFixtureOn(t *testing.T, store storage.Store, count func(table string) int, edit func(*api.Options)) *fixture {
	t.Helper()
	logs := &syncbuf.Buffer{}
	opts := api.Options{
		Store:      store,
		Transports: loopbackHost,
		AdminToken: adminToken,
		IngestKeys: []string{ingestKey, ingestKey2},
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&opts)
	}
	h, err := api.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{t: t, store: store, count: count, srv: srv, logs: logs}
}

// response is one answer, its body kept raw and decoded.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// req is one request to send. Body is sent as is when it is a string or
// []byte, and as JSON otherwise; nil sends none.
type req struct {
	method, path, token string
	body                any
	header              map[string]string
}

func (f *fixture) send(r req) response {
	f.t.Helper()
	var body io.Reader
	switch b := r.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		body = bytes.NewReader(enc)
	}
	hr, err := http.NewRequestWithContext(f.t.Context(), r.method, f.srv.URL+r.path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if r.body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		if v == "" {
			hr.Header.Del(k)
			continue
		}
		hr.Header.Set(k, v)
	}
	resp, err := f.srv.Client().Do(hr)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	out := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			f.t.Fatalf("%s %s answered Content-Type %q, want application/json: %s", r.method, r.path, ct, raw)
		}
		if err := json.Unmarshal(raw, &out.body); err != nil {
			f.t.Fatalf("%s %s answered a body that is not a JSON object: %v: %s", r.method, r.path, err, raw)
		}
	}
	return out
}

// admin sends a request with the admin token.
func (f *fixture) admin(method, path string, body any) response {
	f.t.Helper()
	return f.send(req{method: method, path: path, token: adminToken, body: body})
}

// must fails the test unless the answer has the wanted status.
func (r response) must(t *testing.T, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	return r
}

// errorCode returns the code of an error answer, failing the test when the
// answer is not in the one error shape.
func (r response) errorCode(t *testing.T) (code, message string) {
	t.Helper()
	e, ok := r.body["error"].(map[string]any)
	if !ok || len(r.body) != 1 {
		t.Fatalf("answer is not {\"error\":{…}}: %s", r.raw)
	}
	code, _ = e["code"].(string)
	message, _ = e["message"].(string)
	if code == "" || message == "" || len(e) != 2 {
		t.Fatalf("error has no code or message, or other fields: %s", r.raw)
	}
	return code, message
}

func (r response) str(key string) string {
	s, _ := r.body[key].(string)
	return s
}

func (r response) list(key string) []any {
	l, _ := r.body[key].([]any)
	return l
}

// createEndpoint registers an endpoint through the API and returns its id
// and its one-time secret.
func (f *fixture) createEndpoint(body map[string]any) (id, secret string) {
	f.t.Helper()
	r := f.admin("POST", "/v1/endpoints", body).must(f.t, http.StatusCreated)
	id, secret = r.str("id"), r.str("secret")
	if id == "" || !strings.HasPrefix(secret, "whsec_") {
		f.t.Fatalf("create answered no id or secret: %s", r.raw)
	}
	return id, secret
}

// submit posts a submission for form with the ingest key.
func (f *fixture) submit(form string, data any) response {
	f.t.Helper()
	return f.send(req{method: "POST", path: "/v1/forms/" + form + "/submissions", token: ingestKey, body: data})
}
