//go:build fault

package faulttest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// startCluster initialises and starts the harness's own PostgreSQL
// cluster: the only one it ever stops or restarts. It runs on loopback
// only, as durable as production needs it (fsync, synchronous_commit and
// full_page_writes on, said explicitly rather than left to a default):
// the crash scenario's lost = 0 says something about a real deployment
// only on such a cluster, and startServer checks that no server warned
// otherwise.
func startCluster(t *testing.T) *pgtest.Cluster {
	t.Helper()
	return pgtest.NewCluster(t, "fsync=on", "synchronous_commit=on", "full_page_writes=on", "max_connections=200")
}

// server is one `hymical serve` process. Each start is a new process with
// its own copy of the plugin binary, so its plugin processes can be told
// apart from every other run's by their executable's path.
type server struct {
	name       string
	run        int
	cmd        *exec.Cmd
	pid        int
	base       string
	pluginPath string
	logPath    string
	exited     chan struct{}
	// usable is false while the process is frozen or dead, so the
	// submitter sends elsewhere.
	usable atomic.Bool
}

// serverArgs is the configuration every server of a run shares: a lease
// just above what the config allows for 1 s + 1 s timeouts, fast polling
// and retries, and a retry allowance a few injected failures cannot use up.
func serverArgs(dbURL, pluginDir string) []string {
	return []string{
		"serve",
		"--database.url=" + dbURL,
		"--server.listen=127.0.0.1:0",
		"--plugins.dir=" + pluginDir,
		"--webhook.allowed_networks=127.0.0.0/8",
		"--webhook.connect_timeout_seconds=1",
		"--webhook.read_timeout_seconds=1",
		fmt.Sprintf("--worker.lease_seconds=%d", leaseSeconds),
		"--worker.concurrency=4",
		"--worker.batch_size=4",
		"--worker.poll_interval=100ms",
		"--worker.retry_delays=" + retryDelaysFlag(),
		fmt.Sprintf("--worker.max_attempts=%d", maxAttempts),
		"--log.level=info",
	}
}

// retryDelays is the servers' retry schedule: after the n-th failed
// request of a cycle a delivery waits retryDelays[n-1], the last repeating,
// each spread by the default ±20 % jitter.
var retryDelays = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond}

