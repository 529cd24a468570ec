package telemetry_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/server/telemetry/telemetrytest"
)

func TestDisabledTelemetryDoesNothing(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]telemetry.Config{
		"zero config":   {},
		"exporter none": {Exporter: telemetry.ExporterNone, Endpoint: "collector:4317", ServiceName: "x"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tel, err := telemetry.New(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, span := tel.TracerProvider().Tracer("t").Start(t.Context(), "s")
			if span.IsRecording() || span.SpanContext().IsValid() {
				t.Error("tracing is off, yet a span records")
			}
			span.End()
			if tel.Tracing() || tel.MetricsHandler() != nil || tel.PluginEnv("http") != nil {
				t.Errorf("off, yet Tracing %v, metrics handler %v, plugin env %q", tel.Tracing(), tel.MetricsHandler(), tel.PluginEnv("http"))
			}
			if err := tel.Shutdown(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestNewRefusesAnUnknownExporter(t *testing.T) {
	t.Parallel()
	if _, err := telemetry.New(t.Context(), telemetry.Config{Exporter: "zipkin"}); err == nil || !strings.Contains(err.Error(), "otlp-grpc") {
		t.Fatalf("err = %v, want one listing the exporters", err)
	}
}

// exportOne makes one span on tel, with an attribute, and flushes it.
func exportOne(t *testing.T, tel *telemetry.Telemetry) trace.SpanContext {
	t.Helper()
	_, span := tel.TracerProvider().Tracer("test").Start(t.Context(), "exported", trace.WithAttributes(attribute.String("k", "v")))
	span.End()
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	return span.SpanContext()
}

func TestOTLPExportReachesARealReceiver(t *testing.T) {
	t.Parallel()
	tests := []struct {
		exporter  telemetry.Exporter
		collector func(testing.TB) *telemetrytest.Collector
		endpoint  func(c *telemetrytest.Collector) string
		insecure  bool
	}{
		{telemetry.ExporterOTLPGRPC, telemetrytest.NewCollector, func(c *telemetrytest.Collector) string { return c.Endpoint() }, false},
		{telemetry.ExporterOTLPGRPC, telemetrytest.NewCollector, func(c *telemetrytest.Collector) string {
			return strings.TrimPrefix(c.Endpoint(), "http://") // host:port, plaintext by insecure
		}, true},
		{telemetry.ExporterOTLPHTTP, telemetrytest.NewHTTPCollector, func(c *telemetrytest.Collector) string { return c.Endpoint() }, false},
		{telemetry.ExporterOTLPHTTP, telemetrytest.NewHTTPCollector, func(c *telemetrytest.Collector) string {
			return strings.TrimPrefix(c.Endpoint(), "http://")
		}, true},
	}
	for _, tt := range tests {
		name := string(tt.exporter)
		if tt.insecure {
			name += " to host:port, insecure"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := tt.collector(t)
			tel, err := telemetry.New(t.Context(), telemetry.Config{
				Exporter: tt.exporter, Endpoint: tt.endpoint(c), Insecure: tt.insecure,
				ServiceName: "hymical-test", ServiceVersion: "v9.9.9", InstanceID: "wrk_1",
				ResourceAttributes: map[string]string{"deployment.environment": "test"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !tel.Tracing() {
				t.Fatal("Tracing() is false with an OTLP exporter")
			}
			sc := exportOne(t, tel)
			spans := c.WaitFor(t, 10*time.Second, "the exported span", func(s []telemetrytest.Span) bool { return len(s) > 0 })
			s := spans[0]
			if s.Name != "exported" || s.TraceID != sc.TraceID().String() || s.Attributes["k"] != "v" {
				t.Errorf("received %+v, want the span %s with k=v", s, sc.TraceID())
			}
			for k, want := range map[string]string{
				"service.name": "hymical-test", "service.version": "v9.9.9", "service.instance.id": "wrk_1",
				"deployment.environment": "test", "telemetry.sdk.language": "go",
			} {
				if s.Resource[k] != want {
					t.Errorf("resource %s = %q, want %q", k, s.Resource[k], want)
				}
			}
		})
	}
}

// Not parallel: it sets the process's OTEL_* variables, as an operator
// would, and wants them honoured over the defaults and config.
func TestStandardEnvironmentVariablesAreHonoured(t *testing.T) {
	c := telemetrytest.NewCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", c.Endpoint())
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "team=forms,deployment.environment=staging")
	tel, err := telemetry.New(t.Context(), telemetry.Config{
		Exporter: telemetry.ExporterOTLPGRPC, ServiceName: "from-config",
		ResourceAttributes: map[string]string{"deployment.environment": "config", "region": "eu"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if tel.ServiceName() != "from-env" {
		t.Errorf("ServiceName() = %q, want OTEL_SERVICE_NAME's", tel.ServiceName())
	}
	exportOne(t, tel)
	s := c.WaitFor(t, 10*time.Second, "a span sent to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", func(s []telemetrytest.Span) bool { return len(s) > 0 })[0]
	for k, want := range map[string]string{"service.name": "from-env", "team": "forms", "deployment.environment": "staging", "region": "eu"} {
		if s.Resource[k] != want {
			t.Errorf("resource %s = %q, want %q", k, s.Resource[k], want)
		}
	}
}

func TestStdoutExporterWritesOneJSONSpanALine(t *testing.T) {
	t.Parallel()
	var out syncbuf.Buffer
	tel, err := telemetry.New(t.Context(), telemetry.Config{Exporter: telemetry.ExporterStdout, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	sc := exportOne(t, tel)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var got struct {
		Name        string
		SpanContext struct{ TraceID string }
	}
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &got) != nil || got.Name != "exported" || got.SpanContext.TraceID != sc.TraceID().String() {
		t.Fatalf("stdout = %q, want one JSON line for the span", out.String())
	}
}

func TestPluginEnv(t *testing.T) {
	t.Parallel()
	environ := []string{
		"OTEL_EXPORTER_OTLP_HEADERS=api-key=abc", "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=server-only",
		"FORMS_DATABASE_URL=postgres://u:SECRET@db/x", "HOME=/root",
	}
	tests := []struct {
		name string
		cfg  telemetry.Config
		want []string
	}{
		{"otlp-grpc to a host:port, insecure", telemetry.Config{Exporter: telemetry.ExporterOTLPGRPC, Endpoint: "collector:4317", Insecure: true,
			ResourceAttributes: map[string]string{"region": "eu west"}, Environ: environ}, []string{
			"OTEL_BSP_SCHEDULE_DELAY=100",
			"OTEL_EXPORTER_OTLP_HEADERS=api-key=abc",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://collector:4317",
			"OTEL_EXPORTER_OTLP_TRACES_INSECURE=true",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc",
			"OTEL_RESOURCE_ATTRIBUTES=region=eu%20west",
			"OTEL_SERVICE_NAME=hymical-plugin-http",
			"OTEL_TRACES_EXPORTER=otlp",
		}},
		{"otlp-http with no endpoint leaves it to the variables", telemetry.Config{Exporter: telemetry.ExporterOTLPHTTP, ServiceName: "forms"}, []string{
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf",
			"OTEL_SERVICE_NAME=forms-plugin-http",
			"OTEL_TRACES_EXPORTER=otlp",
		}},
		{"stdout goes to the plugin's stderr", telemetry.Config{Exporter: telemetry.ExporterStdout, Stdout: io.Discard}, []string{
			"OTEL_SERVICE_NAME=hymical-plugin-http",
			"OTEL_TRACES_EXPORTER=console",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tel, err := telemetry.New(t.Context(), tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
			if got := tel.PluginEnv("http"); !slices.Equal(got, tt.want) {
				t.Errorf("PluginEnv:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestEndpointURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		exp      telemetry.Exporter
		endpoint string
		insecure bool
		want     string
		err      string // in the error, when one is wanted
	}{
		{telemetry.ExporterOTLPGRPC, "", false, "", ""},
		{telemetry.ExporterOTLPGRPC, "collector:4317", false, "https://collector:4317", ""},
		{telemetry.ExporterOTLPGRPC, "collector:4317", true, "http://collector:4317", ""},
		{telemetry.ExporterOTLPGRPC, "http://collector:4317/ignored", false, "http://collector:4317", ""},
		{telemetry.ExporterOTLPHTTP, "collector:4318", true, "http://collector:4318/v1/traces", ""},
		{telemetry.ExporterOTLPHTTP, "https://otlp.example.com", false, "https://otlp.example.com/v1/traces", ""},
		{telemetry.ExporterOTLPHTTP, "https://otlp.example.com/custom/traces", false, "https://otlp.example.com/custom/traces", ""},
		{telemetry.ExporterStdout, "ignored:1", false, "", ""},
		{telemetry.ExporterOTLPGRPC, "collector", false, "", "neither host:port"},
		{telemetry.ExporterOTLPGRPC, "grpc://collector:4317", false, "", `scheme "grpc"`},
		{telemetry.ExporterOTLPHTTP, "https://collector:4318", true, "", "insecure"},
		{telemetry.ExporterOTLPHTTP, "http://collector:4318/v1/traces?x=1", false, "", "query"},
		{telemetry.ExporterOTLPHTTP, "https://user:PASSWORD@collector:4318", false, "", "OTEL_EXPORTER_OTLP_HEADERS"},
		{telemetry.ExporterOTLPGRPC, "user:PASSWORD@collector:4317", false, "", "not shown"},
	}
	for _, tt := range tests {
		got, err := telemetry.EndpointURL(tt.exp, tt.endpoint, tt.insecure)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("EndpointURL(%s, %q, %v) = %q, %v; want %q", tt.exp, tt.endpoint, tt.insecure, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("EndpointURL(%s, %q, %v) = %q, %v; want an error saying %q", tt.exp, tt.endpoint, tt.insecure, got, err, tt.err)
		case err != nil && strings.Contains(err.Error(), "PASSWORD"):
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.New(t.Context(), telemetry.Config{Metrics: true, ServiceName: "hymical"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	if tel.Tracing() {
		t.Error("metrics alone turned tracing on")
	}
	m, err := telemetry.NewMetrics(tel.MeterProvider())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	m.RecordAttempt(ctx, "http", "delivered", false, 30*time.Millisecond)
	m.RecordAttempt(ctx, "http", "delivered", true, 40*time.Millisecond)
	m.RecordAttempt(ctx, "http", "retryable", false, 2*time.Second)
	m.RecordClaimToSend(ctx, "http", 3*time.Millisecond)
	var nilMetrics *telemetry.Metrics
	nilMetrics.RecordAttempt(ctx, "http", "delivered", false, time.Second) // records nothing, does not panic

	var statsErr error
	var statsMu sync.Mutex
	if _, err := telemetry.ObserveDeliveries(tel.MeterProvider(), func(context.Context) (telemetry.DeliveryGauges, error) {
		statsMu.Lock()
		defer statsMu.Unlock()
		return telemetry.DeliveryGauges{ByState: map[string]int64{"pending": 4, "processing": 1, "delivered": 7, "failed": 2}, Due: 3, Held: 1,
			OldestDue: time.Now().Add(-90 * time.Second)}, statsErr
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := telemetry.ObserveDisabledEndpoints(tel.MeterProvider(), []string{"operator", "gone", "failing"}, func(context.Context) (map[string]int64, error) {
		return map[string]int64{"gone": 1, "operator": 2}, nil
	}); err != nil {
		t.Fatal(err)
	}
	m.RecordEndpointDisabled(ctx, "failing")
	m.RecordUnsent(ctx, "http", telemetry.UnsentUnavailable)
	m.RecordUnsent(ctx, "http", telemetry.UnsentUnavailable)
	nilMetrics.RecordUnsent(ctx, "http", telemetry.UnsentRefused) // records nothing, does not panic
	if _, err := telemetry.ObservePluginRestarts(tel.MeterProvider(), func() map[string]int { return map[string]int{"http": 2, "nats": 0} }); err != nil {
		t.Fatal(err)
	}

	if _, err := telemetry.ObservePluginsUp(tel.MeterProvider(), func() map[string]bool { return map[string]bool{"http": true, "nats": false} }); err != nil {
		t.Fatal(err)
	}

	body := scrape(t, tel.MetricsHandler())
	// The oldest due delivery waited 90 s when the test made it, a little
	// more by the scrape.
	if m := regexp.MustCompile(`(?m)^hymical_deliveries_oldest_due_seconds ([0-9.e+]+)$`).FindStringSubmatch(body); m == nil {
		t.Errorf("/metrics lacks hymical_deliveries_oldest_due_seconds")
	} else if v, err := strconv.ParseFloat(m[1], 64); err != nil || v < 90 || v > 90+60 {
		t.Errorf("hymical_deliveries_oldest_due_seconds = %s, want about 90", m[1])
	}
	for _, want := range []string{
		`hymical_plugin_up{plugin="http"} 1`,
		`hymical_plugin_up{plugin="nats"} 0`,
		`hymical_attempts_total{outcome="delivered",transport="http"} 2`,
		`hymical_attempts_total{outcome="retryable",transport="http"} 1`,
		`hymical_attempts_late_total{transport="http"} 1`,
		`hymical_send_duration_seconds_count{outcome="delivered",transport="http"} 2`,
		`hymical_send_duration_seconds_bucket{outcome="retryable",transport="http",le="2.5"} 1`,
		`hymical_claim_to_send_duration_seconds_count{transport="http"} 1`,
		`hymical_deliveries{state="pending"} 4`,
		`hymical_deliveries{state="failed"} 2`,
		`hymical_deliveries_due 3`,
		`hymical_deliveries_held 1`,
		`hymical_endpoints_disabled{reason="gone"} 1`,
		`hymical_endpoints_disabled{reason="operator"} 2`,
		`hymical_endpoints_disabled{reason="failing"} 0`, // a known reason nobody has: present at zero
		`hymical_endpoint_disables_total{reason="failing"} 1`,
		`hymical_claims_unsent_total{reason="unavailable",transport="http"} 2`,
		`hymical_plugin_restarts_total{plugin="http"} 2`,
		`hymical_plugin_restarts_total{plugin="nats"} 0`,
		`target_info{`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}

	// A failed read of the counts drops the gauges from that scrape only.
	statsMu.Lock()
	statsErr = errors.New("database away")
	statsMu.Unlock()
	body = scrape(t, tel.MetricsHandler())
	if strings.Contains(body, "hymical_deliveries{") || !strings.Contains(body, "hymical_attempts_total") {
		t.Errorf("with the database away, /metrics should lack only the delivery gauges:\n%s", body)
	}

	// The exposition has its own registry: nothing reached the global one.
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "hymical_") {
			t.Errorf("%s is in Prometheus's global registry", f.GetName())
		}
	}
}

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	if h == nil {
		t.Fatal("no metrics handler")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics answered %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func TestTraceContextHelpers(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := telemetry.SpanContextFromTraceParent(tp)
	if !sc.IsValid() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsSampled() {
		t.Fatalf("SpanContextFromTraceParent(%q) = %+v", tp, sc)
	}
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if got := telemetry.TraceParent(ctx); got != tp {
		t.Errorf("TraceParent = %q, want %q", got, tp)
	}
	if got := telemetry.SampledTraceID(ctx); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("SampledTraceID = %q", got)
	}
	unsampled := trace.ContextWithSpanContext(context.Background(), sc.WithTraceFlags(0))
	if got := telemetry.SampledTraceID(unsampled); got != "" {
		t.Errorf("SampledTraceID of an unsampled span = %q, want none: nobody kept that trace", got)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if telemetry.SpanContextFromTraceParent(bad).IsValid() {
			t.Errorf("SpanContextFromTraceParent(%q) is valid", bad)
		}
	}
	if telemetry.TraceParent(context.Background()) != "" {
		t.Error("TraceParent of a context with no span is not empty")
	}
}
