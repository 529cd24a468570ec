// Package natstest runs a real nats-server with JetStream for tests: from
// the installed binary, on a random loopback port, with its store in a
// temporary directory, and lets a test stop it (SIGKILL) and start it again
// on the same port and store, as a broker that goes away and comes back.
//
// It owns only that server process. Without nats-server installed the test
// is skipped, saying how to install it, except under CI=true.
package natstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hymical/hymical/harness/brokertest"
)

// Install says how to get the brokers the plugin tests run against.
const Install = brokertest.Install

// Binary finds nats-server, or skips (fails under CI=true).
func Binary(t testing.TB) string {
	t.Helper()
	return brokertest.Binary(t, "nats-server")
}

// Options shape the server.
type Options struct {
	// Config is appended to the generated config file, for authorization
	// blocks or limits such as max_payload.
	Config string
}

// Server is one nats-server with JetStream.
type Server struct {
	*brokertest.Proc
	Port     int
	StoreDir string
}

// Start runs a server and stops it when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	s := &Server{StoreDir: filepath.Join(dir, "jetstream")}
	// It logs "Server is ready" once JetStream has recovered its streams.
	s.Proc = brokertest.NewProc(t, "nats-server", dir, "Server is ready", func(_ string, log *os.File) *exec.Cmd {
		cmd := exec.Command(bin, "-c", conf)
		cmd.Stdout, cmd.Stderr = log, log
		return cmd
	})
	var err error
	for range 5 {
		s.Port = brokertest.FreePort(t)
		cfg := fmt.Sprintf("listen: \"127.0.0.1:%d\"\nserver_name: hymical_test\njetstream {\n  store_dir: %q\n}\n%s\n", s.Port, s.StoreDir, opts.Config)
		if err = os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if err = s.Run(); err == nil {
			return s
		}
	}
	t.Fatalf("nats-server did not start: %v", err)
	return nil
}

// URL is the server's address for clients, without credentials.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.Port) }
