package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/server/telemetry/telemetrytest"
)

// TestServeTracesAndMetrics runs `hymical serve` with OTLP tracing to a real
// in-process collector and metrics on, makes one known run (a submission
// whose first attempt gets a 503 and second a 200), and checks what an
// operator would: the CLI shows each attempt's trace id; those traces reach
// the collector from the server and from the http plugin's process, with
// the ingest, fan-out, claim and attempt spans and the plugin's POST; the
// receiver got the attempt's traceparent; /metrics needs the admin token
// and counts exactly that run.
func TestServeTracesAndMetrics(t *testing.T) {
	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	const token = "test-admin-token-0123456789"
	t.Setenv("FORMS_SERVER_ADMIN_TOKEN", token)
	// Standard OTEL_* variables reach the server's exporter and, passed on,
	// the plugin's: a short batch delay makes the spans arrive soon.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	collector := telemetrytest.NewCollector(t)

	var mu sync.Mutex
	var traceparents []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceparents = append(traceparents, r.Header.Get("traceparent"))
		n := len(traceparents)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer recv.Close()

	ctx := t.Context()
	base, out, logs := startServe(t, dir,
		"--worker.retry_delays=50ms",
		"--telemetry.exporter=otlp-grpc",
		"--telemetry.endpoint="+collector.Endpoint(),
		"--telemetry.service_name=hymical-e2e",
		"--telemetry.resource_attributes=deployment.environment=test",
		"--telemetry.metrics",
	)
	if !strings.Contains(out.String(), "telemetry: traces otlp-grpc, metrics on /metrics (admin token)") {
		t.Errorf("the start-up banner does not say telemetry is on:\n%s", out.String())
	}

	hymical := func(args ...string) string {
		t.Helper()
		var b bytes.Buffer
		if err := run(ctx, args, &b, &b); err != nil {
			t.Fatalf("hymical %s: %v\n%s", strings.Join(args, " "), err, b.String())
		}
		return b.String()
	}
	hymical("endpoints", "add", "--server", base, "--url", recv.URL+"/hook", "--form", "form_demo")
	dlv := regexp.MustCompile(`(dlv_[0-9a-f]{32})`).FindString(hymical("submit", "--server", base, "--form", "form_demo"))
	if dlv == "" {
		t.Fatal("submit printed no delivery")
	}
	var shown string
	testwait.For(t, 20*time.Second, func() error {
		if shown = hymical("deliveries", "show", "--server", base, dlv); !strings.Contains(shown, "state delivered") {
			return fmt.Errorf("the delivery was never delivered:\n%s", shown)
		}
		return nil
	})
	// The CLI shows each attempt's trace id, for jumping to the trace.
	rows := regexp.MustCompile(`(?m)^([12])\s+(retryable|delivered)\s+(503|200)\s+false\s+\S+\s+\S+\s+([0-9a-f]{32})\s`).FindAllStringSubmatch(shown, -1)
	if len(rows) != 2 {
		t.Fatalf("deliveries show lacks two attempts with trace ids:\n%s", shown)
	}
	traceIDs := []string{rows[0][4], rows[1][4]}

	// Both attempts' traces reach the collector, from the server and the plugin.
	spans := collector.WaitFor(t, 20*time.Second, "the attempts' spans from the server and the plugin", func(ss []telemetrytest.Span) bool {
		// Both attempts are in one trace now, so count them there.
		for i, id := range traceIDs {
			var attempt bool
			posts := 0
			for _, s := range ss {
				attempt = attempt || s.Service == "hymical-e2e" && s.Name == telemetry.SpanAttempt && s.TraceID == id &&
					s.Attributes[string(telemetry.AttrAttemptNumber)] == strconv.Itoa(i+1)
				if s.Service == "hymical-e2e-plugin-http" && s.Name == "POST" && s.TraceID == id {
					posts++
				}
			}
			if !attempt || posts < len(traceIDs) {
				return false
			}
		}
		return len(telemetrytest.Find(ss, "hymical-e2e", "POST /v1/forms/{form_id}/submissions")) > 0
	})
	ingest := telemetrytest.Find(spans, "hymical-e2e", "POST /v1/forms/{form_id}/submissions")[0]
	if ingest.Resource["deployment.environment"] != "test" || ingest.Attributes[string(telemetry.AttrDeliveryIDs)] != "" {
		t.Errorf("ingest span %+v", ingest)
	}
	if fan := telemetrytest.Find(spans, "hymical-e2e", telemetry.SpanFanout); len(fan) != 1 || fan[0].ParentSpanID != ingest.SpanID {
		t.Errorf("fan-out spans %+v: want one, a child of the ingest span", fan)
	}
	for i, id := range traceIDs {
		var attempt telemetrytest.Span
		for _, s := range telemetrytest.Find(spans, "hymical-e2e", telemetry.SpanAttempt) {
			if s.TraceID == id && s.Attributes[string(telemetry.AttrAttemptNumber)] == strconv.Itoa(i+1) {
				attempt = s
			}
		}
		// The submitter's trace: the attempt is a child of the ingest
		// request's span, and links to the root claim span that took it.
		if attempt.TraceID != ingest.TraceID || attempt.ParentSpanID != ingest.SpanID {
			t.Errorf("attempt %d is in trace %s under %s, want the ingest span %s of trace %s",
				i+1, attempt.TraceID, attempt.ParentSpanID, ingest.SpanID, ingest.TraceID)
		}
		if attempt.Attributes[string(telemetry.AttrDeliveryID)] != dlv {
			t.Errorf("attempt %d span is about %q, want %s", i+1, attempt.Attributes[string(telemetry.AttrDeliveryID)], dlv)
		}
		claims := telemetrytest.Find(spans, "hymical-e2e", telemetry.SpanClaim)
		if len(attempt.Links) != 1 || !slices.ContainsFunc(claims, func(c telemetrytest.Span) bool {
			return c.SpanID == attempt.Links[0].SpanID && c.TraceID == attempt.Links[0].TraceID && c.ParentSpanID == ""
		}) {
			t.Errorf("attempt %d links %+v, want one root claim span", i+1, attempt.Links)
		}
		mu.Lock()
		tp := traceparents[i]
		mu.Unlock()
		if !strings.HasPrefix(tp, "00-"+id+"-") {
			t.Errorf("the receiver's request %d carried traceparent %q, want one in trace %s", i+1, tp, id)
		}
	}

	// /metrics: the admin token, then the counts of exactly that run.
	scrape := func(auth string) (int, string) { return scrapeMetrics(t, base, auth) }
	if code, _ := scrape(""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	code, metrics := scrape(token)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, metrics)
	}
	for _, want := range []string{
		`hymical_attempts_total{outcome="retryable",transport="http"} 1`,
		`hymical_attempts_total{outcome="delivered",transport="http"} 1`,
		`hymical_send_duration_seconds_count{outcome="delivered",transport="http"} 1`,
		`hymical_send_duration_seconds_count{outcome="retryable",transport="http"} 1`,
		`hymical_claim_to_send_duration_seconds_count{transport="http"} 2`,
		`hymical_deliveries{state="delivered"} 1`,
		`hymical_deliveries{state="pending"} 0`,
		`hymical_deliveries{state="failed"} 0`,
		`hymical_deliveries_due 0`,
		`hymical_plugin_restarts_total{plugin="http"} 0`,
		`service_name="hymical-e2e"`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(metrics, `hymical_attempts_late_total{transport="http"} 0`) {
		t.Error("/metrics does not show zero late attempts; there was none")
	}
	// A server that has sent has every series, the histograms included.
	t.Run("the shipped alerts and dashboard name only exported metrics", func(t *testing.T) {
		checkMonitoringConfigs(t, metrics)
	})
	if t.Failed() {
		t.Logf("/metrics:\n%s", metrics)
	}
	if strings.Contains(out.String()+logs.String()+metrics, token) {
		t.Error("the admin token appeared in the server's output or metrics")
	}
}

