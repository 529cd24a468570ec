//go:build unix

package pluginhost

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/hymical/hymical/harness/proctest"
	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/sdk/transport"
)

// Binaries built once by TestMain: the real HTTP plugin and the misbehaving
// test plugin.
var (
	httpBin      string
	misbehaveBin string
)

// A secret in the server's environment that no plugin may inherit.
const envSecretKey, envSecretValue = "FORMS_DATABASE_URL", "postgres://hymical:ENV-SECRET@db/hymical"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if bin := os.Getenv(hostProcessEnv); bin != "" {
		return hostProcess(bin)
	}
	dir, err := os.MkdirTemp("", "pluginhost-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	goBin, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "the plugin host tests build real plugins and need the go command:", err)
		return 1
	}
	build := exec.Command(goBin, "build", "-o", dir+string(filepath.Separator),
		"github.com/hymical/hymical/plugins/http",
		"github.com/hymical/hymical/server/pluginhost/testdata/misbehave")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the plugins:", err)
		return 1
	}
	httpBin, misbehaveBin = filepath.Join(dir, "http"), filepath.Join(dir, "misbehave")
	if err := os.Setenv(envSecretKey, envSecretValue); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// newHost starts a host for cfg and stops it when the test ends. The log is
// kept and shown only when the test fails.
func newHost(t *testing.T, cfg Config) (*Host, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h, err := New(context.Background(), cfg, logger)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		h.Close()
		if t.Failed() {
			t.Logf("host log:\n%s", logs)
		}
	})
	return h, logs
}

func misbehaveConfig(settings map[string]string) Config {
	return Config{
		Plugins:   []PluginConfig{{Name: "misbehave", Path: misbehaveBin, Settings: settings}},
		SendGrace: 300 * time.Millisecond,
	}
}

func mode(m string) transport.Message {
	return transport.Message{
		DeliveryID: "dlv_test",
		Attempt:    1,
		Endpoint:   transport.Endpoint{Config: map[string]string{"mode": m}},
	}
}

func soon() time.Time { return time.Now().Add(5 * time.Second) }

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// pid is the current process of the named plugin.
func pid(t *testing.T, h *Host, name string) int {
	t.Helper()
	s := h.slots[name]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		t.Fatalf("plugin %q has no running process", name)
	}
	return s.cur.proc.Pid
}

func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestHTTPPluginDeliversTheExactHeadersAndBody(t *testing.T) {
	t.Parallel()
	type received struct {
		header http.Header
		body   []byte
	}
	got := make(chan received, 1)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- received{r.Header.Clone(), b}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer receiver.Close()
	h, _ := newHost(t, Config{Plugins: []PluginConfig{{
		Name:     "http",
		Path:     httpBin,
		SHA256:   sha256File(t, httpBin),
		Settings: map[string]string{"allowed_networks": "127.0.0.0/8", "read_timeout": "2s"},
	}}})
	body := []byte(`{"type":"submission.received","submission":{"id":"sub_48984534f33749c49a88de2d59400dce"}}`)
	msg := transport.Message{
		DeliveryID: "dlv_1",
		Attempt:    3,
		Endpoint:   transport.Endpoint{URL: receiver.URL + "/hooks"},
		Headers: []transport.Header{
			{Name: "webhook-id", Value: "dlv_1"},
			{Name: "webhook-timestamp", Value: "1700000000"},
			{Name: "webhook-signature", Value: "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= v1,second"},
		},
		Body: body,
	}

	out := h.Send(context.Background(), "http", msg, soon())
	if out.Kind != transport.OutcomeDelivered || out.StatusCode != http.StatusAccepted {
		t.Fatalf("outcome = %+v, want delivered 202", out)
	}
	r := <-got
	if !bytes.Equal(r.body, body) {
		t.Errorf("receiver got body %q, want %q", r.body, body)
	}
	want := map[string]string{
		"Webhook-Id":        "dlv_1",
		"Webhook-Timestamp": "1700000000",
		"Webhook-Signature": "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= v1,second",
		"Content-Type":      "application/json",
	}
	for name, value := range want {
		if vs := r.header.Values(name); len(vs) != 1 || vs[0] != value {
			t.Errorf("receiver got %s: %q, want [%q]", name, vs, value)
		}
	}
	if ua := r.header.Get("User-Agent"); !strings.HasPrefix(ua, "Hymical-Webhooks/") {
		t.Errorf("receiver got User-Agent %q, want Hymical-Webhooks/…", ua)
	}

	if err := h.Validate(context.Background(), "http", transport.Endpoint{URL: "https://hooks.example.com/in"}); err != nil {
		t.Errorf("Validate of a good URL: %v", err)
	}
	err := h.Validate(context.Background(), "http", transport.Endpoint{URL: "http://169.254.169.254/latest/meta-data/"})
	if !errors.Is(err, transport.ErrRejected) || !strings.Contains(err.Error(), "link-local") {
		t.Errorf("Validate of the metadata address: %v, want ErrRejected naming link-local", err)
	}
}

