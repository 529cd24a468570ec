package httptransport

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/sdk/transport"
)

// receiverContext is a receiver that answers status and reports the trace
// context each request arrived with.
func receiverContext(t *testing.T, status int) (*httptest.Server, <-chan trace.SpanContext) {
	t.Helper()
	got := make(chan trace.SpanContext, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		got <- trace.SpanContextFromContext(ctx)
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestTheReceiverGetsTheAttemptsTraceContext(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			srv, got := receiverContext(t, status)
			tr := newTransport(t, loopback)

			// Send's context carries the plugin's server span, as Serve
			// hands it over; the plugin's client span is a child of it.
			ctx, parent := tp.Tracer("test").Start(context.Background(), "plugin server span")
			out := tr.Send(ctx, message(srv.URL+"/hooks/"+secretQuery+"?token="+secretQuery))
			parent.End()
			assertNoLeak(t, out)

			sc := <-got
			var client tracetest.SpanStub
			for _, s := range spans.GetSpans() {
				if s.Name == http.MethodPost {
					client = s
				}
			}
			if client.SpanKind != trace.SpanKindClient || client.Parent.SpanID() != parent.SpanContext().SpanID() {
				t.Fatalf("spans %+v: want a POST client span, a child of the Send's span", spans.GetSpans())
			}
			if sc.TraceID() != parent.SpanContext().TraceID() || sc.SpanID() != client.SpanContext.SpanID() || !sc.IsSampled() {
				t.Errorf("the receiver's traceparent is %v, want the POST span %v", sc, client.SpanContext)
			}
			attrs := map[string]string{}
			for _, kv := range client.Attributes {
				attrs[string(kv.Key)] = kv.Value.String()
				if strings.Contains(kv.Value.String(), secretQuery) || strings.Contains(kv.Value.String(), "hooks") {
					t.Errorf("attribute %s = %q carries the URL's path or query", kv.Key, kv.Value.String())
				}
			}
			if attrs["http.request.method"] != "POST" || attrs["server.address"] != "127.0.0.1" || attrs["http.response.status_code"] != strconv.Itoa(status) {
				t.Errorf("attributes %v", attrs)
			}
			wantCode := codes.Unset
			if status >= 500 {
				wantCode = codes.Error
			}
			if client.Status.Code != wantCode {
				t.Errorf("span status %v for %d, want %v", client.Status.Code, status, wantCode)
			}
		})
	}
}

func TestTraceContextGoesOnWithoutPluginTracing(t *testing.T) {
	t.Parallel()
	srv, got := receiverContext(t, http.StatusOK)
	tr := newTransport(t, loopback)
	// What a plugin whose tracing is off gets: the host's span context,
	// remote and not recording.
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	if out := tr.Send(trace.ContextWithRemoteSpanContext(context.Background(), sc), message(srv.URL)); out.Kind != transport.OutcomeDelivered {
		t.Fatalf("outcome %+v", out)
	}
	if rsc := <-got; rsc.TraceID() != sc.TraceID() || rsc.SpanID() != sc.SpanID() {
		t.Errorf("the receiver's traceparent is %v, want the host's %v", rsc, sc)
	}
}

func TestNoTraceContextNoTraceparent(t *testing.T) {
	t.Parallel()
	srv, got := receiverContext(t, http.StatusOK)
	tr := newTransport(t, loopback)
	tr.Send(context.Background(), message(srv.URL))
	if sc := <-got; sc.IsValid() {
		t.Errorf("with no trace context the receiver still got a traceparent: %v", sc)
	}
}