func retryDelaysFlag() string {
	parts := make([]string, len(retryDelays))
	for i, d := range retryDelays {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

// wholeSchedule bounds the time a delivery whose every request fails takes
// from its first request to failed: the sum of the delays times the
// allowance, 4 s. (It is 0.1 s + 8 × 0.3 s = 2.5 s of waits, 3 s with
// jitter, plus ten sends to a receiver that answers at once.) A cause that
// lasts longer and spent the allowance would fail every delivery it holds.
func wholeSchedule() time.Duration {
	var sum time.Duration
	for _, d := range retryDelays {
		sum += d
	}
	return sum * maxAttempts
}

// startServer starts a process and waits for it to say where it listens.
func (h *harness) startServer(name string) *server {
	h.t.Helper()
	h.mu.Lock()
	h.runs++
	run := h.runs
	h.mu.Unlock()
	dir := filepath.Join(h.work, fmt.Sprintf("run%02d-%s", run, name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	s := &server{name: name, run: run, pluginPath: filepath.Join(dir, "hymical-plugin-http"),
		logPath: filepath.Join(dir, "server.log"), exited: make(chan struct{})}
	copyFile(h.t, h.plugin, s.pluginPath)
	logFile, err := os.Create(s.logPath)
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command(h.bin, serverArgs(h.dbURL, dir)...)
	// A clean environment: nothing of the harness's FORMS_* may change
	// the configuration under test.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + os.TempDir(), "FORMS_SERVER_ADMIN_TOKEN=" + adminToken}
	// Its own process group, so the cleanup can end the server and the
	// plugins it started, orphans included, by one id; and killed by the
	// kernel should the harness itself die before its cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("start %s: %v", h.bin, err)
	}
	s.cmd, s.pid = cmd, cmd.Process.Pid
	h.t.Cleanup(func() { s.end() })
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, "stdout:", line)
			if _, addr, ok := strings.Cut(line, " listening on "); ok {
				listening <- strings.TrimSpace(addr)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()
	select {
	case addr := <-listening:
		s.base = addr
	case <-s.exited:
		h.t.Fatalf("%s (run %d) exited before listening:\n%s", name, run, readTail(s.logPath))
	case <-time.After(30 * time.Second):
		h.t.Fatalf("%s (run %d) did not say where it listens within 30 s:\n%s", name, run, readTail(s.logPath))
	}
	// The start-up warning is logged before the banner is written, so it
	// is in the log by now if the server gave it.
	if log, _ := os.ReadFile(s.logPath); bytes.Contains(log, []byte("NOT DURABLE")) {
		h.t.Fatalf("%s (run %d) says its database can lose accepted submissions, so a crash that loses none proves nothing:\n%s", name, run, readTail(s.logPath))
	}
	s.usable.Store(true)
	h.mu.Lock()
	h.servers[name] = s
	h.mu.Unlock()
	h.logf("started %s (run %d, pid %d) on %s", name, run, s.pid, s.base)
	return s
}

// end kills whatever is left of the process group: the server if it still
// runs, thawed first if frozen, and any plugin it left behind.
func (s *server) end() {
	_ = syscall.Kill(-s.pid, syscall.SIGCONT)
	_ = syscall.Kill(-s.pid, syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
}

// kill is the crash: SIGKILL to the server process alone, then, once it is
// gone, the plugin it leaves behind (a plugin does not notice its host
// dying; the harness must not leak it).
func (s *server) kill() {
	s.usable.Store(false)
	_ = syscall.Kill(s.pid, syscall.SIGKILL)
	<-s.exited
	_ = syscall.Kill(-s.pid, syscall.SIGKILL)
}

// stop asks the server to shut down the way an operator does, and waits.
func (s *server) stop(t *testing.T) {
	t.Helper()
	s.usable.Store(false)
	_ = syscall.Kill(s.pid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Errorf("%s (run %d) did not stop within 30 s of SIGTERM:\n%s", s.name, s.run, readTail(s.logPath))
	}
	s.end()
}

func (s *server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func readTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// pidsOf lists the running processes whose executable is path.
func pidsOf(path string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == path {
			out = append(out, pid)
		}
	}
	return out
}

// socketInode finds the inode of the IPv4 TCP socket on loopback whose local
// port is localPort and whose peer is remotePort: the client side of one
// request the receiver holds.
func socketInode(localPort, remotePort int) (string, bool) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return "", false
	}
	for _, line := range bytes.Split(b, []byte("\n"))[1:] {
		f := strings.Fields(string(line))
		if len(f) < 10 {
			continue
		}
		if hexPort(f[1]) == localPort && hexPort(f[2]) == remotePort {
			return f[9], true
		}
	}
	return "", false
}

func hexPort(addr string) int {
	_, p, ok := strings.Cut(addr, ":")
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(p, 16, 32)
	if err != nil {
		return -1
	}
	return int(n)
}

// holdsSocket reports whether process pid has the socket inode open.
func holdsSocket(pid int, inode string) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := "socket:[" + inode + "]"
	for _, fd := range fds {
		if link, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && link == want {
			return true
		}
	}
	return false
}

func (h *harness) server(name string) *server {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.servers[name]
}

// usableServers are the servers that can take a request now, in name order.
func (h *harness) usableServers() []*server {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*server
	for _, name := range []string{"S1", "S2"} {
		if s, ok := h.servers[name]; ok && s.usable.Load() && s.alive() {
			out = append(out, s)
		}
	}
	return out
}

// pluginPIDs maps each running plugin process of the current servers to
// the server that started it.
func (h *harness) pluginPIDs() map[int]*server {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[int]*server{}
	for _, s := range h.servers {
		for _, pid := range pidsOf(s.pluginPath) {
			out[pid] = s
		}
	}
	return out
}