func TestHTTPPluginRefusesLoopbackWithoutAllowList(t *testing.T) {
	t.Parallel()
	hit := make(chan struct{}, 1)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit <- struct{}{} }))
	defer receiver.Close()
	h, _ := newHost(t, Config{Plugins: []PluginConfig{{Name: "http", Path: httpBin}}})

	out := h.Send(context.Background(), "http", transport.Message{DeliveryID: "d", Endpoint: transport.Endpoint{URL: receiver.URL}}, soon())
	if out.Kind != transport.OutcomePermanent || !strings.Contains(out.Error, "allowed_networks") || !strings.Contains(out.Error, "127.0.0.1") {
		t.Errorf("outcome = %+v, want permanent naming 127.0.0.1 and allowed_networks", out)
	}
	select {
	case <-hit:
		t.Error("the receiver on loopback was reached")
	default:
	}
}

func TestSHA256Pin(t *testing.T) {
	t.Parallel()
	good := sha256File(t, misbehaveBin)
	wrong := strings.Repeat("ab", 32)
	tests := []struct {
		name      string
		pin       string
		wantIs    error
		wantInErr []string
	}{
		{"matching pin starts the plugin", good, nil, nil},
		{"matching pin in upper case", strings.ToUpper(good), nil, nil},
		{"mismatch is refused", wrong, ErrChecksumMismatch, []string{`"misbehave"`, misbehaveBin, wrong, good}},
		{"malformed pin is refused", "abc123", nil, []string{`"misbehave"`, "not a SHA-256 sum"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Plugins: []PluginConfig{{Name: "misbehave", Path: misbehaveBin, SHA256: tt.pin}}}
			h, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
			if tt.wantInErr == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				defer h.Close()
				if out := h.Send(context.Background(), "misbehave", mode("ok"), soon()); out.Kind != transport.OutcomeDelivered {
					t.Errorf("outcome = %+v, want delivered", out)
				}
				return
			}
			if err == nil {
				h.Close()
				t.Fatal("New succeeded, want a refusal")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
			for _, s := range tt.wantInErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestDiscovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Symlink(misbehaveBin, filepath.Join(dir, BinaryPrefix+"misbehave")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(httpBin, filepath.Join(dir, BinaryPrefix+"http")); err != nil {
		t.Fatal(err)
	}
	// Neither of these is a plugin to run.
	if err := os.WriteFile(filepath.Join(dir, BinaryPrefix+"notexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("every executable in the directory is run, settings by name", func(t *testing.T) {
		t.Parallel()
		h, _ := newHost(t, Config{Dir: dir, Plugins: []PluginConfig{{Name: "misbehave", Settings: map[string]string{"marker": "from-config"}}}})
		if got := fmt.Sprint(h.Names()); got != "[http misbehave]" {
			t.Errorf("Names() = %s, want [http misbehave]", got)
		}
		if out := h.Send(context.Background(), "misbehave", mode("configured"), soon()); out.Error != "marker=from-config" {
			t.Errorf("outcome = %+v, want the configured marker", out)
		}
	})

	errorCases := []struct {
		name      string
		cfg       Config
		wantIs    error
		wantInErr string
	}{
		{"directory that does not exist", Config{Dir: filepath.Join(dir, "missing")}, nil, "does not exist"},
		{"configured plugin not in the directory", Config{Dir: dir, Plugins: []PluginConfig{{Name: "smtp"}}}, ErrPluginNotFound, "no executable hymical-plugin-smtp in " + dir},
		{"configured plugin without directory or path", Config{Plugins: []PluginConfig{{Name: "smtp"}}}, ErrPluginNotFound, `"smtp" has no path`},
		{"path that does not exist", Config{Plugins: []PluginConfig{{Name: "smtp", Path: filepath.Join(dir, "nope")}}}, ErrPluginNotFound, "no such file"},
		{"path that is not executable", Config{Plugins: []PluginConfig{{Name: "smtp", Path: filepath.Join(dir, BinaryPrefix+"notexec")}}}, ErrPluginNotFound, "not executable"},
		{"plugin configured twice", Config{Plugins: []PluginConfig{{Name: "a", Path: misbehaveBin}, {Name: "a", Path: misbehaveBin}}}, nil, "configured twice"},
		{"invalid name", Config{Plugins: []PluginConfig{{Name: "../x", Path: misbehaveBin}}}, nil, "not a plugin name"},
		{"plugin refuses its settings", Config{Plugins: []PluginConfig{{Name: "misbehave", Path: misbehaveBin, Settings: map[string]string{"fail_configure": "colour must be blue"}}}}, transport.ErrRejected, "colour must be blue"},
	}
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := New(context.Background(), tt.cfg, slog.New(slog.DiscardHandler))
			if err == nil {
				h.Close()
				t.Fatal("New succeeded, want an error")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantInErr)
			}
		})
	}
}

