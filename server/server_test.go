package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server"
	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

var pluginDir string

func TestMain(m *testing.M) {
	e2etest.PluginMain(m, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}, &pluginDir)
}

const adminToken = "test-admin-token-0123456789"

// testConfig is the default configuration on a database of the test's,
// a free loopback port, the built http plugin, and loopback receivers.
func testConfig(dbURL string) config.Config {
	cfg := config.Default()
	cfg.Database.URL = config.DatabaseURL(dbURL)
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.AdminToken = config.Secret(adminToken)
	cfg.Plugins.Dir = pluginDir
	cfg.Webhook.AllowedNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	cfg.Workers.PollInterval = 20 * time.Millisecond
	return cfg
}

// running is a Server started by start. done is closed when Run has
// returned err.
type running struct {
	srv  *server.Server
	stop context.CancelFunc
	done chan struct{}
	err  error
}

// start builds the server with New and runs it until the test ends.
func start(t *testing.T, cfg config.Config) *running {
	t.Helper()
	if _, err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(t.Context(), cfg, e2etest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &running{srv: srv, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = srv.Run(ctx)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-r.done:
		case <-time.After(2 * time.Minute):
			t.Error("the server did not stop")
		}
	})
	return r
}

func (r *running) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+r.srv.Addr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type") + " " + resp.Header.Get("Location") + " " + string(body)
}

// With the console on, /console/ is the console and everything else is
// still the API; with it off, /console/ is the API's own 404.
func TestNewMountsTheConsoleBesideTheAPI(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("console.enabled=%v", on), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig("sqlite:" + filepath.Join(t.TempDir(), "hymical.db"))
			cfg.Console.Enabled = on
			r := start(t, cfg)
			code, got := r.get(t, "/console/login")
			switch {
			case on && (code != http.StatusOK || !strings.HasPrefix(got, "text/html")):
				t.Errorf("/console/login: %d %.200s, want the login page", code, got)
			case !on && (code != http.StatusNotFound || !strings.Contains(got, `"code":"not_found"`)):
				t.Errorf("/console/login with the console off: %d %.200s, want the API's 404", code, got)
			}
			if code, got := r.get(t, "/console"); on && (code/100 != 3 || !strings.Contains(got, " /console/ ")) {
				t.Errorf("/console: %d %.200s, want a redirect to /console/", code, got)
			}
			if code, got := r.get(t, "/v1/deliveries"); code != http.StatusOK || !strings.Contains(got, `"deliveries"`) {
				t.Errorf("/v1/deliveries: %d %.200s, want the API's list", code, got)
			}
		})
	}
}

// The portal is mounted whenever portal.enabled, with or without the
// console; off, /portal/ is the API's own 404.
func TestNewMountsThePortalBesideTheConsole(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ console, portal bool }{{true, true}, {false, true}, {true, false}} {
		t.Run(fmt.Sprintf("console.enabled=%v,portal.enabled=%v", tt.console, tt.portal), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig("sqlite:" + filepath.Join(t.TempDir(), "hymical.db"))
			cfg.Console.Enabled, cfg.Portal.Enabled = tt.console, tt.portal
			r := start(t, cfg)
			// An unknown link: the portal's own page, or the API's 404.
			code, got := r.get(t, "/portal/start?link=hympl_unknown")
			switch {
			case tt.portal && (code != http.StatusNotFound || !strings.HasPrefix(got, "text/html") || !strings.Contains(got, "does not open the portal")):
				t.Errorf("/portal/start: %d %.200s, want the portal's page for a link that does not open it", code, got)
			case !tt.portal && (code != http.StatusNotFound || !strings.Contains(got, `"code":"not_found"`)):
				t.Errorf("/portal/start with the portal off: %d %.200s, want the API's 404", code, got)
			}
			if code, _ := r.get(t, "/console/login"); (code == http.StatusOK) != tt.console {
				t.Errorf("/console/login: %d with console.enabled=%v", code, tt.console)
			}
			if code, got := r.get(t, "/v1/deliveries"); code != http.StatusOK || !strings.Contains(got, `"deliveries"`) {
				t.Errorf("/v1/deliveries: %d %.200s, want the API's list", code, got)
			}
		})
	}
}

// migratedPostgres makes a fresh PostgreSQL database, migrated, and opens
// a store on it for the test's own reads and writes.
func migratedPostgres(t *testing.T) (string, storage.Store) {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	direct, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	if _, err := direct.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	return dsn, direct
}

// loopbackEndpoint serves h on a loopback port until the test ends and
// creates an endpoint for form that sends to it.
func loopbackEndpoint(t *testing.T, store storage.Store, form string, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = rs.Serve(ln) }()
	t.Cleanup(func() { rs.Close() })
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: "http://" + ln.Addr().String() + "/",
		FormIDs: []string{form}, Secrets: []storage.Secret{storage.NewSecret(secret, nil)}, Config: map[string]string{}}}); err != nil {
		t.Fatal(err)
	}
}

