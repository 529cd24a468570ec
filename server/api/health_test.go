//go:build unix

package api_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/proctest"
	"github.com/hymical/hymical/internal/testwait"
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
	testwait.For(t, 5*time.Second, func() error {
		r := f.send(req{method: "GET", path: "/readyz"})
		if r.status != http.StatusServiceUnavailable {
			return fmt.Errorf("readyz still answers %d with the http plugin's binary gone and its process killed", r.status)
		}
		var code string
		code, msg = r.errorCode(t)
		if code != "not_ready" {
			t.Fatalf("readyz with the plugin down: code %q, want not_ready", code)
		}
		return nil
	})
	if !strings.Contains(msg, `transport plugin "http" is not running (executable not found)`) {
		t.Fatalf("readyz says %q, want it to name the http transport as not running, and why in two words", msg)
	}
	hidesTheHost(t, msg, bin)

	copyExecutable(t, httpPlugin, bin)
	f.send(req{method: "GET", path: "/readyz"}).must(t, http.StatusOK)
}

// hidesTheHost fails if what /readyz, which anyone may ask, said names
// the plugin's executable or repeats the operating system's words.
func hidesTheHost(t *testing.T, msg, bin string) {
	t.Helper()
	for _, leak := range []string{bin, filepath.Dir(bin), pluginhost.BinaryPrefix, "/", "exec:", "no such file", "fork", "sha256", "SHA-256"} {
		if strings.Contains(msg, leak) {
			t.Fatalf("readyz says %q: it gives away %q", msg, leak)
		}
	}
}

// A plugin whose file no longer matches its SHA-256 pin is refused, and
// /readyz says so in two words, without the path or the sums.
func TestReadyzSaysAChecksumMismatchWithoutThePath(t *testing.T) {
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		t.Skip("finding the plugin's process needs /proc")
	}
	bin := filepath.Join(t.TempDir(), pluginhost.BinaryPrefix+"http")
	copyExecutable(t, httpPlugin, bin)
	sum, err := pluginhost.FileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	host, err := pluginhost.New(t.Context(), pluginhost.Config{Plugins: []pluginhost.PluginConfig{{Name: "http", Path: bin, SHA256: sum}}}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	f := newFixture(t, backends["sqlite"], func(o *api.Options) { o.Transports = host })
	f.send(req{method: "GET", path: "/readyz"}).must(t, http.StatusOK)

	// Another build in its place: the same program with a byte more.
	b, err := os.ReadFile(httpPlugin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, append(b, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	if n, err := proctest.KillExecutable(bin); err != nil || n == 0 {
		t.Fatalf("killed %d processes of %s (%v), want the plugin's", n, bin, err)
	}
	var msg string
	testwait.For(t, 5*time.Second, func() error {
		r := f.send(req{method: "GET", path: "/readyz"})
		if r.status != http.StatusServiceUnavailable {
			return fmt.Errorf("readyz still answers %d with the plugin's file changed and its process killed", r.status)
		}
		_, msg = r.errorCode(t)
		return nil
	})
	if !strings.Contains(msg, `transport plugin "http" is not running (checksum mismatch)`) {
		t.Fatalf("readyz says %q, want it to name the http transport and a checksum mismatch", msg)
	}
	hidesTheHost(t, msg, bin)
	if strings.Contains(msg, sum) {
		t.Fatalf("readyz says %q: it gives away the pinned sum", msg)
	}
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