func TestUnknownPlugin(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(nil))

	out := h.Send(context.Background(), "smtp", mode("ok"), soon())
	if out.Kind != transport.OutcomePermanent || !out.NoRequest || !strings.Contains(out.Error, `"smtp"`) || !strings.Contains(out.Error, "loaded: misbehave") {
		t.Errorf("outcome = %+v, want permanent, no request, naming smtp and the loaded plugins", out)
	}
	if err := h.Validate(context.Background(), "smtp", transport.Endpoint{}); !errors.Is(err, ErrUnknownPlugin) {
		t.Errorf("Validate: %v, want ErrUnknownPlugin", err)
	}
	if n := h.Restarts("smtp"); n != 0 {
		t.Errorf("Restarts(smtp) = %d, want 0", n)
	}
}

func TestCrashMidSendIsRetryableAndRestarts(t *testing.T) {
	t.Parallel()
	for _, m := range []string{"exit", "sigkill", "panic"} {
		t.Run(m, func(t *testing.T) {
			t.Parallel()
			h, _ := newHost(t, misbehaveConfig(map[string]string{"marker": "again"}))
			before := pid(t, h, "misbehave")

			out := h.Send(context.Background(), "misbehave", mode(m), soon())
			if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "crashed") {
				t.Errorf("outcome = %+v, want retryable saying the plugin crashed", out)
			}
			if n := h.Restarts("misbehave"); n != 1 {
				t.Errorf("Restarts = %d, want 1", n)
			}
			if after := pid(t, h, "misbehave"); after == before {
				t.Errorf("still process %d after the crash", after)
			}
			// The new process was configured again before use.
			if out := h.Send(context.Background(), "misbehave", mode("configured"), soon()); out.Kind != transport.OutcomeDelivered || out.Error != "marker=again" {
				t.Errorf("next outcome = %+v, want delivered by a configured plugin", out)
			}
		})
	}
}

