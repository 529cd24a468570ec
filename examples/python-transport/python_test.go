//go:build unix

package pythontransport

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/plugincheck"
	"github.com/hymical/hymical/server/pluginhost"
)

// python is Debian's interpreter, where Debian's packages install: the
// plugin's #! names it.
const python = "/usr/bin/python3"

const install = "Debian's python3 with python3-grpcio, python3-protobuf and python3-cryptography is needed to run the Python plugin: " +
	"apt-get install python3-grpcio python3-protobuf python3-cryptography python3-grpc-tools (or run .ci/tools.sh)"

// plugin returns the plugin's path, or skips the test saying what to
// install; under CI=true a test that silently did not run fails instead.
func plugin(t *testing.T, modules ...string) string {
	t.Helper()
	check := "import " + strings.Join(append([]string{"grpc", "google.protobuf", "cryptography"}, modules...), ", ")
	if out, err := exec.Command(python, "-c", check).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("%s (%s: %v: %s)", install, check, err, bytes.TrimSpace(out))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: these tests must run in CI)")
		}
		t.Skip(msg)
	}
	t.Log("hymical-test-uses: python3-grpcio") // counted by harness/testrun
	path, err := filepath.Abs("hymical-plugin-jsonl-python")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStubsAreGenerated holds gen/ to what generate.sh writes from the
// protocol files now, so a change to transport.proto cannot leave the
// plugin speaking the old one.
func TestStubsAreGenerated(t *testing.T) {
	t.Parallel()
	plugin(t, "grpc_tools")
	dir := t.TempDir()
	if out, err := exec.Command("./generate.sh", dir).CombinedOutput(); err != nil {
		t.Fatalf("generate.sh: %v\n%s", err, out)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("generate.sh wrote nothing (%v)", err)
	}
	for _, e := range entries {
		want, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		got, err := os.ReadFile(filepath.Join("gen", e.Name()))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("gen/%s is not what generate.sh writes (%v): run examples/python-transport/generate.sh and commit gen/", e.Name(), err)
		}
	}
}

// TestPluginsCheckPasses runs every row of `hymical plugins check` on the
// plugin: handshake, Validate, a delivered send, no_request, the deadline
// and shutdown.
func TestPluginsCheckPasses(t *testing.T) {
	t.Parallel()
	r, err := plugincheck.Run(t.Context(), plugincheck.Options{Path: plugin(t), Target: plugincheck.TargetJSONL})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", b.String())
	if failed := r.Failed(); len(failed) > 0 || len(r.Rows) == 0 {
		t.Fatalf("rows %v failed:\n%s", failed, b.String())
	}
}

// TestManySendsOnOneStream sends 100 messages at once through the real
// host, on protocol 2's one stream: each is delivered and lands once, with
// its headers and body exact.
func TestManySendsOnOneStream(t *testing.T) {
	t.Parallel()
	path := plugin(t)
	outbox := t.TempDir()
	h, err := pluginhost.New(t.Context(), pluginhost.Config{
		Plugins: []pluginhost.PluginConfig{{Name: "jsonl-python", Path: path, Settings: map[string]string{"root": outbox}}},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("pluginhost.New: %v", err)
	}
	defer h.Close()
	if p := h.Plugins(); len(p) != 1 || p[0].Protocol != 2 {
		t.Fatalf("plugins %+v, want jsonl-python on protocol 2", p)
	}
	file := filepath.Join(outbox, "deliveries.jsonl")
	ep := sdk.Endpoint{Config: map[string]string{"path": file}}
	const n = 100
	var wg sync.WaitGroup
	outcomes := make([]sdk.Outcome, n)
	for i := range n {
		wg.Go(func() {
			outcomes[i] = h.Send(t.Context(), "jsonl-python", sdk.Message{
				DeliveryID: fmt.Sprintf("dlv_%03d", i), Attempt: 1, Endpoint: ep,
				Headers: []sdk.Header{{Name: "webhook-id", Value: fmt.Sprintf("dlv_%03d", i)}, {Name: "webhook-signature", Value: "v1,c2ln"}},
				Body:    []byte(fmt.Sprintf(`{"n":%d,"s":"<&> \u00fc"}`, i)),
			}, time.Now().Add(20*time.Second))
		})
	}
	wg.Wait()
	for i, out := range outcomes {
		if out.Kind != sdk.OutcomeDelivered {
			t.Fatalf("send %d = %+v, want delivered", i, out)
		}
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			DeliveryID string `json:"delivery_id"`
			Headers    []struct{ Name, Value string }
			Body       string `json:"body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON line: %v: %q", err, sc.Text())
		}
		var i int
		if _, err := fmt.Sscanf(l.DeliveryID, "dlv_%03d", &i); err != nil || seen[l.DeliveryID] ||
			l.Body != fmt.Sprintf(`{"n":%d,"s":"<&> \u00fc"}`, i) || len(l.Headers) != 2 || l.Headers[0].Value != l.DeliveryID {
			t.Fatalf("line %q: a duplicate, or not what was sent", sc.Text())
		}
		seen[l.DeliveryID] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct deliveries in the file, want %d", len(seen), n)
	}
}
