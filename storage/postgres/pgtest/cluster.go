package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Cluster is a PostgreSQL cluster a test initialised on a temporary
// directory and owns, so it may stop, kill and restart it; the shared
// server of HYMICAL_TEST_POSTGRES_DSN is never touched. It listens on
// loopback only, on a port of its own.
type Cluster struct {
	t      testing.TB
	bindir string
	dir    string
	port   int
	// runAs prefixes every PostgreSQL command: initdb refuses to run as root.
	runAs []string
	// settings are passed to every start, each as -c.
	settings []string
}

// StartCluster initialises and starts a cluster, and stops it (immediate
// mode) and removes it when t ends. It needs PostgreSQL's binaries (PG_BINDIR,
// or /usr/lib/postgresql/*/bin) and skips as BaseDSN does without them.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	BaseDSN(t) // the same skip, and the same count of PostgreSQL tests
	return NewCluster(t, "max_connections=100")
}

// NewCluster is StartCluster for a harness that needs a cluster whatever
// the environment says: it does not skip, and it starts the cluster with
// settings (each "name=value", passed as -c) on every start.
func NewCluster(t testing.TB, settings ...string) *Cluster {
	t.Helper()
	bindir := os.Getenv("PG_BINDIR")
	if bindir == "" {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		if len(matches) == 0 {
			t.Fatal("PostgreSQL's binaries were not found: set PG_BINDIR, or run .ci/postgres.sh once, which installs them")
		}
		bindir = filepath.Dir(matches[len(matches)-1])
	}
	dir, err := os.MkdirTemp("", "hymical-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, bindir: bindir, dir: dir, port: freePort(t), settings: settings}
	if os.Geteuid() == 0 {
		// The unprivileged user .ci/postgres.sh creates and uses.
		const user = "hymicalpg"
		if exec.Command("id", "-u", user).Run() != nil {
			if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user).CombinedOutput(); err != nil {
				t.Fatalf("create user %s for PostgreSQL: %v\n%s", user, err, out)
			}
		}
		if out, err := exec.Command("chown", user, dir).CombinedOutput(); err != nil {
			t.Fatalf("chown %s: %v\n%s", dir, err, out)
		}
		c.runAs = []string{"runuser", "-u", user, "--"}
	}
	c.run("initdb", "-D", c.data(), "-U", "hymical", "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8")
	c.Start()
	t.Cleanup(func() {
		_ = c.command("pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop").Run()
		os.RemoveAll(dir)
	})
	return c
}

// DSN is a superuser DSN of the cluster's postgres database.
func (c *Cluster) DSN() string {
	return fmt.Sprintf("postgres://hymical@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Start starts the stopped cluster on its port, with its settings, and
// waits until it accepts connections. Unless its settings say otherwise it
// is durable (fsync and synchronous_commit on, initdb's defaults): what it
// acknowledged survives Stop and Kill.
func (c *Cluster) Start() {
	c.t.Helper()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s", c.port, c.dir)
	for _, s := range c.settings {
		opts += " -c " + s
	}
	args := []string{"-D", c.data(), "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "60", "-o", opts, "start"}
	// After Kill, the old backends may hold the shared memory for a
	// moment until they notice their postmaster is gone; until then the
	// new postmaster refuses to start.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := c.command("pg_ctl", args...).CombinedOutput()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
			c.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop stops the cluster with pg_ctl's mode ("fast": sessions are ended
// with 57P01 admin_shutdown; "immediate": cut as in a crash).
func (c *Cluster) Stop(mode string) {
	c.t.Helper()
	c.run("pg_ctl", "-D", c.data(), "-m", mode, "-w", "stop")
}

// Kill sends SIGKILL to the postmaster, as the out-of-memory killer does,
// and waits until nothing answers on its port.
func (c *Cluster) Kill() {
	c.t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.data(), "postmaster.pid"))
	if err != nil {
		c.t.Fatalf("read postmaster.pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil {
		c.t.Fatalf("postmaster.pid: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		c.t.Fatalf("kill the postmaster %d: %v", pid, err)
	}
	// Its backends notice the postmaster is gone and exit; the port
	// closes with the postmaster. Stale shared memory and the pid file
	// are what pg_ctl start recovers from.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", c.port))
		if err != nil {
			return
		}
		conn.Close()
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("PostgreSQL still answers on port %d 30 s after its postmaster was killed", c.port)
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	argv := append(append([]string(nil), c.runAs...), filepath.Join(c.bindir, name))
	argv = append(argv, args...)
	return exec.Command(argv[0], argv[1:]...)
}

func (c *Cluster) run(name string, args ...string) {
	c.t.Helper()
	if out, err := c.command(name, args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		c.t.Fatalf("%s %s: %v\n%s\n%s", name, strings.Join(args, " "), err, out, log)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
