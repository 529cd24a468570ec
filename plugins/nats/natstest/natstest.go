// Package natstest runs a real nats-server with JetStream for tests: from
// the installed binary, on a random loopback port, with its store in a
// temporary directory, and lets a test stop it (SIGKILL) and start it again
// on the same port and store, as a broker that goes away and comes back.
//
// It owns only that server process. Without nats-server installed the test
// is skipped, saying how to install it, except under CI=true, where a
// broker test that silently did not run must fail instead.
package natstest

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

// Binary finds nats-server on PATH or where Debian installs it. Without it
// the test is skipped, or failed under CI=true.
func Binary(t testing.TB) string {
	t.Helper()
	return find(t, "nats-server")
}

func find(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin"} {
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
	// Config is appended to the generated config file, for authorization
	// blocks or limits such as max_payload.
	Config string
}

// Server is one nats-server with JetStream.
type Server struct {
	t        testing.TB
	bin      string
	Port     int
	StoreDir string
	conf     string
	dir      string

	mu    sync.Mutex
	cmd   *exec.Cmd
	exit  chan struct{}
	start int
}

// Start runs a server and stops it when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	s := &Server{t: t, bin: bin, dir: dir, StoreDir: filepath.Join(dir, "jetstream"), conf: filepath.Join(dir, "nats.conf")}
	t.Cleanup(s.Stop)
	// A free port can be taken between choosing it and the server
	// binding it; try a few.
	var err error
	for range 5 {
		s.Port = freePort(t)
		cfg := fmt.Sprintf("listen: \"127.0.0.1:%d\"\nserver_name: hymical_test\njetstream {\n  store_dir: %q\n}\n%s\n", s.Port, s.StoreDir, opts.Config)
		if err = os.WriteFile(s.conf, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if err = s.run(); err == nil {
			return s
		}
	}
	t.Fatalf("nats-server did not start: %v", err)
	return nil
}

// URL is the server's address for clients, without credentials.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.Port) }

// Restart starts the server again on the same port and store directory,
// after Stop.
func (s *Server) Restart() {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.run()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("nats-server did not start again on port %d: %v", s.Port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run starts the process and waits until it says it is ready, which it
// does once JetStream has recovered its streams and clients can connect.
func (s *Server) run() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("nats-server is already running")
	}
	s.start++
	logPath := filepath.Join(s.dir, "nats-"+strconv.Itoa(s.start)+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(s.bin, "-c", s.conf)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, _ := os.ReadFile(logPath)
		if bytes.Contains(b, []byte("Server is ready")) {
			s.cmd, s.exit = cmd, exit
			return nil
		}
		select {
		case <-exit:
			return fmt.Errorf("nats-server exited while starting:\n%s", tail(b))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exit
			return fmt.Errorf("nats-server was not ready within 15s:\n%s", tail(b))
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

// Running reports whether the server process is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
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
