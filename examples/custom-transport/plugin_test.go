//go:build unix

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	"testing"
	"time"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite"
)

// These tests prove the README: the plugin built as hymical-plugin-jsonl
// into a plugin directory is found, launched and driven by the server's own
// plugin host over go-plugin, as a real process, and a submission the
// server's worker delivers through it arrives in the file, signed.

// pluginDir holds the built plugin, as the README's build puts it.
var pluginDir string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "hymical-example-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, pluginhost.BinaryPrefix+"jsonl"), ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the plugin: %v\n%s", err, out)
		return 1
	}
	pluginDir = dir
	return m.Run()
}

func startHost(t *testing.T, cfg pluginhost.Config) (*pluginhost.Host, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	h, err := pluginhost.New(t.Context(), cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatalf("pluginhost.New: %v", err)
	}
	t.Cleanup(func() {
		h.Close()
		if t.Failed() {
			t.Logf("host log:\n%s", logs)
		}
	})
	return h, logs
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestHostDiscoversAndDrivesThePlugin(t *testing.T) {
	t.Parallel()
	h, logs := startHost(t, pluginhost.Config{Dir: pluginDir})
	if names := h.Names(); len(names) != 1 || names[0] != "jsonl" {
		t.Fatalf("host runs %v, want [jsonl] found in the plugin directory", names)
	}
	ctx := t.Context()

	refused := map[string]map[string]string{
		"a missing path":  {},
		"a relative path": {ConfigPath: "deliveries.jsonl"},
	}
	for name, cfg := range refused {
		err := h.Validate(ctx, "jsonl", transport.Endpoint{Config: cfg})
		if !errors.Is(err, transport.ErrRejected) || !strings.Contains(err.Error(), `"path"`) {
			t.Errorf("Validate with %s = %v, want a refusal about the path", name, err)
		}
	}
	path := filepath.Join(t.TempDir(), "deliveries.jsonl")
	ep := transport.Endpoint{Config: map[string]string{ConfigPath: path}}
	if err := h.Validate(ctx, "jsonl", ep); err != nil {
		t.Fatalf("Validate of an absolute path: %v", err)
	}

	body := []byte(`{"type":"submission.received","submission":{"id":"sub_1"}}`)
	out := h.Send(ctx, "jsonl", transport.Message{
		DeliveryID: "dlv_1", Attempt: 1, Endpoint: ep,
		Headers: []transport.Header{{Name: "webhook-id", Value: "dlv_1"}},
		Body:    body,
	}, time.Now().Add(5*time.Second))
	if out.Kind != transport.OutcomeDelivered {
		t.Fatalf("Send = %+v, want delivered", out)
	}
	lines := readLines(t, path)
	if got, _ := lines[0].DecodeBody(); len(lines) != 1 || !bytes.Equal(got, body) {
		t.Fatalf("file holds %+v", lines)
	}
	if out := h.Send(ctx, "jsonl", transport.Message{DeliveryID: "dlv_2", Attempt: 1, Endpoint: transport.Endpoint{Config: map[string]string{ConfigPath: "rel"}}}, time.Now().Add(5*time.Second)); out.Kind != transport.OutcomePermanent {
		t.Fatalf("Send to a relative path = %+v, want permanent", out)
	}
	// The plugin's stderr reaches the host's log under its name. It travels
	// on its own stream, so it may trail the answer a little.
	for wait := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if strings.Contains(logs.String(), `plugin=jsonl line="time=`) && strings.Contains(logs.String(), "appended message") {
			break
		}
		if time.Now().After(wait) {
			t.Errorf("the plugin's log line is not in the host's log:\n%s", logs)
			break
		}
	}
}

func TestHostChecksThePin(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(pluginDir, pluginhost.BinaryPrefix+"jsonl")
	t.Run("the binary's own sum runs", func(t *testing.T) {
		t.Parallel()
		startHost(t, pluginhost.Config{Dir: pluginDir, Plugins: []pluginhost.PluginConfig{{Name: "jsonl", SHA256: fileSHA256(t, bin)}}})
	})
	t.Run("another sum is refused", func(t *testing.T) {
		t.Parallel()
		_, err := pluginhost.New(t.Context(), pluginhost.Config{Dir: pluginDir, Plugins: []pluginhost.PluginConfig{{Name: "jsonl", SHA256: strings.Repeat("ab", 32)}}}, slog.New(slog.DiscardHandler))
		if !errors.Is(err, pluginhost.ErrChecksumMismatch) {
			t.Fatalf("New with a wrong pin = %v, want ErrChecksumMismatch", err)
		}
	})
	t.Run("a refused setting stops the host", func(t *testing.T) {
		t.Parallel()
		_, err := pluginhost.New(t.Context(), pluginhost.Config{Dir: pluginDir, Plugins: []pluginhost.PluginConfig{{Name: "jsonl", Settings: map[string]string{SettingRoot: "relative"}}}}, slog.New(slog.DiscardHandler))
		if !errors.Is(err, transport.ErrRejected) || !strings.Contains(err.Error(), "absolute") {
			t.Fatalf("New with a bad root = %v, want the plugin's refusal", err)
		}
	})
}

