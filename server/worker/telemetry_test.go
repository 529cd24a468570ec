package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/testwait"

	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/server/telemetry/telemetrytest"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// tracedEnv is an env whose host and pool trace into the SDK's in-memory
// exporter, whose plugins export their own spans over real OTLP to an
// in-process collector, and whose pool records metrics into a manual reader.
type tracedEnv struct {
	*env
	spans     *tracetest.InMemoryExporter
	tp        *sdktrace.TracerProvider
	collector *telemetrytest.Collector
	reader    *sdkmetric.ManualReader
	metrics   *telemetry.Metrics
}

func newTracedEnv(t *testing.T, dir string, open func(*testing.T) storage.Store, answer func(int, *http.Request) int) *tracedEnv {
	t.Helper()
	ctx := t.Context()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	collector := telemetrytest.NewCollector(t)
	// The plugins' environment comes from the real set-up, pointed at the
	// collector; a short batch delay makes the plugins' spans arrive soon.
	pluginTel, err := telemetry.New(ctx, telemetry.Config{
		Exporter: telemetry.ExporterOTLPGRPC, Endpoint: collector.Endpoint(), ServiceName: "hymical",
		Environ: []string{"OTEL_BSP_SCHEDULE_DELAY=50"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pluginTel.Shutdown(context.Background()) })
	store := open(t)
	host, err := pluginhost.New(ctx, pluginhost.Config{
		Dir: dir,
		Plugins: []pluginhost.PluginConfig{
			{Name: "http", Settings: map[string]string{"allowed_networks": "127.0.0.0/8", "connect_timeout": "1s", "read_timeout": "2s"}},
		},
		TracerProvider: tp,
		PluginEnv:      pluginTel.PluginEnv,
	}, e2etest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	recv := newReceiver(t, answer)
	ep, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{
		Transport: "http", URL: recv.URL + "/hook",
		Secrets: []storage.Secret{storage.NewSecret(recv.secret, nil)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	metrics, err := telemetry.NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	return &tracedEnv{
		env:   &env{t: t, store: store, host: host, recv: recv, ep: ep.Endpoint},
		spans: spans, tp: tp, collector: collector, reader: reader, metrics: metrics,
	}
}

// run starts a pool that traces and records metrics.
func (e *tracedEnv) run(cfg worker.Config) {
	e.t.Helper()
	cfg.TracerProvider, cfg.Metrics = e.tp, e.metrics
	e.env.run(cfg, e.store)
}

// ingest makes the span of an ingest request and submits an event carrying
// its traceparent, as the API does.
func (e *tracedEnv) ingest() (trace.SpanContext, storage.Delivery) {
	e.t.Helper()
	ctx, span := e.tp.Tracer("test").Start(context.Background(), "POST /v1/forms/{form_id}/submissions", trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	ev, err := event.Submission("form_1", []byte(`{"email":"a@example.com"}`), time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	ev.TraceParent = telemetry.TraceParent(ctx)
	res, err := e.store.EventCreate(ctx, ev)
	if err != nil || len(res.Deliveries) != 1 {
		e.t.Fatalf("EventCreate: %v, %d deliveries", err, len(res.Deliveries))
	}
	return span.SpanContext(), res.Deliveries[0]
}

// attemptSpans waits until n attempt spans of the delivery have ended and
// returns them in attempt-number order.
func (e *tracedEnv) attemptSpans(deliveryID string, n int) []tracetest.SpanStub {
	e.t.Helper()
	var got []tracetest.SpanStub
	testwait.For(e.t, 20*time.Second, func() error {
		got = nil
		for _, s := range e.spans.GetSpans() {
			if s.Name == telemetry.SpanAttempt && attr(s.Attributes, telemetry.AttrDeliveryID) == deliveryID {
				got = append(got, s)
			}
		}
		if len(got) < n {
			return fmt.Errorf("%d attempt spans of %s ended, want %d; spans: %v", len(got), deliveryID, n, spanNames(e.spans.GetSpans()))
		}
		return nil
	})
	slices.SortFunc(got, func(a, b tracetest.SpanStub) int {
		return strings.Compare(attr(a.Attributes, telemetry.AttrAttemptNumber), attr(b.Attributes, telemetry.AttrAttemptNumber))
	})
	return got
}

// byID finds the ended span with the given id.
func (e *tracedEnv) byID(id trace.SpanID) (tracetest.SpanStub, bool) {
	for _, s := range e.spans.GetSpans() {
		if s.SpanContext.SpanID() == id {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

// childNamed finds the ended span named name whose parent is parent.
func (e *tracedEnv) childNamed(parent trace.SpanContext, name string) (tracetest.SpanStub, bool) {
	for _, s := range e.spans.GetSpans() {
		if s.Name == name && s.Parent.SpanID() == parent.SpanID() && s.Parent.TraceID() == parent.TraceID() {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

// checkAttempt checks one attempt span against its claim, its ingest link,
// the attempt row and the wanted attributes and status.
func (e *tracedEnv) checkAttempt(s tracetest.SpanStub, ingest trace.SpanContext, row storage.Attempt, want map[attribute.Key]string, status codes.Code) {
	e.t.Helper()
	deliveryID := attr(s.Attributes, telemetry.AttrDeliveryID)
	// In the submitter's trace: a child of the ingest span.
	if s.Parent.TraceID() != ingest.TraceID() || s.Parent.SpanID() != ingest.SpanID() || s.SpanContext.TraceID() != ingest.TraceID() {
		e.t.Errorf("attempt %d: parent %v in trace %v, want the ingest span %v", row.Number, s.Parent.SpanID(), s.SpanContext.TraceID(), ingest)
	}
	if s.SpanKind != trace.SpanKindConsumer {
		e.t.Errorf("attempt span kind %v", s.SpanKind)
	}
	// Linked to the root claim span that took it.
	linked := false
	for _, l := range s.Links {
		claim, ok := e.byID(l.SpanContext.SpanID())
		if ok && claim.Name == telemetry.SpanClaim && !claim.Parent.IsValid() &&
			strings.Contains(attr(claim.Attributes, telemetry.AttrDeliveryIDs), deliveryID) &&
			slices.Contains(l.Attributes, telemetry.AttrLinkKind.String(telemetry.LinkClaim)) {
			linked = true
		}
	}
	if !linked {
		e.t.Errorf("attempt %d does not link to the root claim span that took %s: links %+v", row.Number, deliveryID, s.Links)
	}
	if row.TraceID != s.SpanContext.TraceID().String() {
		e.t.Errorf("attempt %d row carries trace id %q, its span is in %s", row.Number, row.TraceID, s.SpanContext.TraceID())
	}
	for k, v := range want {
		if got := attr(s.Attributes, k); got != v {
			e.t.Errorf("attempt %d: %s = %q, want %q", row.Number, k, got, v)
		}
	}
	for _, kv := range s.Attributes {
		if strings.Contains(kv.Value.String(), e.recv.secret) || strings.Contains(kv.Value.String(), "whsec_") || strings.Contains(kv.Value.String(), "a@example.com") {
			e.t.Errorf("attribute %s carries a secret or the body: %q", kv.Key, kv.Value.String())
		}
	}
	if s.Status.Code != status {
		e.t.Errorf("attempt %d status %v %q, want %v", row.Number, s.Status.Code, s.Status.Description, status)
	}
}

// checkPluginHop checks that the attempt's call to the plugin is a client
// span under it, that the plugin's own server and POST spans, sent over
// OTLP from its process, hang under that, and that the receiver's request
// carried the POST span as its parent. It returns the host's client span.
func (e *tracedEnv) checkPluginHop(attempt tracetest.SpanStub, received received) tracetest.SpanStub {
	e.t.Helper()
	const method = "hymical.transport.v1.Transport/Send"
	client, ok := e.childNamed(attempt.SpanContext, method)
	if !ok || client.SpanKind != trace.SpanKindClient {
		e.t.Fatalf("no client span %s under the attempt; spans: %v", method, spanNames(e.spans.GetSpans()))
	}
	traceID := attempt.SpanContext.TraceID().String()
	spans := e.collector.WaitFor(e.t, 20*time.Second, "the plugin's server and POST spans", func(ss []telemetrytest.Span) bool {
		var srv *telemetrytest.Span
		for i, s := range ss {
			if s.Service == "hymical-plugin-http" && s.Name == method && s.ParentSpanID == client.SpanContext.SpanID().String() {
				srv = &ss[i]
			}
		}
		if srv == nil {
			return false
		}
		for _, s := range ss {
			if s.Service == "hymical-plugin-http" && s.Name == "POST" && s.ParentSpanID == srv.SpanID {
				return true
			}
		}
		return false
	})
	// Every attempt of a delivery is in one trace: find this attempt's
	// POST through the plugin's server span under its client span.
	var srvSpanID string
	for _, s := range telemetrytest.Find(spans, "hymical-plugin-http", method) {
		if s.ParentSpanID == client.SpanContext.SpanID().String() {
			srvSpanID = s.SpanID
		}
	}
	var post telemetrytest.Span
	for _, s := range telemetrytest.Find(spans, "hymical-plugin-http", "POST") {
		if s.ParentSpanID == srvSpanID {
			post = s
		}
	}
	if post.TraceID != traceID || post.Kind.String() != "SPAN_KIND_CLIENT" || post.Attributes["server.address"] != "127.0.0.1" {
		e.t.Errorf("the plugin's POST span %+v is not a client span of the attempt's trace %s", post, traceID)
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(received.header)))
	if sc.TraceID().String() != traceID || sc.SpanID().String() != post.SpanID {
		e.t.Errorf("the receiver got traceparent %q, want trace %s with the plugin's POST span %s as parent", received.header.Get("traceparent"), traceID, post.SpanID)
	}
	return client
}

func TestAttemptTraces(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("a delivered attempt is one trace from the claim through the plugin to the receiver", func(t *testing.T) {
				t.Parallel()
				e := newTracedEnv(t, pluginDir, open, func(int, *http.Request) int { return http.StatusNoContent })
				e.run(fastConfig(5))
				ingest, d := e.ingest()
				e.waitFor(d.ID, "delivered", terminal)
				spans := e.attemptSpans(d.ID, 1)
				rows := e.attempts(d.ID)
				wantOutcomes(t, rows, "delivered 204")
				e.checkAttempt(spans[0], ingest, rows[0], map[attribute.Key]string{
					telemetry.AttrEndpointID: e.ep.ID, telemetry.AttrEventType: "submission.received",
					telemetry.AttrAttemptNumber: "1", telemetry.AttrCycleAttempt: "1", telemetry.AttrTransport: "http",
					telemetry.AttrOutcome: "delivered", telemetry.AttrHTTPStatus: "204", telemetry.AttrLate: "false",
					telemetry.AttrDeliveryState: "delivered", telemetry.AttrEventID: d.EventID,
				}, codes.Ok)
				ev, err := e.store.EventGet(t.Context(), d.EventID)
				if err != nil || attr(spans[0].Attributes, telemetry.AttrSubmissionID) != ev.SubmissionID {
					t.Errorf("attempt span submission id %q, want %q (%v)", attr(spans[0].Attributes, telemetry.AttrSubmissionID), ev.SubmissionID, err)
				}
				e.checkPluginHop(spans[0], e.recv.requests()[0])
			})

			t.Run("a retry is in the same submission's trace, linked to its own claim", func(t *testing.T) {
				t.Parallel()
				e := newTracedEnv(t, pluginDir, open, func(n int, _ *http.Request) int {
					if n == 1 {
						return http.StatusServiceUnavailable
					}
					return http.StatusOK
				})
				e.run(fastConfig(5))
				ingest, d := e.ingest()
				e.waitFor(d.ID, "delivered", terminal)
				spans := e.attemptSpans(d.ID, 2)
				rows := e.attempts(d.ID)
				wantOutcomes(t, rows, "retryable 503", "delivered 200")
				e.checkAttempt(spans[0], ingest, rows[0], map[attribute.Key]string{
					telemetry.AttrAttemptNumber: "1", telemetry.AttrCycleAttempt: "1", telemetry.AttrOutcome: "retryable",
					telemetry.AttrHTTPStatus: "503", telemetry.AttrLate: "false", telemetry.AttrDeliveryState: "pending",
				}, codes.Error)
				if !strings.Contains(spans[0].Status.Description, "503") {
					t.Errorf("the failed attempt's status says %q, want the receiver's answer", spans[0].Status.Description)
				}
				e.checkAttempt(spans[1], ingest, rows[1], map[attribute.Key]string{
					telemetry.AttrAttemptNumber: "2", telemetry.AttrCycleAttempt: "2", telemetry.AttrOutcome: "delivered",
					telemetry.AttrHTTPStatus: "200", telemetry.AttrDeliveryState: "delivered",
				}, codes.Ok)
				if spans[0].SpanContext.TraceID() != spans[1].SpanContext.TraceID() {
					t.Error("the retry is in another trace than the first attempt; both belong to the submission's")
				}
				if spans[0].Links[0].SpanContext.SpanID() == spans[1].Links[0].SpanContext.SpanID() {
					t.Error("both attempts link to one claim; each was claimed on its own")
				}
				reqs := e.recv.requests()
				e.checkPluginHop(spans[0], reqs[0])
				e.checkPluginHop(spans[1], reqs[1])
				m := e.collect()
				if got := sum(m, telemetry.MetricAttempts, "outcome", "retryable", "transport", "http"); got != 1 {
					t.Errorf("retryable attempts counted %d, want 1", got)
				}
				if got := sum(m, telemetry.MetricAttempts, "outcome", "delivered", "transport", "http"); got != 1 {
					t.Errorf("delivered attempts counted %d, want 1", got)
				}
				if got := histCount(m, telemetry.MetricSendDuration); got != 2 {
					t.Errorf("send durations recorded %d, want 2", got)
				}
				if got := histCount(m, telemetry.MetricClaimToSend); got != 2 {
					t.Errorf("claim-to-send durations recorded %d, want 2", got)
				}
				if got := sum(m, telemetry.MetricAttemptsLate, "transport", "http"); got != 0 {
					t.Errorf("late attempts counted %d, want 0", got)
				}
			})

			t.Run("a late attempt is marked late, says its claim was lost, and is counted", func(t *testing.T) {
				t.Parallel()
				inFlight := make(chan struct{})
				release := make(chan struct{})
				e := newTracedEnv(t, pluginDir, open, func(n int, _ *http.Request) int {
					if n == 1 {
						close(inFlight)
						<-release
					}
					return http.StatusOK
				})
				e.run(fastConfig(5))
				ingest, d := e.ingest()
				<-inFlight
				steal, err := e.store.DeliveryClaim(t.Context(), storage.DeliveryClaimParams{Limit: 1, Lease: time.Hour, Now: time.Now().Add(time.Minute)})
				if err != nil || len(steal) != 1 {
					t.Fatalf("steal claim: %v, %v", steal, err)
				}
				close(release)
				e.waitFor(d.ID, "one late attempt", func(d storage.Delivery) bool { return d.Attempts == 1 })
				spans := e.attemptSpans(d.ID, 1)
				rows := e.attempts(d.ID)
				wantOutcomes(t, rows, "delivered 200 late")
				e.checkAttempt(spans[0], ingest, rows[0], map[attribute.Key]string{
					telemetry.AttrAttemptNumber: "1", telemetry.AttrOutcome: "delivered", telemetry.AttrLate: "true",
					telemetry.AttrDeliveryState: "",
				}, codes.Ok)
				if !hasEvent(spans[0], telemetry.EventClaimLost) {
					t.Errorf("the late attempt's span has no %s event: %+v", telemetry.EventClaimLost, spans[0].Events)
				}
				if got := sum(e.collect(), telemetry.MetricAttemptsLate, "transport", "http"); got != 1 {
					t.Errorf("late attempts counted %d, want 1", got)
				}
			})

			t.Run("a plugin crash is a retryable attempt whose span says the plugin was restarted", func(t *testing.T) {
				t.Parallel()
				inFlight := make(chan struct{})
				release := make(chan struct{})
				dir := t.TempDir()
				bin := filepath.Join(dir, "hymical-plugin-http")
				copyFile(t, filepath.Join(pluginDir, "hymical-plugin-http"), bin)
				e := newTracedEnv(t, dir, open, func(n int, r *http.Request) int {
					if n == 1 {
						close(inFlight)
						select {
						case <-release:
						case <-r.Context().Done():
						}
					}
					return http.StatusOK
				})
				e.run(fastConfig(5))
				ingest, d := e.ingest()
				<-inFlight
				killPlugin(t, bin)
				close(release)
				e.waitFor(d.ID, "delivered", terminal)
				spans := e.attemptSpans(d.ID, 2)
				rows := e.attempts(d.ID)
				if len(rows) != 2 || rows[0].Outcome != storage.OutcomeRetryable || rows[1].Outcome != storage.OutcomeDelivered {
					t.Fatalf("attempts %+v, want the killed send retryable, then delivered", rows)
				}
				e.checkAttempt(spans[0], ingest, rows[0], map[attribute.Key]string{
					telemetry.AttrAttemptNumber: "1", telemetry.AttrOutcome: "retryable", telemetry.AttrHTTPStatus: "",
				}, codes.Error)
				if !hasEvent(spans[0], telemetry.EventPluginRestarted) || !strings.Contains(spans[0].Status.Description, "plugin") {
					t.Errorf("the crashed attempt's span: events %+v, status %q; want %s and the plugin named", spans[0].Events, spans[0].Status.Description, telemetry.EventPluginRestarted)
				}
				client, ok := e.childNamed(spans[0].SpanContext, "hymical.transport.v1.Transport/Send")
				if !ok || client.Status.Code != codes.Error {
					t.Errorf("the call to the crashed plugin: %+v, want a client span with an error status", client)
				}
				e.checkAttempt(spans[1], ingest, rows[1], map[attribute.Key]string{
					telemetry.AttrAttemptNumber: "2", telemetry.AttrOutcome: "delivered", telemetry.AttrDeliveryState: "delivered",
				}, codes.Ok)
				// The relaunched plugin traces too.
				e.checkPluginHop(spans[1], e.recv.requests()[1])
			})
		})
	}
}

func TestTracingOffStoresNoTraceID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends["sqlite"], "http", func(int, *http.Request) int { return http.StatusOK })
	e.run(fastConfig(5), e.store)
	_, d := e.submit()
	e.waitFor(d.ID, "delivered", terminal)
	if as := e.attempts(d.ID); len(as) != 1 || as[0].TraceID != "" {
		t.Fatalf("attempts %+v: with tracing off no trace id is stored", as)
	}
	if h := e.recv.requests()[0].header.Get("traceparent"); h != "" {
		t.Errorf("with tracing off the receiver still got traceparent %q", h)
	}
}

func (e *tracedEnv) collect() metricdata.ResourceMetrics {
	e.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		e.t.Fatal(err)
	}
	return rm
}

// sum is the value of the counter name at the data point with the given
// attribute key/value pairs; 0 when there is none.
func sum(rm metricdata.ResourceMetrics, name string, kv ...string) int64 {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			s, _ := m.Data.(metricdata.Sum[int64])
			for _, dp := range s.DataPoints {
				if hasAttrs(dp.Attributes, kv) {
					return dp.Value
				}
			}
		}
	}
	return 0
}

// histCount is how many values the histogram name recorded, over all its
// data points.
func histCount(rm metricdata.ResourceMetrics, name string) uint64 {
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
			}
		}
	}
	return n
}

func hasAttrs(set attribute.Set, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		v, ok := set.Value(attribute.Key(kv[i]))
		if !ok || v.String() != kv[i+1] {
			return false
		}
	}
	return true
}

func attr(kvs []attribute.KeyValue, k attribute.Key) string {
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

func hasEvent(s tracetest.SpanStub, name string) bool {
	for _, ev := range s.Events {
		if ev.Name == name {
			return true
		}
	}
	return false
}

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, fmt.Sprintf("%s(%s)", s.Name, s.SpanContext.SpanID()))
	}
	return out
}
