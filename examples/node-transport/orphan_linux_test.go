package nodetransport

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExitsWhenOrphaned: a host killed with SIGKILL cannot stop its
// plugins. The plugin notices that it was re-parented and exits by itself
// (the Linux host also asks the kernel to kill it; this covers the rest).
func TestExitsWhenOrphaned(t *testing.T) {
	t.Parallel()
	dir := nodePlugin(t)
	_, certPEM := hostCert(t)
	out := filepath.Join(t.TempDir(), "out")
	// A stand-in host: starts the plugin, waits for its handshake, prints
	// its pid and exits without stopping it.
	cmd := exec.Command("sh", "-c", `"$0" >"$1" 2>&1 & pid=$!
for i in $(seq 200); do grep -q '|grpc|' "$1" && break; sleep 0.05; done
echo $pid`, filepath.Join(dir, scriptName), out)
	cmd.Env = pluginEnv(cookie, "PLUGIN_PROTOCOL_VERSIONS=1,2", "PLUGIN_CLIENT_CERT="+certPEM)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("the stand-in host: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the stand-in host printed %q", b)
	}
	if got, _ := os.ReadFile(out); !strings.Contains(string(got), "|grpc|") {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the plugin never served:\n%s", got)
	}
	for deadline := time.Now().Add(10 * time.Second); processAlive(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatal("the plugin still runs 10s after its host went away")
		}
	}
	if got, _ := os.ReadFile(out); !strings.Contains(string(got), "the host process is gone") {
		t.Errorf("the plugin did not say why it stopped:\n%s", got)
	}
}

// processAlive reports whether pid is a running (not zombie) process.
func processAlive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}