// submitTo creates n submissions of form in store.
func submitTo(t *testing.T, store storage.Store, form string, n int) {
	t.Helper()
	for i := range n {
		ev, err := event.Submission(form, json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.EventCreate(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
}

// freezer is a TCP proxy to PostgreSQL that can stop answering: once
// frozen it forwards nothing more in either direction and accepts
// connections it never serves, the way a database host that hangs (or a
// network that drops everything) looks from the server.
type freezer struct {
	ln     net.Listener
	target string
	frozen chan struct{}
	once   sync.Once
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, frozen: make(chan struct{})}
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			c.Close()
		}
	})
	go f.serve()
	return f
}

func (f *freezer) freeze() { f.once.Do(func() { close(f.frozen) }) }

func (f *freezer) track(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns = append(f.conns, c)
}

func (f *freezer) serve() {
	for {
		client, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.track(client)
		select {
		case <-f.frozen:
			continue // accepted, never answered
		default:
		}
		db, err := net.Dial("tcp", f.target)
		if err != nil {
			client.Close()
			continue
		}
		f.track(db)
		go f.pipe(db, client)
		go f.pipe(client, db)
	}
}

// pipe copies src to dst until src ends or the proxy freezes; a chunk read
// after the freeze is dropped.
func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-f.frozen:
			<-make(chan struct{}) // hold the connection open, silent
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// slowReceiver verifies nothing and answers 204 after delay, counting the
// requests it got and the ones it answered.
type slowReceiver struct {
	got, answered atomic.Int64
	delay         time.Duration
}

func (s *slowReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.got.Add(1)
	time.Sleep(s.delay)
	w.WriteHeader(http.StatusNoContent)
	s.answered.Add(1)
}

