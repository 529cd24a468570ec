// Package redistest runs a real redis-server for tests: from the installed
// binary, on a random loopback port, with its data in a temporary directory
// and every write fsynced to the append-only file before it is
// acknowledged, and lets a test stop it (SIGKILL) and start it again on the
// same port and data, as a broker that goes away and comes back without
// losing what it acknowledged.
//
// It owns only that server process. Without redis-server installed the test
// is skipped, saying how to install it, except under CI=true, where a
// broker test that silently did not run must fail instead.
package redistest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Install says how to get the brokers the plugin tests run against.
const Install = "apt-get install nats-server redis-server (or run .ci/brokers.sh)"

// Binary finds redis-server on PATH or where Debian installs it. Without it
// the test is skipped, or failed under CI=true.
func Binary(t testing.TB) string {
	t.Helper()
	const name = "redis-server"
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	msg := name + " is not installed, so the tests against a real broker cannot run: " + Install
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: these tests must run in CI)")
	}
	t.Skip(msg)
	return ""
}

// Options shape the server.
type Options struct {
	// Password, when set, is required of every client (requirepass).
	Password string
}

// Server is one redis-server.
type Server struct {
	t    testing.TB
	bin  string
	Port int
	Dir  string
	opts Options

	mu    sync.Mutex
	cmd   *exec.Cmd
	exit  chan struct{}
	start int
}

// Start runs a server and stops it when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), Dir: t.TempDir(), opts: opts}
	t.Cleanup(s.Stop)
	var err error
	for range 5 {
		// A free port can be taken between choosing it and the server
		// binding it; try a few.
		s.Port = freePort(t)
		if err = s.run(); err == nil {
			return s
		}
	}
	t.Fatalf("redis-server did not start: %v", err)
	return nil
}

// Addr is host:port.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.Port) }

// URL is the server's address for clients, without credentials.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Restart starts the server again on the same port and data, after Stop.
func (s *Server) Restart() {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.run()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server did not start again on port %d: %v", s.Port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Server) run() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("redis-server is already running")
	}
	s.start++
	logPath := filepath.Join(s.Dir, "redis-"+strconv.Itoa(s.start)+".log")
	args := []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(s.Port),
		"--dir", s.Dir,
		"--daemonize", "no",
		"--logfile", logPath,
		// Every acknowledged write is on disk before the reply, so a
		// SIGKILL loses nothing that was acknowledged.
		"--appendonly", "yes",
		"--appendfsync", "always",
		"--save", "",
	}
	if s.opts.Password != "" {
		args = append(args, "--requirepass", s.opts.Password)
	}
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, _ := os.ReadFile(logPath)
		if bytes.Contains(b, []byte("Ready to accept connections")) {
			s.cmd, s.exit = cmd, exit
			return nil
		}
		select {
		case <-exit:
			return fmt.Errorf("redis-server exited while starting:\n%s", tail(b))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exit
			return fmt.Errorf("redis-server was not ready within 15s:\n%s", tail(b))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server at once, as a crash or a lost host would, and
// waits for it to exit. Calling it on a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exit
	s.cmd, s.exit = nil, nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
