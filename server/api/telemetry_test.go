package api_test

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/telemetry"
)

func spanAttr(kvs []attribute.KeyValue, k attribute.Key) string {
	for _, kv := range kvs {
		if kv.Key == k {
			if kv.Value.Type() == attribute.INT64 {
				return strconv.FormatInt(kv.Value.AsInt64(), 10)
			}
			return kv.Value.String()
		}
	}
	return ""
}

func TestIngestIsTracedAndItsTraceParentStored(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		f := newFixture(t, b, func(o *api.Options) { o.TracerProvider = tp })
		f.createEndpoint(map[string]any{"url": "https://a.example.com/in"})
		f.createEndpoint(map[string]any{"url": "https://b.example.com/in"})

		const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		r := f.send(req{method: "POST", path: "/v1/forms/contact/submissions", token: ingestKey,
			body: map[string]any{"email": "secret-address@example.com"}, header: map[string]string{"traceparent": caller}}).must(t, http.StatusAccepted)

		var ingest, fanout tracetest.SpanStub
		for _, s := range spans.GetSpans() {
			switch s.Name {
			case "POST /v1/forms/{form_id}/submissions":
				ingest = s
			case telemetry.SpanFanout:
				fanout = s
			}
		}
		if ingest.SpanKind != trace.SpanKindServer || ingest.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
			ingest.Parent.SpanID().String() != "00f067aa0ba902b7" || !ingest.Parent.IsRemote() {
			t.Fatalf("ingest span %+v: want a server span continuing the caller's traceparent", ingest)
		}
		for k, want := range map[attribute.Key]string{
			telemetry.AttrHTTPMethod: "POST", telemetry.AttrHTTPRoute: "/v1/forms/{form_id}/submissions", telemetry.AttrHTTPStatus: "202",
			telemetry.AttrSubmissionID: r.str("submission_id"), telemetry.AttrEventID: r.str("event_id"),
			telemetry.AttrFormID: "contact", telemetry.AttrFanoutCount: "2", telemetry.AttrIdempotentReplay: "false",
		} {
			if got := spanAttr(ingest.Attributes, k); got != want {
				t.Errorf("ingest span %s = %q, want %q", k, got, want)
			}
		}
		if fanout.Parent.SpanID() != ingest.SpanContext.SpanID() || spanAttr(fanout.Attributes, telemetry.AttrFanoutCount) != "2" {
			t.Errorf("fan-out span %+v: want a child of the ingest span with 2 deliveries", fanout)
		}
		deliveries := ids(r, "deliveries")
		got := strings.Trim(spanAttr(fanout.Attributes, telemetry.AttrDeliveryIDs), "[]")
		if fields := strings.Fields(strings.ReplaceAll(strings.ReplaceAll(got, `"`, " "), ",", " ")); !slices.Equal(sorted(fields...), sorted(deliveries...)) {
			t.Errorf("fan-out span names deliveries %q, want %q", got, deliveries)
		}
		for _, s := range spans.GetSpans() {
			for _, kv := range s.Attributes {
				if strings.Contains(kv.Value.String(), "secret-address") || strings.Contains(kv.Value.String(), ingestKey) {
					t.Errorf("span %s attribute %s carries the body or the key", s.Name, kv.Key)
				}
			}
		}
		// The event carries the ingest span's own context, so attempts link to it.
		ev, err := f.store.EventGet(t.Context(), r.str("event_id"))
		if err != nil {
			t.Fatal(err)
		}
		want := "00-" + ingest.SpanContext.TraceID().String() + "-" + ingest.SpanContext.SpanID().String() + "-01"
		if ev.TraceParent != want {
			t.Errorf("stored traceparent %q, want the ingest span's %q", ev.TraceParent, want)
		}

		t.Run("a request without a traceparent starts a trace of its own", func(t *testing.T) {
			r := f.send(req{method: "POST", path: "/v1/events", token: ingestKey,
				body: map[string]any{"type": "form.published", "payload": map[string]any{}}}).must(t, http.StatusAccepted)
			ev, err := f.store.EventGet(t.Context(), r.str("event_id"))
			if err != nil {
				t.Fatal(err)
			}
			sc := telemetry.SpanContextFromTraceParent(ev.TraceParent)
			if !sc.IsValid() || sc.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Errorf("stored traceparent %q, want a new trace's", ev.TraceParent)
			}
		})
		t.Run("a failed request's span carries its status", func(t *testing.T) {
			f.send(req{method: "GET", path: "/v1/deliveries/dlv_nope", token: adminToken}).must(t, http.StatusNotFound)
			for _, s := range spans.GetSpans() {
				if s.Name == "GET /v1/deliveries/{id}" && spanAttr(s.Attributes, telemetry.AttrHTTPStatus) == "404" {
					return
				}
			}
			t.Error("no GET /v1/deliveries/{id} span with status 404")
		})
	})
}

func TestMetricsRoute(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte("hymical_attempts_total 1\n"))
	})
	get := func(f *fixture, token string) *http.Response {
		t.Helper()
		hr, _ := http.NewRequestWithContext(t.Context(), "GET", f.srv.URL+"/metrics", nil)
		if token != "" {
			hr.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := f.srv.Client().Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	t.Run("off: 404 saying how to turn it on", func(t *testing.T) {
		f := newFixture(t, backends["sqlite"], nil)
		r := f.admin("GET", "/metrics", nil).must(t, http.StatusNotFound)
		if code, msg := r.errorCode(t); code != "metrics_off" || !strings.Contains(msg, "telemetry.metrics") {
			t.Errorf("answer %s", r.raw)
		}
	})
	t.Run("on: only the admin token may scrape", func(t *testing.T) {
		f := newFixture(t, backends["sqlite"], func(o *api.Options) { o.Metrics = metrics })
		for token, want := range map[string]int{"": http.StatusUnauthorized, ingestKey: http.StatusForbidden, "wrong": http.StatusUnauthorized, adminToken: http.StatusOK} {
			if got := get(f, token).StatusCode; got != want {
				t.Errorf("token %q: %d, want %d", token, got, want)
			}
		}
	})
	t.Run("public: anyone may scrape", func(t *testing.T) {
		f := newFixture(t, backends["sqlite"], func(o *api.Options) { o.Metrics, o.MetricsPublic = metrics, true })
		if got := get(f, ""); got.StatusCode != http.StatusOK || !strings.HasPrefix(got.Header.Get("Content-Type"), "text/plain") {
			t.Errorf("no token: %d %s, want 200 text/plain", got.StatusCode, got.Header.Get("Content-Type"))
		}
	})
}