func TestHangPastTheDeadlineIsRetryableAndRestarts(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(map[string]string{"marker": "fresh"}))
	before := pid(t, h, "misbehave")

	start := time.Now()
	out := h.Send(context.Background(), "misbehave", mode("hang"), time.Now().Add(200*time.Millisecond))
	elapsed := time.Since(start)
	if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "did not answer") {
		t.Errorf("outcome = %+v, want retryable saying the plugin did not answer", out)
	}
	// deadline 200ms + grace 300ms, plus killing and starting a process.
	if elapsed < 500*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("Send took %v, want the deadline plus the grace and a restart", elapsed)
	}
	if n := h.Restarts("misbehave"); n != 1 {
		t.Errorf("Restarts = %d, want 1", n)
	}
	if !processGone(before) {
		t.Errorf("the hung process %d is still alive", before)
	}
	if out := h.Send(context.Background(), "misbehave", mode("configured"), soon()); out.Kind != transport.OutcomeDelivered || out.Error != "marker=fresh" {
		t.Errorf("next outcome = %+v, want delivered by a configured plugin", out)
	}
}

func TestPluginHonouringTheDeadlineIsNotRestarted(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(nil))

	out := h.Send(context.Background(), "misbehave", mode("slow"), time.Now().Add(150*time.Millisecond))
	if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "deadline exceeded") {
		t.Errorf("outcome = %+v, want the plugin's own retryable answer", out)
	}
	if n := h.Restarts("misbehave"); n != 0 {
		t.Errorf("Restarts = %d, want 0: the plugin answered in time", n)
	}
}

func TestCallerCancellationReachesThePluginAndDoesNotRestart(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(nil))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(150*time.Millisecond, cancel)

	start := time.Now()
	out := h.Send(ctx, "misbehave", mode("slow"), time.Now().Add(time.Minute))
	if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "canceled") {
		t.Errorf("outcome = %+v, want retryable saying the send was canceled", out)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Send took %v after the cancellation, want it to end with it", elapsed)
	}
	if n := h.Restarts("misbehave"); n != 0 {
		t.Errorf("Restarts = %d, want 0: the caller gave up, the plugin did not fail", n)
	}
}

// The caller's context deadline is the attempt's deadline when it is the
// earlier one; a plugin honouring it is fine, and one ignoring it is still
// caught as hung, not mistaken for a caller that gave up.
func TestCallerDeadlineBindsThePlugin(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(nil))

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	out := h.Send(ctx, "misbehave", mode("slow"), time.Now().Add(time.Minute))
	if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "deadline exceeded") || h.Restarts("misbehave") != 0 {
		t.Errorf("outcome = %+v after %d restarts, want the plugin's own answer at the caller's deadline and no restart", out, h.Restarts("misbehave"))
	}

	ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	out = h.Send(ctx, "misbehave", mode("hang"), time.Now().Add(time.Minute))
	if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "did not answer") || h.Restarts("misbehave") != 1 {
		t.Errorf("outcome = %+v after %d restarts, want a hang caught and the plugin restarted", out, h.Restarts("misbehave"))
	}
}

