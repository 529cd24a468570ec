// Package redistest runs a real redis-server for tests: from the installed
// binary, on a random loopback port, with its data in a temporary directory
// and every write fsynced to the append-only file before it is
// acknowledged, and lets a test stop it (SIGKILL) and start it again on the
// same port and data, as a broker that goes away and comes back without
// losing what it acknowledged.
//
// It owns only that server process. Without redis-server installed the test
// is skipped, saying how to install it, except under CI=true.
package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/hymical/hymical/harness/brokertest"
)

// Install says how to get the brokers the plugin tests run against.
const Install = brokertest.Install

// Binary finds redis-server, or skips (fails under CI=true).
func Binary(t testing.TB) string {
	t.Helper()
	return brokertest.Binary(t, "redis-server")
}

// Options shape the server.
type Options struct {
	// Password, when set, is required of every client (requirepass).
	Password string
	// UnixSocket, when true, makes the server listen on a unix socket in
	// its directory too (Server.Socket), besides its loopback port.
	UnixSocket bool
}

// Server is one redis-server.
type Server struct {
	*brokertest.Proc
	Port int
	Dir  string
	// Socket is the unix socket's path, when Options.UnixSocket is set.
	Socket string
}

// Start runs a server and stops it when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Binary(t)
	s := &Server{Dir: t.TempDir()}
	if opts.UnixSocket {
		s.Socket = filepath.Join(s.Dir, "redis.sock")
	}
	s.Proc = brokertest.NewProc(t, "redis-server", s.Dir, "Ready to accept connections", func(logPath string, _ *os.File) *exec.Cmd {
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
		if opts.Password != "" {
			args = append(args, "--requirepass", opts.Password)
		}
		if s.Socket != "" {
			args = append(args, "--unixsocket", s.Socket, "--unixsocketperm", "700")
		}
		return exec.Command(bin, args...)
	})
	var err error
	for range 5 {
		s.Port = brokertest.FreePort(t)
		if err = s.Run(); err == nil {
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
