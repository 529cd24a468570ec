package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/internal/testwait"
)

// floodChildEnv makes the test binary, run again as a child, be the
// server of TestServeUnderAConnectionFlood.
const floodChildEnv = "HYMICAL_TEST_FLOOD_SERVE"

// floodFDLimit is the child's open-file limit: the defaults leave it 96
// connections, 24 per address.
const floodFDLimit = 256

// TestServeUnderAConnectionFlood runs `hymical serve` in a process of its
// own whose open-file limit is floodFDLimit, opens more connections than
// that from other loopback addresses and sends nothing on them, then
// ingests and asks /readyz from 127.0.0.1, a new connection each time.
// Without connection limits, accept fails with EMFILE once the flood has
// taken the descriptors, and the legitimate connections wait in the
// kernel's backlog until a flood connection times out (read_header_timeout,
// set to 2m here), long after the client has given up.
func TestServeUnderAConnectionFlood(t *testing.T) {
	if os.Getenv(floodChildEnv) != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		if err := run(ctx, []string{"serve"}, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		return
	}
	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		addresses int // flooding addresses, 127.0.0.2 and up
		each      int // connections each opens
	}{
		{name: "one address over its own limit", addresses: 1, each: 2 * floodFDLimit},
		{name: "twenty addresses over the total limit", addresses: 20, each: 2 * floodFDLimit / 20},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := startLimitedServe(t, dir, fmt.Sprintf("h%d.db", i))
			addr := strings.TrimPrefix(base, "http://")

			var flood []net.Conn
			t.Cleanup(func() {
				for _, c := range flood {
					c.Close()
				}
			})
			for a := range tt.addresses {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+a))}, Timeout: 5 * time.Second}
				for range tt.each {
					c, err := d.Dial("tcp", addr)
					if err != nil {
						// The kernel's backlog may be full: the flood is
						// as big as it gets.
						break
					}
					flood = append(flood, c)
				}
			}

			// A new connection for every request; the timeout bounds a
			// broken run, it measures nothing.
			client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			get := func(path string) (int, error) {
				resp, err := client.Get(base + path)
				if err != nil {
					return 0, err
				}
				resp.Body.Close()
				return resp.StatusCode, nil
			}
			if code, err := get("/readyz"); err != nil || code != http.StatusOK {
				t.Fatalf("/readyz during the flood: %d, %v", code, err)
			}
			for n := range 10 {
				req, err := http.NewRequest(http.MethodPost, base+"/v1/forms/contact/submissions", strings.NewReader(fmt.Sprintf(`{"n":%d}`, n)))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+floodToken)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("ingest %d during the flood: %v", n, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					t.Fatalf("ingest %d during the flood: %d", n, resp.StatusCode)
				}
			}
			if code, err := get("/healthz"); err != nil || code != http.StatusOK {
				t.Fatalf("/healthz during the flood: %d, %v", code, err)
			}
		})
	}
}

const floodToken = "test-admin-token-0123456789"

// startLimitedServe runs the test binary again as a `hymical serve` whose
// open-file limit is floodFDLimit, and returns its base URL.
func startLimitedServe(t *testing.T, dir, db string) string {
	t.Helper()
	// The shell's ulimit sets the hard limit too, so Go cannot raise it.
	cmd := exec.Command("sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, floodFDLimit),
		os.Args[0], "-test.run=^TestServeUnderAConnectionFlood$")
	cmd.Env = append(os.Environ(), floodChildEnv+"=1",
		"FORMS_DATABASE_URL=sqlite:"+filepath.Join(dir, db),
		"FORMS_PLUGINS_DIR="+dir,
		"FORMS_SERVER_LISTEN=127.0.0.1:0",
		"FORMS_SERVER_ADMIN_TOKEN="+floodToken,
		"FORMS_SERVER_READ_HEADER_TIMEOUT=2m",
		"FORMS_CONSOLE_ENABLED=false",
	)
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("serve's output:\n%s", out.String())
		}
	})
	listening := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)
	var base string
	testwait.For(t, 60*time.Second, func() error {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			return nil
		}
		return fmt.Errorf("serve never said where it listens:\n%s", out.String())
	})
	return base
}
