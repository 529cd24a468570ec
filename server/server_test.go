package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/server"
	"github.com/hymical/hymical/server/config"
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
