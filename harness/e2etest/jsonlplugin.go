package e2etest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/pluginhost"
)

// JSONLPlugin is an example plugin in another language that appends each
// message to a file as a JSONLLine (examples/node-transport,
// examples/python-transport), run by ServeJSONLPlugin.
type JSONLPlugin struct {
	// Hymical is the hymical executable to serve with.
	Hymical string
	// Script is the plugin's executable, its real path: the plugin
	// directory gets a symlink to it, as an operator would make, and the
	// pin is its SHA-256.
	Script string
	// Transport is the endpoints' transport, the plugin's name without
	// pluginhost.BinaryPrefix.
	Transport string
	// MissingDir is what the plugin's error says when the file's
	// directory does not exist, in the words of its language's runtime.
	MissingDir string
}

// ServeJSONLPlugin runs a real `hymical serve` process on SQLite with p
// installed in its plugin directory and pinned in its config file, and
// drives it over HTTP as a user would with curl:
//   - the plugin's Validate refuses a bad endpoint when it is created;
//   - 100 submissions arrive in the file, each signed so that it verifies
//     and once after deduplication (CheckSeqDelivered);
//   - an append into a missing directory is retryable, and the retry on
//     the schedule delivers once the directory exists;
//   - a directory where the file should be is refused before anything is
//     written, so the delivery fails at once and no attempt counts;
//   - a stopped server stops the plugin, which exits cleanly, and the
//     admin token is never in the server's output.
func ServeJSONLPlugin(t *testing.T, p JSONLPlugin) {
	t.Helper()
	// The shipped transports are in hymical itself: the plugin directory
	// holds only this plugin, as an operator's would.
	dir := t.TempDir()
	name := pluginhost.BinaryPrefix + p.Transport
	if err := os.Symlink(p.Script, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	// The pin covers the script the host runs; what it loads beside it
	// (node_modules/, a Python module) is the plugin's own business, as a
	// library is.
	sum, err := pluginhost.FileSHA256(p.Script)
	if err != nil {
		t.Fatal(err)
	}
	outbox := t.TempDir()
	srv := StartServer(t, ServerOptions{
		Hymical: p.Hymical,
		Config:  fmt.Sprintf("plugins:\n  list:\n    - name: %s\n      sha256: %s\n      settings:\n        root: %s\n", p.Transport, sum, outbox),
		Flags: []string{
			"--plugins.dir=" + dir,
			"--worker.poll_interval=20ms",
			"--worker.retry_delays=300ms",
			"--worker.max_attempts=20",
		},
	})
	endpoint := func(form, path string) apiwire.EndpointCreated {
		t.Helper()
		return srv.CreateEndpoint(fmt.Sprintf(`{"transport":%q,"form_ids":[%q],"config":{"path":%q}}`, p.Transport, form, path))
	}
	submit := func(form string) string {
		t.Helper()
		return srv.SubmitSeq(form, 1)[0].Deliveries[0]
	}

	// The plugin's Validate, across the process boundary, when the
	// endpoint is created: refused with its reason, as a client error.
	refused := []struct{ name, path, says string }{
		{"a relative path", "deliveries.jsonl", "relative path"},
		{"a path outside the root the operator set", "/etc/hymical-elsewhere.jsonl", "outside the directory " + outbox},
	}
	for _, tc := range refused {
		body := fmt.Sprintf(`{"transport":%q,"config":{"path":%q}}`, p.Transport, tc.path)
		if status, b := srv.Call(http.MethodPost, "/v1/endpoints", body, nil); status != http.StatusBadRequest && status != http.StatusUnprocessableEntity || !strings.Contains(b, tc.says) {
			t.Errorf("creating an endpoint with %s: %d %s; want a 4xx saying %q", tc.name, status, b, tc.says)
		}
	}

	// Delivered: 100 submissions land, each signed with the endpoint's
	// secret, each once after deduplication.
	file := filepath.Join(outbox, "deliveries.jsonl")
	ok := endpoint("form_ok", file)
	subs := srv.SubmitSeq("form_ok", 100)
	delivered := srv.WaitDelivered(subs)
	CheckSeqDelivered(t, ReadJSONL(t, file), ok.Secret, subs, delivered)

	// Retryable: the file's directory is missing, so the append fails and
	// the attempt counts; once it exists, the retry on the schedule
	// delivers.
	later := filepath.Join(outbox, "later")
	endpoint("form_retry", filepath.Join(later, "deliveries.jsonl"))
	id := submit("form_retry")
	d := srv.WaitDelivery(id, "tried once", func(d apiwire.DeliveryDetail) bool { return d.Attempts >= 1 })
	if d.State == apiwire.StateDelivered || d.State == apiwire.StateFailed || d.AttemptHistory[0].Outcome != apiwire.OutcomeRetryable || !strings.Contains(d.AttemptHistory[0].Error, p.MissingDir) {
		t.Fatalf("into a missing directory: %s with %+v; want a retryable attempt saying %q and the delivery waiting", d.State, d.AttemptHistory, p.MissingDir)
	}
	if err := os.Mkdir(later, 0o755); err != nil {
		t.Fatal(err)
	}
	d = srv.WaitDelivery(id, "terminal", Terminal)
	last := d.AttemptHistory[len(d.AttemptHistory)-1]
	if d.State != apiwire.StateDelivered || d.Attempts < 2 || last.Outcome != apiwire.OutcomeDelivered {
		t.Fatalf("after the directory was made: %s after %d attempts %+v; want delivered on a retry", d.State, d.Attempts, d.AttemptHistory)
	}

	// Refused: a directory now stands where the endpoint's file was to be.
	// The plugin refuses before writing anything, so the delivery fails at
	// once, with its reason, and no attempt is counted.
	gone := filepath.Join(outbox, "gone.jsonl")
	endpoint("form_dir", gone)
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	id = submit("form_dir")
	d = srv.WaitDelivery(id, "terminal", Terminal)
	if d.State != apiwire.StateFailed || d.Attempts != 0 || d.CycleAttempts != 0 || !strings.Contains(d.UnsentReason, "a directory") {
		t.Fatalf("to a directory: %s, %d attempts, reason %q; want failed at once, nothing counted, the plugin's reason", d.State, d.Attempts, d.UnsentReason)
	}

	// A stopped server stops its plugin, which exits by itself.
	if err := srv.Stop(30 * time.Second); err != nil {
		t.Fatalf("hymical serve after SIGTERM: %v", err)
	}
	logs := srv.Output()
	if !strings.Contains(logs, "the host asked the plugin to shut down") {
		t.Errorf("the plugin was not asked to shut down when the server stopped")
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "plugin process exited") && strings.Contains(line, name) && strings.Contains(line, "ERROR") {
			t.Errorf("the plugin did not exit cleanly: %s", line)
		}
	}
	if strings.Contains(logs, srv.Token) {
		t.Error("the admin token appeared in the server's output")
	}
}
