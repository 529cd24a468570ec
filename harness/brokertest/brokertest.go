// Package brokertest runs a real server process (nats-server, redis-server,
// rabbitmq-server)
// for tests: found where Debian installs it, on a loopback port, killed
// with SIGKILL and started again on demand, as a broker that goes away and
// comes back. It imports only the standard library, so a plugin's tests can
// use it without pulling in the server.
package brokertest

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

	"github.com/hymical/hymical/internal/testwait"
)

// Install says how to get the brokers the plugin tests run against.
const Install = "apt-get install nats-server redis-server rabbitmq-server mosquitto (or run .ci/brokers.sh)"

// Binary finds name on PATH or where Debian installs it. Without it the
// test is skipped, saying how to install it, except under CI=true, where a
// broker test that silently did not run must fail instead.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		t.Log("hymical-test-uses: " + name) // counted by harness/testrun
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			t.Log("hymical-test-uses: " + name)
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

// FreePort is a loopback port nothing listens on right now. Another
// process can take it before the server binds it, so callers retry.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Proc is one restartable server process.
type Proc struct {
	t    testing.TB
	name string
	dir  string
	// ready is what the server logs once clients can connect.
	ready []byte
	// command builds the process for one start; it writes its log to
	// logPath (through logFile, or by the server's own log option).
	command func(logPath string, logFile *os.File) *exec.Cmd

	// ReadyWithin bounds the wait for the ready line; zero means 15s.
	// RabbitMQ, an Erlang release, needs longer than that to boot on a
	// small machine.
	ReadyWithin time.Duration

	mu    sync.Mutex
	cmd   *exec.Cmd
	exit  chan struct{}
	start int
}

// NewProc describes a server; nothing runs until Run. It is stopped when
// the test ends.
func NewProc(t testing.TB, name, dir, ready string, command func(logPath string, logFile *os.File) *exec.Cmd) *Proc {
	p := &Proc{t: t, name: name, dir: dir, ready: []byte(ready), command: command}
	t.Cleanup(p.Stop)
	t.Cleanup(func() {
		// A failed test shows what the server said last: the evidence
		// when the broker, not the code under test, was the trouble.
		p.mu.Lock()
		start := p.start
		p.mu.Unlock()
		if t.Failed() && start > 0 {
			b, _ := os.ReadFile(filepath.Join(p.dir, p.name+"-"+strconv.Itoa(start)+".log"))
			t.Logf("the end of %s's log (start %d):\n%s", p.name, start, tail(b))
		}
	})
	return p
}

// Run starts the process and waits until its log says it is ready.
func (p *Proc) Run() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running", p.name)
	}
	p.start++
	logPath := filepath.Join(p.dir, p.name+"-"+strconv.Itoa(p.start)+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := p.command(logPath, logFile)
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	within := p.ReadyWithin
	if within == 0 {
		within = 15 * time.Second
	}
	deadline := time.Now().Add(within)
	for {
		b, _ := os.ReadFile(logPath)
		if bytes.Contains(b, p.ready) {
			p.cmd, p.exit = cmd, exit
			return nil
		}
		select {
		case <-exit:
			return fmt.Errorf("%s exited while starting:\n%s", p.name, tail(b))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exit
			return fmt.Errorf("%s was not ready within %s:\n%s", p.name, within, tail(b))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart starts the server again after Stop, retrying for a while: its
// port may still be in TIME_WAIT.
func (p *Proc) Restart() {
	p.t.Helper()
	testwait.For(p.t, 10*time.Second, func() error {
		if err := p.Run(); err != nil {
			return fmt.Errorf("%s did not start again: %w", p.name, err)
		}
		return nil
	})
}

// Stop kills the server at once, as a crash or a lost host would, and
// waits for it to exit. Calling it on a stopped server does nothing.
func (p *Proc) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exit
	p.cmd, p.exit = nil, nil
}

// Running reports whether the server process is up.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

func tail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
