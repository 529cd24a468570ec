package api

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/telemetry"
)

// traceRequest starts the server span of one API request, named by its
// route and continuing the caller's W3C trace context, and returns the
// request carrying it and the function that ends it. Only the method, the
// route and the status go into it: never a header, a query or a body.
func (h *handler) traceRequest(w http.ResponseWriter, r *http.Request, pattern string) (http.ResponseWriter, *http.Request, func()) {
	ctx := telemetry.Propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	_, route, _ := strings.Cut(pattern, " ")
	ctx, span := h.tracer.Start(ctx, pattern, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(telemetry.AttrHTTPMethod.String(r.Method), telemetry.AttrHTTPRoute.String(route)))
	r = r.WithContext(ctx)
	if !span.IsRecording() {
		// Tracing is off: the caller's context is still carried (for the
		// event's traceparent), and nothing else is done.
		return w, r, func() { span.End() }
	}
	sw := &statusWriter{ResponseWriter: w}
	return sw, r, func() {
		if sw.status != 0 {
			span.SetAttributes(telemetry.AttrHTTPStatus.Int(sw.status))
		}
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
		span.End()
	}
}

// statusWriter remembers the status a handler answered with, for its span.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// GET /metrics: the Prometheus exposition, when metrics are on.
func (h *handler) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	if h.metrics == nil {
		return &apiError{Code: apiwire.CodeMetricsOff,
			Message: "metrics are off on this server: set telemetry.metrics=true (FORMS_TELEMETRY_METRICS=true) to serve them here"}
	}
	h.metrics.ServeHTTP(w, r)
	return nil
}
