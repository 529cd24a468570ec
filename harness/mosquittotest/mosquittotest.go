// Package mosquittotest runs a real MQTT broker for tests: Debian's
// mosquitto, on a random loopback port, with its config and password file in
// a temporary directory and no persistence, so brokers of parallel tests
// never meet and nothing of the machine's own mosquitto is used. A test can
// stop it (SIGKILL) and start it again on the same port, as a broker that
// goes away and comes back.
//
// It owns only those processes. Without mosquitto installed the test is
// skipped, saying how to install it, except under CI=true.
package mosquittotest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/brokertest"
)

// Options shape the broker.
type Options struct {
	// Users, name to password, are the only clients let in when given;
	// without any, the broker lets anonymous clients in.
	Users map[string]string
}

// Server is one mosquitto broker.
type Server struct {
	*brokertest.Proc
	// Port is the MQTT listener's, on 127.0.0.1.
	Port int
	Dir  string
}

// Start runs a broker and stops it when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := brokertest.Binary(t, "mosquitto")
	s := &Server{Dir: t.TempDir()}
	conf := []string{"allow_anonymous true"}
	if len(opts.Users) > 0 {
		pw := filepath.Join(s.Dir, "passwords")
		passwd, err := exec.LookPath("mosquitto_passwd")
		if err != nil {
			passwd = "/usr/bin/mosquitto_passwd" // where Debian puts it
		}
		names := make([]string, 0, len(opts.Users))
		for name := range opts.Users {
			names = append(names, name)
		}
		slices.Sort(names)
		for i, name := range names {
			args := []string{"-b", pw, name, opts.Users[name]}
			if i == 0 {
				args = append([]string{"-c"}, args...)
			}
			if out, err := exec.Command(passwd, args...).CombinedOutput(); err != nil {
				t.Fatalf("mosquitto_passwd: %v: %s", err, out)
			}
		}
		conf = []string{"allow_anonymous false", "password_file " + pw}
	}
	conf = append(conf, "persistence false", "log_type error", "log_type warning", "log_type notice", "log_type information")
	if os.Geteuid() == 0 {
		// Run as root, mosquitto would switch to its own user, which
		// cannot read the test's files.
		conf = append(conf, "user root")
	}
	confPath := filepath.Join(s.Dir, "mosquitto.conf")
	var body string
	s.Proc = brokertest.NewProc(t, "mosquitto", s.Dir, " running", func(logPath string, log *os.File) *exec.Cmd {
		// Its standard output is block-buffered into a file; its own log
		// file is written line by line, so the ready line shows at once.
		conf := body + "log_dest file " + logPath + "\n"
		if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
			t.Error(err)
		}
		cmd := exec.Command(bin, "-c", confPath)
		cmd.Dir = s.Dir
		cmd.Stdout, cmd.Stderr = log, log
		return cmd
	})
	// FreePort's port can be taken before mosquitto binds it: try a few.
	var err error
	for range 5 {
		s.Port = brokertest.FreePort(t)
		body = strings.Join(append([]string{"listener " + strconv.Itoa(s.Port) + " 127.0.0.1"}, conf...), "\n") + "\n"
		if err = s.Run(); err == nil {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("mosquitto did not start: %v", err)
	return nil
}

// Addr is the broker's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is the broker's tcp:// URL, with user and password when user is not
// empty.
func (s *Server) URL(user, password string) string {
	u := url.URL{Scheme: "tcp", Host: s.Addr()}
	if user != "" {
		u.User = url.UserPassword(user, password)
	}
	return u.String()
}

// String names the broker for test logs.
func (s *Server) String() string { return fmt.Sprintf("mosquitto on %s", s.Addr()) }

// Connections counts the clients whose identifier starts with prefix that
// the broker let in, over every start, by its own log ("New client
// connected from … as ID").
func (s *Server) Connections(t testing.TB, prefix string) int {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(s.Dir, "mosquitto-*.log"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(b), " as "+prefix)
	}
	return n
}