// TestServerDeliversThroughThePlugin runs the server's own parts (the SQLite
// store, the plugin host on the plugin directory, the HTTP API, the worker
// pool) and delivers one submission through the plugin, with the requests
// the README shows.
func TestServerDeliversThroughThePlugin(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hymical.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if _, err := store.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}

	outbox := t.TempDir()
	host, _ := startHost(t, pluginhost.Config{
		Dir:     pluginDir,
		Plugins: []pluginhost.PluginConfig{{Name: "jsonl", Settings: map[string]string{SettingRoot: outbox}}},
	})
	const token = "test-admin-token-0123456789abcdef"
	apiHandler, err := api.New(api.Options{Store: store, Transports: host, AdminToken: token, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(apiHandler)
	t.Cleanup(srv.Close)
	call := func(path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}

	// The plugin's Validate runs when the endpoint is created.
	if status, b := call("/v1/endpoints", `{"transport":"jsonl","config":{"path":"deliveries.jsonl"}}`); status < 400 || !strings.Contains(string(b), "relative path") {
		t.Fatalf("creating an endpoint with a relative path: %d %s; want the plugin's refusal", status, b)
	}
	if status, b := call("/v1/endpoints", `{"transport":"jsonl","config":{"path":"/etc/hymical-elsewhere.jsonl"}}`); status < 400 || !strings.Contains(string(b), "outside the directory") {
		t.Fatalf("creating an endpoint outside the root: %d %s; want the plugin's refusal", status, b)
	}
	path := filepath.Join(outbox, "deliveries.jsonl")
	status, b := call("/v1/endpoints", `{"transport":"jsonl","config":{"path":"`+path+`"}}`)
	var created struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(b, &created); status != http.StatusCreated || err != nil || created.Secret == "" {
		t.Fatalf("creating the endpoint: %d %s (%v)", status, b, err)
	}
	status, b = call("/v1/forms/form_contact/submissions", `{"name":"Ada Lovelace"}`)
	var submitted struct {
		SubmissionID string   `json:"submission_id"`
		Deliveries   []string `json:"deliveries"`
	}
	if err := json.Unmarshal(b, &submitted); status >= 300 || err != nil || len(submitted.Deliveries) != 1 {
		t.Fatalf("submitting: %d %s (%v); want one delivery", status, b, err)
	}
	dlv := submitted.Deliveries[0]

	pool, err := worker.New(store, host, worker.Config{PollInterval: 20 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pool.Run(runCtx) }()
	defer func() { stop(); <-done }()

	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := store.DeliveryGet(ctx, dlv)
		if err != nil {
			t.Fatal(err)
		}
		if d.State.Terminal() {
			if d.State != storage.StateDelivered || d.Attempts != 1 {
				attempts, _ := store.AttemptList(ctx, d.ID)
				t.Fatalf("delivery ended %s after %d attempts: %+v", d.State, d.Attempts, attempts)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery still %s after 20s", d.State)
		}
		time.Sleep(20 * time.Millisecond)
	}

	lines := readLines(t, path)
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1", len(lines))
	}
	l := lines[0]
	body, err := l.DecodeBody()
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Type       string `json:"type"`
		Submission struct {
			ID     string `json:"id"`
			FormID string `json:"form_id"`
		} `json:"submission"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || l.DeliveryID != dlv || ev.Type != "submission.received" ||
		ev.Submission.ID != submitted.SubmissionID || ev.Submission.FormID != "form_contact" {
		t.Fatalf("line for %s carries %s (%v); want delivery %s of submission %s", l.DeliveryID, body, err, dlv, submitted.SubmissionID)
	}
	// What arrived is verifiable by any receiver holding the secret the API
	// handed out.
	h := http.Header{}
	for _, hd := range l.Headers {
		h.Add(hd.Name, hd.Value)
	}
	if err := webhook.Verify(h, body, created.Secret); err != nil {
		t.Fatalf("the line's signature does not verify: %v", err)
	}
	t.Logf("arrived in %s:\n%s", path, mustReadFile(t, path))
}

func mustReadFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