// TestServeMetricsPresentAtZero scrapes a server that has done nothing yet:
// every counter and gauge an alert may name is there, at zero, for each
// transport and each kind, so no alert needs absent() to tell "none yet"
// from "not scraped".
func TestServeMetricsPresentAtZero(t *testing.T) {
	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	const token = "test-admin-token-0123456789"
	t.Setenv("FORMS_SERVER_ADMIN_TOKEN", token)
	base, _, _ := startServe(t, dir, "--telemetry.metrics")
	code, metrics := scrapeMetrics(t, base, token)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, metrics)
	}
	var missing []string
	for _, want := range []string{
		`hymical_attempts_total{outcome="delivered",transport="http"} 0`,
		`hymical_attempts_total{outcome="retryable",transport="http"} 0`,
		`hymical_attempts_total{outcome="permanent",transport="http"} 0`,
		`hymical_attempts_late_total{transport="http"} 0`,
		`hymical_claims_unsent_total{reason="unavailable",transport="http"} 0`,
		`hymical_claims_unsent_total{reason="refused",transport="http"} 0`,
		`hymical_claims_unsent_total{reason="unsignable",transport="http"} 0`,
		`hymical_endpoint_disables_total{reason="gone"} 0`,
		`hymical_endpoint_disables_total{reason="failing"} 0`,
		`hymical_endpoints_disabled{reason="operator"} 0`,
		`hymical_endpoints_disabled{reason="gone"} 0`,
		`hymical_endpoints_disabled{reason="failing"} 0`,
		`hymical_deliveries{state="pending"} 0`,
		`hymical_deliveries_due 0`,
		`hymical_plugin_restarts_total{plugin="http"} 0`,
		`hymical_plugin_up{plugin="http"} 1`,
		`hymical_deliveries_oldest_due_seconds 0`,
		`hymical_connections_refused_total{limit="total"} 0`,
		`hymical_connections_refused_total{limit="address"} 0`,
		`hymical_connections_evicted_total{limit="total"} 0`,
		`hymical_connections_evicted_total{limit="address"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		t.Errorf("a fresh server's /metrics lacks:\n%s\n\n/metrics:\n%s", strings.Join(missing, "\n"), metrics)
	}
}

// scrapeMetrics GETs base/metrics with the bearer token auth (none if
// empty) and returns the status and body.
func scrapeMetrics(t *testing.T, base, auth string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/metrics", nil)
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startServe runs `hymical serve` in this process on a SQLite file in dir,
// with the plugins in dir, on a free loopback port, sending to loopback
// receivers, with flags added to those. It stops the server when the test
// ends and returns the API's base URL and what serve printed and logged.
func startServe(t *testing.T, dir string, flags ...string) (base string, out, logs *syncbuf.Buffer) {
	t.Helper()
	out, logs = new(syncbuf.Buffer), new(syncbuf.Buffer)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	args := append([]string{"serve",
		"--database.url=sqlite:" + filepath.Join(dir, "hymical.db"),
		"--plugins.dir=" + dir,
		"--server.listen=127.0.0.1:0",
		"--webhook.allowed_networks=127.0.0.0/8",
		"--worker.poll_interval=20ms",
	}, flags...)
	go func() { done <- run(ctx, args, out, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop after its context ended")
		}
	})
	return waitListening(t, out, logs, done), out, logs
}

// waitListening waits for serve to say where it listens and returns the
// base URL.
func waitListening(t *testing.T, out, logs *syncbuf.Buffer, done <-chan error) string {
	t.Helper()
	listening := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)
	var base string
	testwait.For(t, 20*time.Second, func() error {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			return nil
		}
		select {
		case err := <-done:
			t.Fatalf("serve stopped: %v\n%s\n%s", err, out.String(), logs.String())
		default:
		}
		return fmt.Errorf("serve never said where it listens:\n%s\n%s", out.String(), logs.String())
	})
	return base
}
