package pluginhost

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/proctest"
)

// On Linux only: elsewhere the kernel has no parent-death signal to ask
// for, and only plugins on the SDK's Serve exit with their host.
// A host killed with SIGKILL, which stops nothing on its way out, takes
// its plugins with it, even one that does not watch for that itself.
func TestAPluginDiesWithItsHost(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// The host dies before it can remove its plugin's socket directory;
	// the test's TMPDIR holds it.
	cmd.Env = append(os.Environ(), hostProcessEnv+"="+misbehaveBin, "TMPDIR="+t.TempDir())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	plugin, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("the host process said %q (%v, %v), want its plugin's pid", line, err, perr)
	}
	t.Cleanup(func() { _ = syscall.Kill(plugin, syscall.SIGKILL) })
	if proctest.Ended(plugin) {
		t.Fatalf("plugin %d ended before its host", plugin)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); !proctest.Ended(plugin); {
		if time.Now().After(deadline) {
			t.Fatalf("plugin %d still running 5s after its host was killed", plugin)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
