// Package rabbitmqtest runs a real RabbitMQ broker for tests: Debian's
// rabbitmq-server, on random loopback ports, with its node name, Mnesia
// database, config, definitions, Erlang cookie and its own epmd all in a
// temporary directory, so brokers of parallel tests never meet and nothing
// of the machine's own RabbitMQ is used. A test can stop it (SIGKILL) and
// start it again on the same ports and data, as a broker that goes away and
// comes back: durable queues keep the persistent messages it confirmed.
//
// RabbitMQ takes several seconds to boot (tens of seconds on a small, busy
// machine), so a test package should share one broker where it can.
//
// It owns only those processes. Without rabbitmq-server installed the test
// is skipped, saying how to install it, except under CI=true.
package rabbitmqtest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/brokertest"
)

// Install says how to get the brokers the plugin tests run against.
const Install = brokertest.Install

// AdminUser is the user every broker has, with every permission on the
// default virtual host; its password is Options.Password.
const AdminUser = "hymical"

// DefaultPassword is AdminUser's password when Options gives none.
const DefaultPassword = "hymical-test-password"

// Binary finds the rabbitmq-server start script, or skips (fails under
// CI=true). Debian's /usr/sbin/rabbitmq-server is a wrapper that switches
// to the rabbitmq user and the system's data directory; the script it
// wraps, beside it under /usr/lib/rabbitmq/bin, runs the broker as the
// caller with the environment's directories, which is what a test needs.
func Binary(t testing.TB) string {
	t.Helper()
	bin := brokertest.Binary(t, "rabbitmq-server")
	if real, err := filepath.EvalSymlinks(bin); err == nil && filepath.Base(real) == "rabbitmq-script-wrapper" {
		bin = filepath.Join(filepath.Dir(real), "rabbitmq-server")
	}
	return bin
}

// User is one more user of the default virtual host.
type User struct {
	Name, Password string
	// Configure, Write and Read are RabbitMQ's permission patterns
	// (regular expressions over resource names); "" grants nothing.
	Configure, Write, Read string
}

// Options shape the broker.
type Options struct {
	// Password is AdminUser's; empty means DefaultPassword.
	Password string
	// Users are added besides AdminUser.
	Users []User
}

// Server is one RabbitMQ broker.
type Server struct {
	*brokertest.Proc
	// Port is the AMQP listener's, on 127.0.0.1.
	Port     int
	Dir      string
	Password string
}

// Start runs a broker and stops it when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Binary(t)
	if opts.Password == "" {
		opts.Password = DefaultPassword
	}
	s := &Server{Dir: t.TempDir(), Password: opts.Password}
	defs := filepath.Join(s.Dir, "definitions.json")
	if err := writeDefinitions(defs, opts); err != nil {
		t.Fatal(err)
	}
	epmdPort := startEPMD(t, s.Dir)
	var distPort int
	conf := filepath.Join(s.Dir, "rabbitmq.conf")
	s.Proc = brokertest.NewProc(t, "rabbitmq-server", s.Dir, "Server startup complete", func(_ string, log *os.File) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Dir = s.Dir
		cmd.Stdout, cmd.Stderr = log, log
		node := "hymical-" + strconv.Itoa(s.Port)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"),
			// The Erlang cookie is made under HOME.
			"HOME=" + s.Dir,
			"LANG=C.UTF-8", "LC_ALL=C.UTF-8",
			// exec the VM rather than run it under a shell that traps
			// signals: a SIGKILL must reach the broker itself.
			"RUNNING_UNDER_SYSTEMD=true",
			"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(s.Dir, "rabbitmq-env.conf"),
			"RABBITMQ_CONFIG_FILE=" + conf,
			"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(s.Dir, "enabled_plugins"),
			"RABBITMQ_PLUGINS_EXPAND_DIR=" + filepath.Join(s.Dir, "plugins-expand"),
			"RABBITMQ_MNESIA_BASE=" + filepath.Join(s.Dir, "mnesia"),
			"RABBITMQ_LOG_BASE=" + filepath.Join(s.Dir, "log"),
			"RABBITMQ_PID_FILE=" + filepath.Join(s.Dir, "rabbitmq.pid"),
			// The log goes to standard output, which is the log file
			// brokertest reads for the ready line.
			"RABBITMQ_LOGS=-",
			"RABBITMQ_NODENAME=" + node + "@localhost",
			"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
			"RABBITMQ_NODE_PORT=" + strconv.Itoa(s.Port),
			"RABBITMQ_DIST_PORT=" + strconv.Itoa(distPort),
			"ERL_EPMD_PORT=" + strconv.Itoa(epmdPort),
			"ERL_EPMD_ADDRESS=127.0.0.1",
		}
		return cmd
	})
	s.ReadyWithin = 90 * time.Second
	var err error
	for range 3 {
		s.Port, distPort = brokertest.FreePort(t), brokertest.FreePort(t)
		cfg := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\nloopback_users = none\nload_definitions = %s\nlog.console = true\nlog.console.level = info\n", s.Port, defs)
		if err = os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if err = s.Run(); err == nil {
			return s
		}
	}
	t.Fatalf("rabbitmq-server did not start: %v", err)
	return nil
}

