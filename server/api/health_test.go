//go:build unix

package api_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/proctest"
	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/pluginhost"
)

// A transport plugin that is down makes the server not ready, and /readyz
// names it; once its binary is back the probe starts it again and the
// server is ready.
func TestReadyzNamesATransportThatIsDown(t *testing.T) {
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		t.Skip("finding the plugin's process needs /proc")
	}
	bin := filepath.Join(t.TempDir(), pluginhost.BinaryPrefix+"http")
	copyExecutable(t, httpPlugin, bin)
	host, err := pluginhost.New(t.Context(), pluginhost.Config{Dir: filepath.Dir(bin)}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	f := newFixture(t, backends["sqlite"], func(o *api.Options) { o.Transports = host })
	f.send(req{method: "GET", path: "/readyz"}).must(t, http.StatusOK)

	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if n, err := proctest.KillExecutable(bin); err != nil || n == 0 {
		t.Fatalf("killed %d processes of %s (%v), want the plugin's", n, bin, err)
	}
	var msg string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := f.send(req{method: "GET", path: "/readyz"})
		if r.status == http.StatusServiceUnavailable {
			var code string
			code, msg = r.errorCode(t)
			if code != "not_ready" {
				t.Fatalf("readyz with the plugin down: code %q, want not_ready", code)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz still answers %d with the http plugin's binary gone and its process killed", r.status)
		}
	}
	if !strings.Contains(msg, `transport plugin "http" is not running`) {
		t.Fatalf("readyz says %q, want it to name the http transport as not running", msg)
	}

	copyExecutable(t, httpPlugin, bin)
	f.send(req{method: "GET", path: "/readyz"}).must(t, http.StatusOK)
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
