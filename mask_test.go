package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/secretbox"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/telemetry/telemetrytest"
	"github.com/hymical/hymical/storage/sqlite"
)

// TestURLSecretsStayHiddenEndToEnd runs `hymical serve` with debug logs and
// OTLP tracing to a real collector, registers an endpoint whose URL holds a
// token, delivers to it (a 503, then a 200), then gives the stored URL
// credentials too, as a row written before the API refused them would
// have, and delivers again (the http plugin refuses it). Everything an
// operator sees, every CLI command's output, the server's output and log,
// and every span the server and the plugin export, hides the token and the
// credentials and still shows x=1; the receiver got the real URL.
func TestURLSecretsStayHiddenEndToEnd(t *testing.T) {
	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FORMS_SERVER_ADMIN_TOKEN", "test-admin-token-0123456789")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	collector := telemetrytest.NewCollector(t)
	var requests atomic.Int32
	var gotQuery atomic.Value
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery.Store(r.URL.RawQuery)
		if requests.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer recv.Close()
	base, out, logs := startServe(t, dir, "--log.level=debug", "--worker.retry_delays=50ms",
		"--telemetry.exporter=otlp-grpc", "--telemetry.endpoint="+collector.Endpoint(), "--telemetry.service_name=mask")

	var printed strings.Builder
	hymical := func(args ...string) string {
		t.Helper()
		var b bytes.Buffer
		if err := run(t.Context(), append(args, "--server", base), &b, &b); err != nil {
			t.Fatalf("hymical %s: %v\n%s", strings.Join(args, " "), err, b.String())
		}
		// The output only: endpoints add's own arguments hold the secret.
		fmt.Fprintf(&printed, "$ hymical %s …\n%s", args[0], b.String())
		return b.String()
	}
	waitFor := func(dlv, state string) string {
		t.Helper()
		var shown string
		testwait.For(t, 20*time.Second, func() error {
			if shown = hymical("deliveries", "show", dlv); !strings.Contains(shown, "state "+state) {
				return fmt.Errorf("delivery %s never became %s:\n%s", dlv, state, shown)
			}
			return nil
		})
		return shown
	}
	deliveryID := regexp.MustCompile(`dlv_[0-9a-f]{32}`)

	real := recv.URL + "/hook?token=SECRET123&x=1"
	added := hymical("endpoints", "add", "--url", real, "--form", "form_mask")
	id := regexp.MustCompile(`ep_[0-9a-f]{32}`).FindString(added)
	if !strings.Contains(added, recv.URL+"/hook?token=[redacted]&x=1") {
		t.Errorf("endpoints add does not show the URL masked:\n%s", added)
	}
	waitFor(deliveryID.FindString(hymical("submit", "--form", "form_mask")), "delivered")
	if q, _ := gotQuery.Load().(string); q != "token=SECRET123&x=1" {
		t.Errorf("the receiver got the query %q, want the real one", q)
	}

	// Credentials in the stored URL, straight into the database.
	// With the key serve wrote beside the database: the secrets are sealed.
	keyText, err := os.ReadFile(filepath.Join(dir, "hymical.db.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := secretbox.ParseKey(strings.TrimSpace(string(keyText)))
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlite.Open(t.Context(), filepath.Join(dir, "hymical.db"), storage.WithSecretBox(box))
	if err != nil {
		t.Fatal(err)
	}
	e, err := store.EndpointGet(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	e.URL = strings.Replace(real, "http://", "http://carol:pw@", 1)
	if _, err := store.EndpointUpdate(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	store.Close()
	refused := waitFor(deliveryID.FindString(hymical("submit", "--form", "form_mask")), "failed")
	if !strings.Contains(refused, "user name or password") {
		t.Errorf("the http plugin did not refuse the URL with credentials:\n%s", refused)
	}
	hymical("deliveries", "list")
	hymical("endpoints", "list")
	wide := hymical("endpoints", "list", "--wide")
	if !strings.Contains(wide, "http://[redacted]@"+strings.TrimPrefix(recv.URL, "http://")+"/hook?token=[redacted]&x=1") {
		t.Errorf("endpoints list --wide does not show the URL masked:\n%s", wide)
	}
	var list apiwire.EndpointList
	if err := json.Unmarshal([]byte(hymical("endpoints", "list", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Endpoints) != 1 || strings.Join(list.Endpoints[0].URLMasked, ",") != "userinfo,query:token" {
		t.Errorf("-o json: %+v, want url_masked userinfo and query:token", list.Endpoints)
	}

	// The two attempts' spans, from the server and from the plugin.
	spans := collector.WaitFor(t, 20*time.Second, "two attempt spans from the server and two POSTs from the plugin", func(ss []telemetrytest.Span) bool {
		return len(telemetrytest.Find(ss, "mask", "hymical.attempt")) >= 2 && len(telemetrytest.Find(ss, "mask-plugin-http", "POST")) >= 2
	})
	var traced strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&traced, "%s %s %v %v %s %v\n", s.Service, s.Name, s.Resource, s.Attributes, s.StatusMessage, s.Events)
	}
	for what, text := range map[string]string{
		"the CLI": printed.String(), "the server's output": out.String(), "the server's log": logs.String(), "the trace": traced.String(),
	} {
		for _, leak := range []string{"SECRET123", "carol", ":pw"} {
			if strings.Contains(text, leak) {
				t.Errorf("%s shows %q:\n%s", what, leak, text)
			}
		}
	}
}
