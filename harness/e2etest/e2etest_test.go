package e2etest

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/pluginbin"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
)

// pluginDir holds the http plugin, the one every machine can run.
var pluginDir string

func TestMain(m *testing.M) {
	PluginMain(m, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}, &pluginDir)
}

func TestFastConfig(t *testing.T) {
	t.Parallel()
	store := Backends()["sqlite"](t)
	host := StartHost(t, pluginDir, "http", nil)
	for _, attempts := range []int{1, 30, 200} {
		cfg := FastConfig(attempts)
		if cfg.MaxCycleAttempts != attempts {
			t.Fatalf("FastConfig(%d) allows %d attempts", attempts, cfg.MaxCycleAttempts)
		}
		if _, err := worker.New(store, host, cfg, Logger()); err != nil {
			t.Fatalf("FastConfig(%d) is not a config the pool takes: %v", attempts, err)
		}
	}
}

// StartHost starts the real plugin process with the settings it is given:
// the http plugin's guard refuses a loopback receiver unless its
// allowed_networks setting lets it through.
func TestStartHost(t *testing.T) {
	t.Parallel()
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	tests := []struct {
		name     string
		settings map[string]string
		want     transport.OutcomeKind
	}{
		{"no settings: loopback refused", nil, transport.OutcomePermanent},
		{"loopback allowed", map[string]string{"allowed_networks": "127.0.0.1"}, transport.OutcomeDelivered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			host := StartHost(t, pluginDir, "http", tt.settings)
			if names := host.Names(); len(names) != 1 || names[0] != "http" {
				t.Fatalf("host runs %v, want the one plugin http", names)
			}
			msg := transport.Message{DeliveryID: "dlv_1", Attempt: 1, Endpoint: transport.Endpoint{URL: recv.URL}, Body: []byte("{}")}
			out := host.Send(t.Context(), "http", msg, time.Now().Add(5*time.Second))
			if out.Kind != tt.want {
				t.Fatalf("Send to a loopback receiver = %+v, want %v", out, tt.want)
			}
		})
	}
}

func TestCreateEndpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		transport string
		config    map[string]string
	}{
		{"nats", map[string]string{"subject": "forms.new"}},
		{"redis", map[string]string{"stream": "forms", "maxlen": "100"}},
		{"kafka", map[string]string{"topic": "forms.submissions"}},
	}
	for backend, open := range Backends() {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			for _, tt := range tests {
				secret := CreateEndpoint(t, store, tt.transport, tt.config)
				if !strings.HasPrefix(secret, "whsec_") {
					t.Fatalf("CreateEndpoint returned %q, want a whsec_ signing secret", secret)
				}
				eps, err := store.EndpointList(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, ep := range eps {
					if ep.Transport != tt.transport {
						continue
					}
					found = true
					if !maps.Equal(ep.Config, tt.config) || len(ep.Secrets) != 1 || ep.Secrets[0].Reveal() != secret {
						t.Fatalf("stored endpoint %+v, want transport %s, config %v and the returned secret", ep, tt.transport, tt.config)
					}
				}
				if !found {
					t.Fatalf("no %s endpoint stored", tt.transport)
				}
			}
		})
	}
}

// Under the test command BuildPlugins copies the binary the run built
// instead of building: the package named here does not exist, so a build
// would fail. The copy is a file of its own, so a test that damages its
// plugin leaves the run's alone.
func TestBuildPluginsTakesTheRunsBuild(t *testing.T) {
	const pkg = "example.com/nowhere/plugins/fake"
	run := t.TempDir()
	built := filepath.Join(run, pluginbin.FileName(pkg))
	if err := os.WriteFile(built, []byte("the run's binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(pluginbin.DirEnv, run)
	dir := t.TempDir()
	for range 2 { // again over its own copy, as a second build would
		if err := BuildPlugins(dir, map[string]string{"fake": pkg}); err != nil {
			t.Fatal(err)
		}
	}
	got := filepath.Join(dir, pluginhost.BinaryPrefix+"fake")
	fi, err := os.Stat(got)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("%s is not executable: %s", got, fi.Mode())
	}
	if err := os.WriteFile(got, []byte("damaged"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(built); err != nil || string(b) != "the run's binary" {
		t.Errorf("the run's binary holds %q, %v after a test changed its copy", b, err)
	}
}
