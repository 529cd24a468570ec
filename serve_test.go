package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/internal/testwait"
)

// TestServeAndOperatorCommands runs `hymical serve` on SQLite with the real
// http plugin and drives it the way an operator does, with the CLI: add an
// endpoint, submit, watch the delivery fail, fix the receiver, replay, see it
// delivered with attempts=2 and cycle_attempts=1.
func TestServeAndOperatorCommands(t *testing.T) {
	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FORMS_SERVER_ADMIN_TOKEN", "test-admin-token-0123456789")
	t.Setenv("USER", "alice")

	var fixed atomic.Bool
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fixed.Load() {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer recv.Close()

	ctx := t.Context()
	base, out, logs := startServe(t, dir,
		"--worker.retry_delays=50ms",
	)
	if strings.Contains(out.String()+logs.String(), "test-admin-token-0123456789") {
		t.Fatal("the admin token appeared in the server's output")
	}

	// hymical runs one CLI command against the server.
	hymical := func(args ...string) string {
		t.Helper()
		var b bytes.Buffer
		if err := run(ctx, args, &b, &b); err != nil {
			t.Fatalf("hymical %s: %v\n%s", strings.Join(args, " "), err, b.String())
		}
		return b.String()
	}

	added := hymical("endpoints", "add", "--server", base, "--url", recv.URL+"/hook", "--form", "form_demo")
	if !strings.Contains(added, "signing secret (shown once") || !strings.Contains(added, "whsec_") {
		t.Fatalf("endpoints add: %s", added)
	}
	submitted := hymical("submit", "--server", base, "--form", "form_demo")
	m := regexp.MustCompile(`(dlv_[0-9a-f]{32})`).FindStringSubmatch(submitted)
	if m == nil {
		t.Fatalf("submit printed no delivery: %s", submitted)
	}
	dlv := m[1]

	waitFor := func(state string) string {
		t.Helper()
		var shown string
		testwait.For(t, 20*time.Second, func() error {
			if shown = hymical("deliveries", "show", "--server", base, dlv); !strings.Contains(shown, "state "+state) {
				return fmt.Errorf("delivery never became %s:\n%s", state, shown)
			}
			return nil
		})
		return shown
	}
	shown := waitFor("failed")
	if !strings.Contains(shown, "attempts 1  cycle_attempts 1") || !strings.Contains(shown, "permanent") {
		t.Fatalf("failed delivery: %s", shown)
	}
	if list := hymical("deliveries", "list", "--server", base, "--state", "failed"); !strings.Contains(list, dlv) {
		t.Fatalf("deliveries list --state failed lacks %s:\n%s", dlv, list)
	}

	fixed.Store(true)
	if replayed := hymical("replay", "--server", base, dlv); !strings.Contains(replayed, "replayed "+dlv) {
		t.Fatalf("replay: %s", replayed)
	}
	shown = waitFor("delivered")
	if !strings.Contains(shown, "attempts 2  cycle_attempts 1") {
		t.Fatalf("after the replay: %s", shown)
	}

	// Endpoint controls and pausing, through the CLI.
	ep := regexp.MustCompile(`ep_[0-9a-f]{32}`).FindString(added)
	set := hymical("endpoints", "set", ep, "--server", base, "--rate-limit", "5", "--max-in-flight", "2", "--retry-schedule", "1s,2s")
	for _, want := range []string{"enabled", "5/s", "2 in flight", "retries 1s,2s"} {
		if !strings.Contains(set, want) {
			t.Fatalf("endpoints set does not show %q: %s", want, set)
		}
	}
	if off := hymical("endpoints", "disable", ep, "--server", base); !strings.Contains(off, "disabled (operator") {
		t.Fatalf("endpoints disable: %s", off)
	}
	if list := hymical("endpoints", "list", "--server", base); !strings.Contains(list, "disabled (operator)") {
		t.Fatalf("endpoints list does not show the disabled endpoint:\n%s", list)
	}
	if list := hymical("endpoints", "list", "--wide", "--server", base); !strings.Contains(list, "disabled (operator") || !strings.Contains(list, "5/s") {
		t.Fatalf("endpoints list does not show the disabled endpoint and its limits:\n%s", list)
	}
	held := regexp.MustCompile(`(dlv_[0-9a-f]{32})`).FindString(hymical("submit", "--server", base, "--form", "form_demo"))
	if shown := hymical("deliveries", "show", "--server", base, held); !strings.Contains(shown, "state pending (held") {
		t.Fatalf("a delivery to a disabled endpoint: %s", shown)
	}
	if on := hymical("endpoints", "enable", ep, "--server", base); !strings.Contains(on, "enabled") {
		t.Fatalf("endpoints enable: %s", on)
	}
	dlv = held
	waitFor("delivered")
	if !regexp.MustCompile(`(?m)^2\s+delivered\s+200`).MatchString(shown) {
		t.Fatalf("attempt 2 is not a delivered 200:\n%s", shown)
	}
}

// TestPluginsDieWithAKilledServer SIGKILLs a real `hymical serve` process,
// which cannot stop its plugins itself, and checks its plugin process does
// not outlive it.
func TestPluginsDieWithAKilledServer(t *testing.T) {
	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("go", "build", "-o", filepath.Join(dir, "hymical"), ".").CombinedOutput(); err != nil {
		t.Fatalf("build hymical: %v\n%s", err, b)
	}
	srv := exec.Command(filepath.Join(dir, "hymical"), "serve",
		"--database.url=sqlite:"+filepath.Join(dir, "h.db"), "--server.listen=127.0.0.1:0")
	srv.Env = append(os.Environ(), "FORMS_SERVER_ADMIN_TOKEN=test-admin-token-0123456789")
	var out syncbuf.Buffer
	srv.Stdout, srv.Stderr = &out, &out
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()

	plugin := filepath.Join(dir, "hymical-plugin-http")
	var pid int
	testwait.For(t, 20*time.Second, func() error {
		if pid = childWithExe(t, srv.Process.Pid, plugin); pid == 0 {
			return fmt.Errorf("the server never started its plugin:\n%s", out.String())
		}
		return nil
	})
	if err := srv.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = srv.Wait()
	defer func() {
		if t.Failed() {
			_ = syscall.Kill(pid, syscall.SIGKILL) // leave no orphan behind a failure
		}
	}()
	testwait.For(t, 10*time.Second, func() error {
		if processAlive(pid) {
			return fmt.Errorf("plugin process %d still runs after its server was killed", pid)
		}
		return nil
	})
}

// childWithExe finds a child of parent running the executable exe.
func childWithExe(t *testing.T, parent int, exe string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if path, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err != nil || path != exe {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state, then ppid.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(parent) {
			return pid
		}
	}
	return 0
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
