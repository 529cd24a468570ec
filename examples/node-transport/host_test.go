//go:build unix

package nodetransport

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/syncbuf"
	sdk "github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/pluginhost"
)

// TestHostDrivesThePlugin runs the plugin under the server's own plugin
// host, which finds it in the plugin directory by its name, launches it
// with go-plugin (AutoMTLS on, as always) and speaks protocol 2 to it.
func TestHostDrivesThePlugin(t *testing.T) {
	t.Parallel()
	dir := nodePlugin(t)
	logs := &syncbuf.Buffer{}
	outbox := t.TempDir()
	h, err := pluginhost.New(t.Context(), pluginhost.Config{
		Dir:     dir,
		Plugins: []pluginhost.PluginConfig{{Name: transport, Settings: map[string]string{"root": outbox}}},
	}, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("pluginhost.New: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			h.Close()
		}
		if t.Failed() {
			t.Logf("host log:\n%s", logs)
		}
	}()
	if names := h.Names(); len(names) != 1 || names[0] != transport {
		t.Fatalf("host runs %v, want [%s] found in the plugin directory", names, transport)
	}
	if !strings.Contains(logs.String(), "protocol=2") {
		t.Fatalf("the host did not negotiate protocol 2 with the plugin:\n%s", logs)
	}
	// Nothing about the plugin worries the host.
	if strings.Contains(logs.String(), "level=WARN") || strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("the host warns about the plugin:\n%s", logs)
	}
	ctx := t.Context()

	refused := []struct{ name, path, says string }{
		{"a missing path", "", `"path" is missing`},
		{"a relative path", "deliveries.jsonl", "relative path"},
		{"an unclean path", outbox + "/a/../b.jsonl", "write it clean"},
		{"a path outside the root", "/tmp/elsewhere.jsonl", "outside the directory"},
	}
	for _, tc := range refused {
		cfg := map[string]string{}
		if tc.path != "" {
			cfg["path"] = tc.path
		}
		err := h.Validate(ctx, transport, sdk.Endpoint{Config: cfg})
		if !errors.Is(err, sdk.ErrRejected) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Validate with %s = %v, want a refusal saying %q", tc.name, err, tc.says)
		}
	}

	// Many sends at once share the one stream; every one is answered with
	// its own outcome and lands once.
	file := filepath.Join(outbox, "deliveries.jsonl")
	ep := sdk.Endpoint{Config: map[string]string{"path": file}}
	const n = 40
	var wg sync.WaitGroup
	outcomes := make([]sdk.Outcome, n)
	for i := range n {
		wg.Go(func() {
			outcomes[i] = h.Send(ctx, transport, sdk.Message{
				DeliveryID: fmt.Sprintf("dlv_%02d", i), Attempt: 1, Endpoint: ep,
				Headers: []sdk.Header{{Name: "webhook-id", Value: fmt.Sprintf("dlv_%02d", i)}},
				Body:    []byte{'{', '}', 0xff}, // not UTF-8: goes in body_base64
			}, time.Now().Add(10*time.Second))
		})
	}
	wg.Wait()
	for i, out := range outcomes {
		if out.Kind != sdk.OutcomeDelivered {
			t.Fatalf("send %d = %+v, want delivered", i, out)
		}
	}
	seen := map[string]bool{}
	for _, l := range e2etest.ReadJSONL(t, file) {
		if l.Body != nil || string(l.BodyBase64) != "{}\xff" {
			t.Fatalf("line %+v: a body that is not UTF-8 must arrive exactly, in body_base64", l)
		}
		seen[l.DeliveryID] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct deliveries in the file, want %d", len(seen), n)
	}

	// A directory where the file should be: refused, nothing went out.
	sub := filepath.Join(outbox, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if out := h.Send(ctx, transport, sdk.Message{DeliveryID: "dlv_dir", Attempt: 1, Endpoint: sdk.Endpoint{Config: map[string]string{"path": sub}}}, time.Now().Add(10*time.Second)); out.Kind != sdk.OutcomePermanent || !out.NoRequest {
		t.Fatalf("Send to a directory = %+v, want permanent with no request", out)
	}

	// The plugin's log (hclog JSON on its stderr) reaches the host's log
	// at its own level, under the plugin's name, without the headers.
	waitFor(t, "the plugin's log line in the host's log", func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `level=INFO msg="appended message"`) && strings.Contains(line, "plugin=jsonl-node") && strings.Contains(line, "delivery_id=dlv_") {
				return true
			}
		}
		return false
	})
	if strings.Contains(logs.String(), "webhook-id") {
		t.Errorf("a header reached the host's log:\n%s", logs)
	}

	// Stopping the host asks the plugin to shut down; it exits by itself,
	// with status 0, rather than being killed after the host's grace.
	h.Close()
	closed = true
	waitFor(t, "the plugin's exit in the host's log", func() bool { return strings.Contains(logs.String(), `msg="plugin process exited"`) })
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `msg="plugin process exited"`) && strings.Contains(line, scriptName) && strings.Contains(line, "level=ERROR") {
			t.Errorf("the plugin did not exit cleanly when the host stopped it: %s", line)
		}
	}
}