// Addr is host:port of the AMQP listener.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.Port) }

// URL is the broker's address for user and password, on the default
// virtual host.
func (s *Server) URL(user, password string) string {
	return fmt.Sprintf("amqp://%s@%s/", url.UserPassword(user, password), s.Addr())
}

// AdminURL is URL for AdminUser.
func (s *Server) AdminURL() string { return s.URL(AdminUser, s.Password) }

// startEPMD runs an Erlang port mapper for this broker alone, on a free
// loopback port, so that it is stopped with the test instead of being left
// behind as the daemon the VM would otherwise start.
func startEPMD(t testing.TB, dir string) int {
	t.Helper()
	bin, err := exec.LookPath("epmd")
	if err != nil {
		for _, p := range []string{"/usr/bin/epmd", "/usr/lib/erlang/bin/epmd"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		t.Fatalf("epmd, which rabbitmq-server needs, is not installed: %v", err)
	}
	for range 5 {
		port := brokertest.FreePort(t)
		log, err := os.Create(filepath.Join(dir, "epmd-"+strconv.Itoa(port)+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-port", strconv.Itoa(port), "-address", "127.0.0.1")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			log.Close()
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); log.Close(); close(exited) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			select {
			case <-exited:
			default:
				if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
					c.Close()
					return port
				}
				continue
			}
			break
		}
		_ = cmd.Process.Kill()
	}
	t.Fatal("epmd did not start")
	return 0
}

// writeDefinitions writes the users and permissions the broker loads at
// boot: RabbitMQ's definitions format, passwords hashed as its
// rabbit_password_hashing_sha256 does (a 4-byte salt, then SHA-256 of salt
// and password).
func writeDefinitions(path string, opts Options) error {
	type user struct {
		Name      string `json:"name"`
		Hash      string `json:"password_hash"`
		Algorithm string `json:"hashing_algorithm"`
		Tags      string `json:"tags"`
	}
	type permission struct {
		User      string `json:"user"`
		Vhost     string `json:"vhost"`
		Configure string `json:"configure"`
		Write     string `json:"write"`
		Read      string `json:"read"`
	}
	hash := func(password string) string {
		salt := make([]byte, 4)
		_, _ = rand.Read(salt)
		sum := sha256.Sum256(append(append([]byte{}, salt...), password...))
		return base64.StdEncoding.EncodeToString(append(salt, sum[:]...))
	}
	all := append([]User{{Name: AdminUser, Password: opts.Password, Configure: ".*", Write: ".*", Read: ".*"}}, opts.Users...)
	var users []user
	var perms []permission
	for i, u := range all {
		if strings.ContainsAny(u.Name, " \t\n") || u.Name == "" {
			return fmt.Errorf("rabbitmqtest: bad user name %q", u.Name)
		}
		tags := ""
		if i == 0 {
			tags = "administrator"
		}
		users = append(users, user{u.Name, hash(u.Password), "rabbit_password_hashing_sha256", tags})
		perms = append(perms, permission{u.Name, "/", u.Configure, u.Write, u.Read})
	}
	b, err := json.MarshalIndent(map[string]any{
		"users":       users,
		"vhosts":      []map[string]string{{"name": "/"}},
		"permissions": perms,
	}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