func TestProcessKilledBetweenSendsIsRelaunched(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(map[string]string{"marker": "relaunched"}))
	before := pid(t, h, "misbehave")
	if err := syscall.Kill(before, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Between sends: wait until the host has seen the process go.
	s := h.slots["misbehave"]
	for deadline := time.Now().Add(5 * time.Second); ; {
		s.mu.Lock()
		exited := s.cur.exited()
		s.mu.Unlock()
		if exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the host never noticed the plugin process was killed")
		}
		time.Sleep(10 * time.Millisecond)
	}

	out := h.Send(context.Background(), "misbehave", mode("configured"), soon())
	if out.Kind != transport.OutcomeDelivered || out.Error != "marker=relaunched" {
		t.Errorf("outcome = %+v, want delivered by a relaunched, configured plugin", out)
	}
	if n := h.Restarts("misbehave"); n != 1 {
		t.Errorf("Restarts = %d, want 1", n)
	}
	if after := pid(t, h, "misbehave"); after == before {
		t.Errorf("still process %d", after)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	cfg := misbehaveConfig(nil)
	cfg.ValidateTimeout = 300 * time.Millisecond
	h, _ := newHost(t, cfg)

	if err := h.Validate(context.Background(), "misbehave", mode("ok").Endpoint); err != nil {
		t.Errorf("Validate of a good endpoint: %v", err)
	}
	err := h.Validate(context.Background(), "misbehave", mode("bogus").Endpoint)
	if !errors.Is(err, transport.ErrRejected) || !strings.Contains(err.Error(), `mode "bogus" is not one of`) {
		t.Errorf("Validate of a bad endpoint: %v, want ErrRejected with the plugin's reason", err)
	}
	if h.Restarts("misbehave") != 0 {
		t.Error("a refusal restarted the plugin")
	}

	hang := transport.Endpoint{Config: map[string]string{"validate": "hang"}}
	if err := h.Validate(context.Background(), "misbehave", hang); !errors.Is(err, transport.ErrUnavailable) || errors.Is(err, transport.ErrRejected) {
		t.Errorf("Validate that hangs: %v, want ErrUnavailable", err)
	}
	if n := h.Restarts("misbehave"); n != 1 {
		t.Errorf("Restarts = %d, want 1 after a hung Validate", n)
	}
	if out := h.Send(context.Background(), "misbehave", mode("ok"), soon()); out.Kind != transport.OutcomeDelivered {
		t.Errorf("outcome after the restart = %+v, want delivered", out)
	}
}

func TestDeadlineReachesThePlugin(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(nil))
	deadline := time.Now().Add(3 * time.Second).UTC()

	out := h.Send(context.Background(), "misbehave", mode("deadline"), deadline)
	want := deadline.Format(time.RFC3339Nano)
	if out.Error != want+" "+want {
		t.Errorf("plugin saw Message.Deadline and context deadline %q, want both %q", out.Error, want)
	}
}

func TestConcurrentSendsShareOneProcess(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(nil))
	before := pid(t, h, "misbehave")
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if out := h.Send(context.Background(), "misbehave", mode("ok"), soon()); out.Kind != transport.OutcomeDelivered {
				t.Errorf("outcome = %+v, want delivered", out)
			}
		})
	}
	wg.Wait()
	if after := pid(t, h, "misbehave"); after != before || h.Restarts("misbehave") != 0 {
		t.Errorf("process %d → %d with %d restarts, want one process throughout", before, after, h.Restarts("misbehave"))
	}
}

// Sends in flight on a process that crashes all fail retryable, the
// process is replaced once, and sends afterwards succeed.
func TestCrashAmidConcurrentSendsRestartsOnce(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(nil))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			out := h.Send(context.Background(), "misbehave", mode("slow"), time.Now().Add(2*time.Second))
			if out.Kind != transport.OutcomeRetryable {
				t.Errorf("in-flight outcome = %+v, want retryable", out)
			}
		})
	}
	time.Sleep(100 * time.Millisecond) // let the slow sends reach the plugin
	if out := h.Send(context.Background(), "misbehave", mode("exit"), soon()); out.Kind != transport.OutcomeRetryable {
		t.Errorf("crashing outcome = %+v, want retryable", out)
	}
	wg.Wait()
	if n := h.Restarts("misbehave"); n != 1 {
		t.Errorf("Restarts = %d, want 1", n)
	}
	if out := h.Send(context.Background(), "misbehave", mode("ok"), soon()); out.Kind != transport.OutcomeDelivered {
		t.Errorf("outcome after the restart = %+v, want delivered", out)
	}
}

func TestPluginsDoNotInheritTheServerEnvironment(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(nil))
	out := h.Send(context.Background(), "misbehave", mode("env"), soon())
	if out.Kind != transport.OutcomeDelivered {
		t.Fatalf("outcome = %+v, want delivered", out)
	}
	if strings.Contains(out.Error, envSecretKey) || strings.Contains(out.Error, "ENV-SECRET") {
		t.Errorf("the plugin's environment holds the server's %s", envSecretKey)
	}
}

