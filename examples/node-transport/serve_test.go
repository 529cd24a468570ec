//go:build unix

package nodetransport

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/pluginhost"
)

// TestServeDeliversThroughTheNodePlugin runs the real server, `hymical
// serve` as its own process on a SQLite file, with the Node.js plugin
// installed in its plugin directory and pinned by SHA-256 in its config
// file, and drives it over HTTP as a user would with curl: the plugin's
// Validate refuses a bad endpoint when it is created; submissions arrive
// in the file, signed so that they verify; a retryable outcome is tried
// again on the schedule and a permanent one fails the delivery at once.
func TestServeDeliversThroughTheNodePlugin(t *testing.T) {
	t.Parallel()
	plugins := nodePlugin(t)
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "hymical"), "github.com/hymical/hymical").CombinedOutput(); err != nil {
		t.Fatalf("building hymical: %v\n%s", err, out)
	}
	// serve always runs the http plugin, from the same directory.
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.EvalSymlinks(filepath.Join(plugins, scriptName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(script, filepath.Join(dir, scriptName)); err != nil {
		t.Fatal(err)
	}
	sum, err := pluginhost.FileSHA256(script)
	if err != nil {
		t.Fatal(err)
	}
	outbox := t.TempDir()
	config := filepath.Join(dir, "hymical.yaml")
	yaml := fmt.Sprintf("plugins:\n  list:\n    - name: %s\n      sha256: %s\n      settings:\n        root: %s\n", transport, sum, outbox)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}

	const token = "test-admin-token-0123456789abcdef"
	srv := exec.Command(filepath.Join(dir, "hymical"), "serve",
		"--config", config,
		"--database.url=sqlite:"+filepath.Join(dir, "hymical.db"),
		"--plugins.dir="+dir,
		"--server.listen=127.0.0.1:0",
		"--worker.poll_interval=20ms",
		"--worker.retry_delays=300ms",
		"--worker.max_attempts=20",
	)
	srv.Env = []string{"PATH=" + os.Getenv("PATH"), "FORMS_SERVER_ADMIN_TOKEN=" + token}
	var out syncbuf.Buffer
	srv.Stdout, srv.Stderr = &out, &out
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = srv.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("hymical serve output:\n%s", out.String())
		}
	})
	var base string
	listening := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)
	for deadline := time.Now().Add(30 * time.Second); base == ""; time.Sleep(20 * time.Millisecond) {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("hymical serve stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("hymical serve never said where it listens")
		}
	}

	ctx := t.Context()
	call := func(method, path, body string, into any) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if into != nil && resp.StatusCode < 300 {
			if err := json.Unmarshal(b, into); err != nil {
				t.Fatalf("%s %s: %v in %s", method, path, err, b)
			}
		}
		return resp.StatusCode, string(b)
	}
	endpoint := func(form, path string) apiwire.EndpointCreated {
		t.Helper()
		var created apiwire.EndpointCreated
		body := fmt.Sprintf(`{"transport":%q,"form_ids":[%q],"config":{"path":%q}}`, transport, form, path)
		if status, b := call(http.MethodPost, "/v1/endpoints", body, &created); status != http.StatusCreated || created.Secret == "" {
			t.Fatalf("creating an endpoint for %s: %d %s", path, status, b)
		}
		return created
	}
	submit := func(form string) string {
		t.Helper()
		var submitted struct {
			Deliveries []string `json:"deliveries"`
		}
		if status, b := call(http.MethodPost, "/v1/forms/"+form+"/submissions", `{"name":"Ada Lovelace","note":"<&>"}`, &submitted); status >= 300 || len(submitted.Deliveries) != 1 {
			t.Fatalf("submitting to %s: %d %s; want one delivery", form, status, b)
		}
		return submitted.Deliveries[0]
	}
	delivery := func(id string) apiwire.DeliveryDetail {
		t.Helper()
		var d apiwire.DeliveryDetail
		if status, b := call(http.MethodGet, "/v1/deliveries/"+id, "", &d); status != http.StatusOK {
			t.Fatalf("GET delivery %s: %d %s", id, status, b)
		}
		return d
	}
	waitUntil := func(id, what string, done func(apiwire.DeliveryDetail) bool) apiwire.DeliveryDetail {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			d := delivery(id)
			if done(d) {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("delivery %s is not %s after 30s: %+v", id, what, d)
			}
		}
	}
	terminal := func(d apiwire.DeliveryDetail) bool {
		return d.State == apiwire.StateDelivered || d.State == apiwire.StateFailed
	}

	// The plugin's Validate, across the process boundary, when the
	// endpoint is created: refused with its reason, as a client error.
	refused := []struct{ name, path, says string }{
		{"a relative path", "deliveries.jsonl", "relative path"},
		{"a path outside the root the operator set", "/etc/hymical-elsewhere.jsonl", "outside the directory " + outbox},
	}
	for _, tc := range refused {
		body := fmt.Sprintf(`{"transport":%q,"config":{"path":%q}}`, transport, tc.path)
		if status, b := call(http.MethodPost, "/v1/endpoints", body, nil); status != http.StatusBadRequest && status != http.StatusUnprocessableEntity || !strings.Contains(b, tc.says) {
			t.Errorf("creating an endpoint with %s: %d %s; want a 4xx saying %q", tc.name, status, b, tc.says)
		}
	}

	// Delivered: every submission lands once, signed with the endpoint's
	// secret.
	file := filepath.Join(outbox, "deliveries.jsonl")
	ok := endpoint("form_ok", file)
	var ids []string
	for range 3 {
		ids = append(ids, submit("form_ok"))
	}
	for _, id := range ids {
		d := waitUntil(id, "terminal", terminal)
		if d.State != apiwire.StateDelivered || d.Attempts != 1 {
			t.Fatalf("delivery %s ended %s after %d attempts: %+v", id, d.State, d.Attempts, d.AttemptHistory)
		}
	}
	lines := readLines(t, file)
	if len(lines) != len(ids) {
		t.Fatalf("%d lines in %s, want %d", len(lines), file, len(ids))
	}
	for i, l := range lines {
		if l.Body == nil {
			t.Fatalf("line %d has no UTF-8 body: %+v", i, l)
		}
		h := http.Header{}
		for _, hd := range l.Headers {
			h.Add(hd.Name, hd.Value)
		}
		if err := webhook.Verify(h, []byte(*l.Body), ok.Secret); err != nil {
			t.Errorf("line %d (%s): the signature does not verify: %v", i, l.DeliveryID, err)
		}
		if !strings.Contains(*l.Body, `"note":"<&>"`) {
			t.Errorf("line %d: the body is not carried as submitted: %s", i, *l.Body)
		}
		if !slices.Contains(ids, l.DeliveryID) {
			t.Errorf("line %d is for %s, not one of %v", i, l.DeliveryID, ids)
		}
	}

	// Retryable: the file's directory is missing, so the append fails and
	// the attempt counts; once it exists, the retry on the schedule
	// delivers.
	later := filepath.Join(outbox, "later")
	endpoint("form_retry", filepath.Join(later, "deliveries.jsonl"))
	id := submit("form_retry")
	d := waitUntil(id, "tried once", func(d apiwire.DeliveryDetail) bool { return d.Attempts >= 1 })
	if d.State == apiwire.StateDelivered || d.State == apiwire.StateFailed || d.AttemptHistory[0].Outcome != apiwire.OutcomeRetryable || !strings.Contains(d.AttemptHistory[0].Error, "ENOENT") {
		t.Fatalf("into a missing directory: %s with %+v; want a retryable attempt and the delivery waiting", d.State, d.AttemptHistory)
	}
	if err := os.Mkdir(later, 0o755); err != nil {
		t.Fatal(err)
	}
	d = waitUntil(id, "terminal", terminal)
	last := d.AttemptHistory[len(d.AttemptHistory)-1]
	if d.State != apiwire.StateDelivered || d.Attempts < 2 || last.Outcome != apiwire.OutcomeDelivered {
		t.Fatalf("after the directory was made: %s after %d attempts %+v; want delivered on a retry", d.State, d.Attempts, d.AttemptHistory)
	}

	// Permanent: a directory now stands where the endpoint's file was to
	// be. The plugin refuses before writing anything, so the delivery
	// fails at once, with its reason, and no attempt is counted.
	gone := filepath.Join(outbox, "gone.jsonl")
	endpoint("form_dir", gone)
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	id = submit("form_dir")
	d = waitUntil(id, "terminal", terminal)
	if d.State != apiwire.StateFailed || d.Attempts != 0 || d.CycleAttempts != 0 || !strings.Contains(d.UnsentReason, "a directory") {
		t.Fatalf("to a directory: %s, %d attempts, reason %q; want failed at once, nothing counted, the plugin's reason", d.State, d.Attempts, d.UnsentReason)
	}

	// A stopped server stops its plugin, which exits by itself.
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("hymical serve exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("hymical serve still runs 30s after SIGTERM")
	}
	logs := out.String()
	if !strings.Contains(logs, "the host asked the plugin to shut down") {
		t.Errorf("the plugin was not asked to shut down when the server stopped")
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "plugin process exited") && strings.Contains(line, scriptName) && strings.Contains(line, "ERROR") {
			t.Errorf("the plugin did not exit cleanly: %s", line)
		}
	}
	if strings.Contains(logs, token) {
		t.Error("the admin token appeared in the server's output")
	}
}