// TestShutdownIsBoundedWhenTheDatabaseStopsAnswering stops a server on
// PostgreSQL while its sends are in flight. With the database answering,
// every request that went out is recorded before Run returns. With the
// database stopping to answer as the shutdown begins, Run still returns
// within about the lease, and no delivery is lost or failed: what could
// not be recorded is left processing, for its lease to expire and another
// server to send it again.
func TestShutdownIsBoundedWhenTheDatabaseStopsAnswering(t *testing.T) {
	t.Parallel()
	for _, stopsAnswering := range []bool{false, true} {
		t.Run(fmt.Sprintf("database stops answering=%v", stopsAnswering), func(t *testing.T) {
			t.Parallel()
			dsn, direct := migratedPostgres(t)
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			proxy := newFreezer(t, u.Host)
			u.Host = proxy.ln.Addr().String()

			recv := &slowReceiver{delay: 1500 * time.Millisecond}
			loopbackEndpoint(t, direct, "form_1", recv)
			const n = 20
			submitTo(t, direct, "form_1", n)

			cfg := testConfig(u.String())
			cfg.Console.Enabled = false
			cfg.Webhook.ConnectTimeoutSeconds, cfg.Webhook.ReadTimeoutSeconds = 1, 2
			cfg.Workers.LeaseSeconds = 6
			cfg.Workers.Concurrency = 4
			// One endpoint with slow sends: with the fair share on, it
			// would keep to one sender of the four (slow endpoints share
			// one room), and the test wants several requests out.
			cfg.Workers.EndpointShare = 1
			lease := time.Duration(cfg.Workers.LeaseSeconds) * time.Second
			r := start(t, cfg)

			testwait.For(t, 20*time.Second, func() error {
				if n := recv.got.Load() - recv.answered.Load(); n < 2 {
					return fmt.Errorf("%d requests in flight, want at least 2", n)
				}
				return nil
			})
			if stopsAnswering {
				proxy.freeze()
			}
			began := time.Now()
			r.stop()
			select {
			case <-r.done:
			case <-time.After(3 * lease):
				t.Fatalf("Run had not returned %s after the shutdown began (lease %s)", 3*lease, lease)
			}
			took := time.Since(began)
			t.Logf("Run returned %s after the shutdown began (lease %s): %v", took.Round(time.Millisecond), lease, r.err)
			if bound := lease + 3*time.Second; took > bound {
				t.Errorf("the shutdown took %s, more than the lease plus 3s (%s)", took, bound)
			}

			ctx := t.Context()
			st, err := direct.DeliveryStats(ctx, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			for _, c := range st.ByState {
				total += c
			}
			if total != n || st.ByState[storage.StateFailed] != 0 {
				t.Fatalf("deliveries by state %v: want all %d kept and none failed", st.ByState, n)
			}
			ds, err := direct.DeliveryList(ctx, storage.DeliveryListParams{Limit: n})
			if err != nil {
				t.Fatal(err)
			}
			recorded := 0
			for _, d := range ds {
				recorded += d.Attempts
			}
			answered := int(recv.answered.Load())
			if recorded > int(recv.got.Load()) {
				t.Errorf("%d attempts recorded but the receiver got only %d requests", recorded, recv.got.Load())
			}
			if !stopsAnswering && recorded != answered {
				t.Errorf("the receiver answered %d requests and %d attempts were recorded: with the database answering, every request that went out must be recorded on shutdown", answered, recorded)
			}
			if stopsAnswering && st.ByState[storage.StateProcessing] == 0 {
				t.Errorf("deliveries by state %v: the sends cut off from the database should be left processing", st.ByState)
			}
		})
	}
}

// TestFairShareHoldsAcrossServersOnOnePostgreSQL runs three servers on one
// database with a receiver that accepts and never answers, 200 deliveries
// to it ahead of 20 to a healthy one: each server keeps the hung endpoint
// to its share of its own senders (4 of 16), so the three together hold at
// most 12 of their 48, and the healthy deliveries go out at once.
func TestFairShareHoldsAcrossServersOnOnePostgreSQL(t *testing.T) {
	t.Parallel()
	dsn, direct := migratedPostgres(t)
	var hungNow, hungPeak, healthy atomic.Int64
	release := make(chan struct{})
	defer close(release)
	receivers := map[string]http.HandlerFunc{
		"form_hung": func(w http.ResponseWriter, r *http.Request) {
			n := hungNow.Add(1)
			defer hungNow.Add(-1)
			for p := hungPeak.Load(); n > p && !hungPeak.CompareAndSwap(p, n); p = hungPeak.Load() {
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		},
		"form_ok": func(w http.ResponseWriter, r *http.Request) {
			healthy.Add(1)
			w.WriteHeader(http.StatusNoContent)
		},
	}
	for form, h := range receivers {
		loopbackEndpoint(t, direct, form, h)
	}
	for range 3 {
		cfg := testConfig(dsn)
		cfg.Console.Enabled = false
		// 30 s to read, longer than the test runs: no hung send ends while
		// it does, so the requests the hung receiver holds open are exactly
		// the senders held on it.
		cfg.Webhook.ConnectTimeoutSeconds, cfg.Webhook.ReadTimeoutSeconds = 1, 30
		start(t, cfg)
	}
	submitTo(t, direct, "form_hung", 200)
	testwait.For(t, 10*time.Second, func() error {
		if n := hungNow.Load(); n < 8 {
			return fmt.Errorf("the hung receiver holds %d requests, want at least 8", n)
		}
		return nil
	})
	began := time.Now()
	submitTo(t, direct, "form_ok", 20)
	testwait.For(t, 10*time.Second, func() error {
		if n := healthy.Load(); n < 20 {
			return fmt.Errorf("the healthy receiver got %d of 20", n)
		}
		return nil
	})
	took := time.Since(began)
	t.Logf("three servers: the healthy endpoint's 20 in %s; the hung receiver held at most %d requests", took.Round(time.Millisecond), hungPeak.Load())
	// Without the share they wait for hung sends to time out (10 s and
	// more); 5 s leaves room for a loaded machine and still tells.
	if took > 5*time.Second {
		t.Errorf("the healthy endpoint's 20 deliveries took %s, want at most 5s", took)
	}
	if p := hungPeak.Load(); p > 12 {
		t.Errorf("the hung receiver held %d requests at once, more than 3 servers × a room of 4", p)
	}
}

// TestListenerBoundsEveryPhaseOfAConnection holds the API listener to its
// timeouts: a request whose body stalls is cut off at server.read_timeout,
// authorised or not; a keep-alive connection with nothing to do is closed
// at server.idle_timeout; headers over server.max_header_bytes get 431.
func TestListenerBoundsEveryPhaseOfAConnection(t *testing.T) {
	t.Parallel()
	cfg := testConfig("sqlite:" + filepath.Join(t.TempDir(), "hymical.db"))
	cfg.Console.Enabled = false
	cfg.Server.ReadTimeout, cfg.Server.IdleTimeout, cfg.Server.MaxHeaderBytes = time.Second, time.Second, 4096
	r := start(t, cfg)
	addr := r.srv.Addr().String()

	// closedWithin writes req on a new connection and reads until the
	// server closes it, and says how long that took and what it answered.
	closedWithin := func(t *testing.T, req string) (time.Duration, string) {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		began := time.Now()
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(conn)
		if err != nil {
			t.Fatalf("the connection was still open after 10s: %v (read %q)", err, got)
		}
		return time.Since(began), string(got)
	}
	for _, auth := range []string{"", "Authorization: Bearer " + adminToken + "\r\n"} {
		t.Run(fmt.Sprintf("a stalled body, authorised=%v", auth != ""), func(t *testing.T) {
			t.Parallel()
			took, _ := closedWithin(t, "POST /v1/endpoints HTTP/1.1\r\nHost: "+addr+"\r\n"+auth+
				"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"url\":")
			if took > 3*time.Second {
				t.Errorf("the stalled request's connection closed after %s, want about the 1s read timeout", took)
			}
		})
	}
	t.Run("an idle keep-alive connection", func(t *testing.T) {
		t.Parallel()
		took, got := closedWithin(t, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 200") {
			t.Errorf("/healthz answered %q", got)
		}
		if took > 3*time.Second {
			t.Errorf("the idle connection closed after %s, want about the 1s idle timeout", took)
		}
	})
	t.Run("headers over the limit", func(t *testing.T) {
		t.Parallel()
		_, got := closedWithin(t, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\nX-Padding: "+strings.Repeat("a", 8192)+"\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 431") {
			t.Errorf("8 KiB of headers over a 4 KiB limit: %.80q, want 431", got)
		}
	})
}