func TestPluginOutputGoesToTheHostLogger(t *testing.T) {
	t.Parallel()
	h, logs := newHost(t, misbehaveConfig(nil))
	msg := mode("log")
	msg.DeliveryID = "dlv_logged"
	if out := h.Send(context.Background(), "misbehave", msg, soon()); out.Kind != transport.OutcomeDelivered {
		t.Fatalf("outcome = %+v, want delivered", out)
	}
	want := "misbehave says hello for dlv_logged"
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("the host log never showed %q", want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, want) && !strings.Contains(line, "plugin=misbehave") {
			t.Errorf("plugin output logged without the plugin's name: %s", line)
		}
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	h, err := New(context.Background(), misbehaveConfig(nil), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p := pid(t, h, "misbehave")
	h.Close()
	h.Close()
	if !processGone(p) {
		t.Errorf("plugin process %d still running after Close", p)
	}
	out := h.Send(context.Background(), "misbehave", mode("ok"), soon())
	if out.Kind != transport.OutcomeRetryable || !out.NoRequest || !strings.Contains(out.Error, "closed") {
		t.Errorf("outcome after Close = %+v, want retryable, no request, saying the host is closed", out)
	}
	if h.Restarts("misbehave") != 0 {
		t.Error("a send after Close restarted the plugin")
	}
}

// Whether a request went out crosses the boundary on both protocols: a
// plugin's refusal before connecting says none did; an outcome that does
// not say, the field's default (a plugin from before it), and a crash
// mid-send may have sent one.
func TestNoRequestCrossesBothProtocols(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  func(map[string]string) Config
	}{
		{"protocol 2", misbehaveConfig},
		{"protocol 1", v1Config},
	}
	cases := []struct {
		mode      string
		kind      transport.OutcomeKind
		noRequest bool
	}{
		{"refuse", transport.OutcomePermanent, true},
		{"defer", transport.OutcomeRetryable, true},
		{"plain_fail", transport.OutcomePermanent, false},
		{"ok", transport.OutcomeDelivered, false},
		{"exit", transport.OutcomeRetryable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, _ := newHost(t, tt.cfg(nil))
			for _, c := range cases {
				out := h.Send(context.Background(), "misbehave", mode(c.mode), soon())
				if out.Kind != c.kind || out.NoRequest != c.noRequest {
					t.Errorf("%s: outcome = %+v, want %s with NoRequest %v", c.mode, out, c.kind, c.noRequest)
				}
			}
		})
	}
}

