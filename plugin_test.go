package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/proctest"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/plugins/shipped"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/pluginhost"
)

// TestMain makes this package's test binary answer `plugin NAME` as the
// hymical binary does: serve and demo run the built-in transports as
// children of their own executable, which in these tests is the test
// binary, so the tests that run them in process run the real thing.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == pluginCommand {
		exit(runPlugin(context.Background(), os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestPluginCommandRefusesWhatItCannotServe(t *testing.T) {
	t.Setenv(transport.MagicCookieKey, "")
	tests := []struct {
		name      string
		args      []string
		wantErr   string
		wantIs    error
		wantInOut string // on stderr
	}{
		{"a transport not shipped", []string{"plugin", "foo"}, `"foo"; the shipped transports are amqp, http, kafka, mqtt, nats, redis`, shipped.ErrUnknown, ""},
		{"no name", []string{"plugin"}, "plugin takes one transport name, one of amqp, http, kafka, mqtt, nats, redis", nil, "usage: hymical plugin NAME"},
		{"two names", []string{"plugin", "http", "nats"}, "plugin takes one transport name", nil, "usage: hymical plugin NAME"},
		{"run by hand, without the host's handshake", []string{"plugin", "http"}, "plugin http was not started by a hymical server", nil, "serves the http transport to a hymical server, which starts it itself"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("hymical %s = %v, want an error saying %q", strings.Join(tt.args, " "), err, tt.wantErr)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
			if !strings.Contains(stderr.String(), tt.wantInOut) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantInOut, stderr.String())
			}
			if stdout.Len() > 0 {
				// A plugin's stdout is go-plugin's handshake line.
				t.Errorf("wrote to stdout: %q", stdout.String())
			}
		})
	}
}

// buildHymical builds the hymical command into a directory of its own, as
// the README does, and returns its path.
func buildHymical(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hymical")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = proctest.KillExecutable(bin) })
	return bin
}

// The built hymical binary is the http transport, through the same
// handshake as hymical-plugin-http, with no plugin file anywhere: the host
// starts `hymical plugin http`, it delivers to a receiver on loopback, and
// when that child is killed the host starts another and delivers again.
// The host is the server's: a crash of the transport does not reach it.
func TestBuiltInHTTPTransportDeliversAndIsRestartedAfterACrash(t *testing.T) {
	t.Parallel()
	bin := buildHymical(t)
	var got atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) == `{"ok":true}` {
			got.Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()

	builtIn, err := builtInTransports()
	if err != nil {
		t.Fatal(err)
	}
	// Not this test binary: the hymical the README builds.
	builtIn.Executable = bin
	builtIn.Names = []string{"http"}
	emptyDir := t.TempDir()
	host, err := pluginhost.New(context.Background(), pluginhost.Config{
		Dir:     emptyDir,
		BuiltIn: builtIn,
		Plugins: []pluginhost.PluginConfig{{Name: "http", Settings: map[string]string{"allowed_networks": "127.0.0.0/8"}}},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("pluginhost.New: %v", err)
	}
	defer host.Close()
	if p := host.Plugins(); len(p) != 1 || !p[0].BuiltIn || p[0].Path != bin || strings.Join(p[0].Args, " ") != "plugin http" {
		t.Fatalf("Plugins() = %+v, want http built into %s", p, bin)
	}
	send := func() transport.Outcome {
		return host.Send(context.Background(), "http", transport.Message{
			DeliveryID: "dlv_builtin", Attempt: 1, Body: []byte(`{"ok":true}`),
			Headers:  []transport.Header{{Name: "Content-Type", Value: "application/json"}},
			Endpoint: transport.Endpoint{URL: recv.URL},
		}, time.Now().Add(10*time.Second))
	}
	if out := send(); out.Kind != transport.OutcomeDelivered || out.StatusCode != http.StatusNoContent {
		t.Fatalf("first send: %+v, want delivered with 204", out)
	}

	killed, err := proctest.KillExecutable(bin)
	if err != nil || killed != 1 {
		t.Fatalf("killed %d processes running %s (%v), want the one hymical plugin http", killed, bin, err)
	}
	// Between sends: wait until the host has seen the process go, so the
	// next send finds it gone rather than racing its death.
	testwait.For(t, 5*time.Second, func() error {
		if host.Plugins()[0].Running {
			return errors.New("the host has not seen the killed hymical plugin http go")
		}
		return nil
	})
	if out := send(); out.Kind != transport.OutcomeDelivered {
		t.Fatalf("send after the kill: %+v, want delivered by a restarted hymical plugin http", out)
	}
	if n := host.Restarts("http"); n != 1 {
		t.Errorf("Restarts(http) = %d, want 1", n)
	}
	if n := got.Load(); n != 2 {
		t.Errorf("the receiver got %d deliveries, want 2", n)
	}
	if alive, _ := proctest.Alive(bin); len(alive) != 1 {
		t.Errorf("%d processes run %s, want the one restarted plugin", len(alive), bin)
	}
}
