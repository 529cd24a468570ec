package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// requireTool finds a program the generated-client test needs. Outside CI
// a missing one skips the test; CI has node and npm (.ci/tools.sh), so there
// it fails.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed, and CI must run this test: apt-get install nodejs npm (.ci/tools.sh does)", name)
	}
	t.Skipf("%s is not installed (apt-get install nodejs npm); skipping the generated client", name)
	return ""
}

// tsToolchain installs the pinned generator, client library and compiler
// of testdata/tsclient (package-lock.json pins the whole tree) once per
// lock file, in a cache directory under the system's temporary directory,
// and returns its node_modules.
func tsToolchain(t *testing.T, npm string) string {
	t.Helper()
	lock, err := os.ReadFile("testdata/tsclient/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile("testdata/tsclient/package.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(manifest, lock...))
	cache := filepath.Join(os.TempDir(), "hymical-tsclient-"+hex.EncodeToString(sum[:8]))
	modules := filepath.Join(cache, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, ".bin", "tsc")); err == nil {
		return modules
	}
	// Install beside the cache and rename it into place, so a run that
	// stops half way leaves no half-filled cache behind.
	work, err := os.MkdirTemp(os.TempDir(), "hymical-tsclient-install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	for name, data := range map[string][]byte{"package.json": manifest, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(work, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(t.Context(), npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", work, err, out)
	}
	if err := os.Rename(work, cache); err != nil && !errors.Is(err, fs.ErrExist) {
		if _, statErr := os.Stat(filepath.Join(modules, ".bin", "tsc")); statErr != nil {
			t.Fatalf("keep the installed packages: %v", err)
		}
	}
	return modules
}

// TestOpenAPIGeneratedClient generates a TypeScript client from the
// document a real server serves (openapi-typescript, used through
// openapi-fetch), type-checks a program written against it with tsc
// --strict, and runs it with node against that server: it creates an
// endpoint and submits a form, creates another once with an
// Idempotency-Key, pages the endpoint list and deletes the first endpoint,
// and the store must hold what it did.
func TestOpenAPIGeneratedClient(t *testing.T) {
	t.Parallel()
	node := requireTool(t, "node")
	npm := requireTool(t, "npm")
	t.Log("hymical-test-uses: node") // counted by the repository's harness/testrun
	modules := tsToolchain(t, npm)

	receiver := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(receiver.Close)
	f := newFixture(t, backends["sqlite"], nil)
	doc := f.send(req{method: "GET", path: "/v1/openapi.json"}).must(t, http.StatusOK).raw

	dir := t.TempDir()
	for name, data := range map[string][]byte{"openapi.json": doc, "package.json": []byte(`{"type":"module"}`)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile("testdata/tsclient/client.ts")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.ts"), src, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(nil, node, filepath.Join(modules, "openapi-typescript", "bin", "cli.js"), "openapi.json", "--output", "schema.d.ts")
	run(nil, node, filepath.Join(modules, "typescript", "bin", "tsc"), "--strict", "--target", "es2022",
		"--module", "nodenext", "--moduleResolution", "nodenext", "--skipLibCheck", "--outDir", "out", "client.ts")
	out := run([]string{
		"HYMICAL_URL=" + f.srv.URL, "HYMICAL_ADMIN_TOKEN=" + adminToken, "HYMICAL_INGEST_KEY=" + ingestKey,
		"HYMICAL_RECEIVER=" + receiver.URL + "/hook",
	}, node, filepath.Join("out", "client.js"))

	var got struct {
		EndpointID   string   `json:"endpoint_id"`
		SecretPrefix string   `json:"secret_prefix"`
		SubmissionID string   `json:"submission_id"`
		Deliveries   []string `json:"deliveries"`
		MissingCode  string   `json:"missing_code"`
		States       []string `json:"states"`
		KeyedID      string   `json:"keyed_id"`
		Paged        []string `json:"paged"`
		BusyCode     string   `json:"busy_code"`
		DeletedAt    string   `json:"deleted_at"`
		FailedPend   int      `json:"failed_pending"`
		GoneCode     string   `json:"gone_code"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("the client printed %q: %v", out, err)
	}
	if got.SecretPrefix != "whsec_" || got.MissingCode != "not_found" || !slices.Equal(got.States, []string{"pending"}) {
		t.Errorf("the client saw %+v", got)
	}
	ep, err := f.store.EndpointGet(t.Context(), got.EndpointID)
	if err != nil || ep.Description != "from the generated client" || ep.RateLimit != 10 {
		t.Fatalf("the endpoint the client created: %+v, %v", ep, err)
	}
	// Paged newest first, one a page: the keyed endpoint, then the first.
	if !slices.Equal(got.Paged, []string{got.KeyedID, got.EndpointID}) {
		t.Errorf("the client paged %v, want [%s %s]: the keyed endpoint once, then the first", got.Paged, got.KeyedID, got.EndpointID)
	}
	if n := f.count("webhook_endpoints"); n != 2 {
		t.Errorf("%d endpoints after two creates and a keyed repeat, want 2", n)
	}
	if got.BusyCode != "endpoint_busy" || got.FailedPend != 1 || got.GoneCode != "endpoint_deleted" {
		t.Errorf("the client's delete: busy %q, failed_pending %d, then %q; want endpoint_busy, 1, endpoint_deleted", got.BusyCode, got.FailedPend, got.GoneCode)
	}
	if ep.DeletedAt == nil || ep.DeletedAt.UTC().Format(time.RFC3339Nano) != got.DeletedAt {
		t.Errorf("the store has the endpoint deleted at %v, the client was told %s", ep.DeletedAt, got.DeletedAt)
	}
	if len(got.Deliveries) != 1 {
		t.Fatalf("the submission fanned out to %v, want one delivery", got.Deliveries)
	}
	d, err := f.store.DeliveryGet(t.Context(), got.Deliveries[0])
	if err != nil || d.EndpointID != got.EndpointID || d.State != storage.StateFailed || !strings.HasPrefix(d.UnsentReason, "endpoint deleted") {
		t.Fatalf("the delivery of the client's submission, after its endpoint's forced delete: %+v, %v; want failed, endpoint deleted", d, err)
	}
	if n := f.count("webhook_events"); n != 1 {
		t.Errorf("%d events after a submission and its idempotent repeat, want 1", n)
	}
}
