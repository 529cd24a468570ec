//go:build unix

package config_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/pluginhost"
)

// TestPluginHostRunsTheRealHTTPPlugin builds the http plugin into a plugin
// directory, loads a config that points at it, and sends through a real
// plugin host: the allowed networks and the read timeout from the webhook
// section must reach the plugin process.
func TestPluginHostRunsTheRealHTTPPlugin(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test builds the http plugin and needs the go command: %v", err)
	}
	dir := t.TempDir()
	build := exec.Command(goBin, "build", "-o", filepath.Join(dir, pluginhost.BinaryPrefix+config.HTTPPlugin), "github.com/hymical/hymical/plugins/http")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the http plugin: %v\n%s", err, out)
	}

	slow := 1500 * time.Millisecond
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(slow)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close) // the parallel subtests outlive this function

	start := func(t *testing.T, env ...string) *pluginhost.Host {
		t.Helper()
		cfg, _ := mustLoad(t, "", withToken(append([]string{"FORMS_PLUGINS_DIR=" + dir}, env...)...))
		h, err := pluginhost.New(context.Background(), cfg.PluginHost(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("pluginhost.New: %v", err)
		}
		t.Cleanup(h.Close)
		return h
	}
	send := func(h *pluginhost.Host, path string) transport.Outcome {
		msg := transport.Message{DeliveryID: "dlv_1", Attempt: 1, Endpoint: transport.Endpoint{URL: receiver.URL + path}, Body: []byte(`{}`)}
		return h.Send(context.Background(), config.HTTPPlugin, msg, time.Now().Add(10*time.Second))
	}

	t.Run("loopback is refused without allowed_networks", func(t *testing.T) {
		t.Parallel()
		out := send(start(t), "/")
		if out.Kind == transport.OutcomeDelivered || !strings.Contains(out.Error, "allowed_networks") {
			t.Errorf("outcome = %+v, want a refusal naming allowed_networks", out)
		}
	})
	t.Run("allowed_networks and the read timeout reach the plugin", func(t *testing.T) {
		t.Parallel()
		h := start(t, "FORMS_WEBHOOK_ALLOWED_NETWORKS=127.0.0.0/8,::1", "FORMS_WEBHOOK_READ_TIMEOUT_SECONDS=1",
			"FORMS_WORKER_LEASE_SECONDS=20")
		if out := send(h, "/"); out.Kind != transport.OutcomeDelivered || out.StatusCode != http.StatusNoContent {
			t.Errorf("outcome = %+v, want delivered 204", out)
		}
		out := send(h, "/slow")
		if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "read_timeout 1s") {
			t.Errorf("outcome = %+v, want retryable naming read_timeout 1s", out)
		}
	})
}