// waitExited waits until the host has seen the named plugin's process go.
func waitExited(t *testing.T, h *Host, name string) {
	t.Helper()
	s := h.slots[name]
	for deadline := time.Now().Add(5 * time.Second); ; {
		s.mu.Lock()
		exited := s.cur == nil || s.cur.exited()
		s.mu.Unlock()
		if exited {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the host never noticed the plugin process was killed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func copyBinary(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// A plugin whose process died and cannot be started again, its binary
// gone or replaced by one that does not match its pin, never gets the
// message: the outcome says no request went out, Up names the transport,
// and once the right binary is back Up starts it and sends go through.
func TestPluginThatCannotBeStartedGetsNoMessage(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"binary removed", "binary does not match its pin"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			bin := filepath.Join(t.TempDir(), "misbehave")
			copyBinary(t, misbehaveBin, bin)
			cfg := Config{Plugins: []PluginConfig{{Name: "misbehave", Path: bin, SHA256: sha256File(t, misbehaveBin)}}}
			h, _ := newHost(t, cfg)
			if err := h.Up(context.Background()); err != nil {
				t.Fatalf("Up with the plugin running: %v", err)
			}
			switch how {
			case "binary removed":
				if err := os.Remove(bin); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.Remove(bin); err != nil {
					t.Fatal(err)
				}
				copyBinary(t, httpBin, bin)
			}
			if n, err := proctest.KillExecutable(bin); err != nil || n != 1 {
				t.Fatalf("killed %d processes of %s (%v), want 1", n, bin, err)
			}
			waitExited(t, h, "misbehave")

			out := h.Send(context.Background(), "misbehave", mode("ok"), soon())
			if out.Kind != transport.OutcomeRetryable || !out.NoRequest || !strings.Contains(out.Error, `transport plugin "misbehave" is not running`) {
				t.Fatalf("outcome = %+v, want retryable, no request, saying the plugin is not running", out)
			}
			err := h.Up(context.Background())
			if err == nil || !strings.Contains(err.Error(), `transport plugin "misbehave" is not running`) {
				t.Fatalf("Up = %v, want an error naming the plugin", err)
			}
			if how != "binary removed" && !strings.Contains(err.Error(), "SHA-256") {
				t.Errorf("Up = %v, want it to say the binary does not match its SHA-256 pin", err)
			}

			_ = os.Remove(bin)
			copyBinary(t, misbehaveBin, bin)
			if err := h.Up(context.Background()); err != nil {
				t.Fatalf("Up once the binary is back: %v", err)
			}
			if out := h.Send(context.Background(), "misbehave", mode("ok"), soon()); out.Kind != transport.OutcomeDelivered || out.NoRequest {
				t.Fatalf("outcome once the binary is back = %+v, want delivered", out)
			}
		})
	}
}

// A plugin whose connection is gone before a send is queued never gets the
// message: the outcome says no request went out, and the plugin is
// restarted for the next send.
func TestSendOnALostConnectionIsNoRequest(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(map[string]string{"marker": "relaunched"}))
	// No send yet, so no stream is open: the next one must open it over a
	// connection that is gone, while the process still runs.
	s := h.slots["misbehave"]
	s.mu.Lock()
	raw, err := s.cur.client.Client()
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	gc, ok := raw.(*plugin.GRPCClient)
	if !ok {
		t.Fatalf("go-plugin client is %T, want *plugin.GRPCClient", raw)
	}
	if err := gc.Conn.Close(); err != nil {
		t.Fatal(err)
	}
	out := h.Send(context.Background(), "misbehave", mode("ok"), soon())
	if out.Kind != transport.OutcomeRetryable || !out.NoRequest || !strings.Contains(out.Error, "restarted") {
		t.Fatalf("outcome = %+v, want retryable, no request, the plugin restarted", out)
	}
	if out := h.Send(context.Background(), "misbehave", mode("configured"), soon()); out.Kind != transport.OutcomeDelivered || out.Error != "marker=relaunched" {
		t.Fatalf("outcome after the restart = %+v, want delivered by a relaunched plugin", out)
	}
}

// TestPluginsSaysWhetherEachRuns is what hymical_plugin_up reads: true
// while the process runs, false once it died, and looking restarts
// nothing (the next send or readiness probe does).
func TestPluginsSaysWhetherEachRuns(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(nil))
	running := func() bool {
		t.Helper()
		ps := h.Plugins()
		if len(ps) != 1 || ps[0].Name != "misbehave" {
			t.Fatalf("Plugins = %+v, want misbehave alone", ps)
		}
		return ps[0].Running
	}
	if !running() {
		t.Fatal("Running = false for a plugin just started")
	}
	before := pid(t, h, "misbehave")
	if err := syscall.Kill(before, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The process is reaped by the runner's own goroutine: wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for running() {
		if time.Now().After(deadline) {
			t.Fatal("Running still true 10 s after the plugin was killed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if after := pid(t, h, "misbehave"); after != before || h.Restarts("misbehave") != 0 {
		t.Errorf("looking restarted the plugin: process %d, then %d, %d restarts", before, after, h.Restarts("misbehave"))
	}
	h.Close()
	if running() {
		t.Error("Running = true after Close")
	}
}
