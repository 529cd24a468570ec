// Package telemetrytest is what tests of Hymical's tracing use: a real OTLP
// trace receiver, over gRPC or HTTP on loopback, that keeps every span it is
// sent, so a test proves spans leave the process the way a collector would
// get them, from the server and from a plugin process alike.
//
// It is for tests only and must not be imported by anything that runs in
// production. It changes no global state.
package telemetrytest

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/hymical/hymical/internal/testwait"
)

// Span is one received span, flattened for assertions. Ids are lower-case
// hex, as in a traceparent; attribute values are as %v prints them.
type Span struct {
	// Service is the service.name of the resource that sent it.
	Service       string
	Resource      map[string]string
	Name          string
	Kind          tracepb.Span_SpanKind
	TraceID       string
	SpanID        string
	ParentSpanID  string
	Attributes    map[string]string
	StatusCode    tracepb.Status_StatusCode
	StatusMessage string
	Events        []string
	Links         []Link
}

// Link is one link of a received span.
type Link struct {
	TraceID, SpanID string
	Attributes      map[string]string
}

// Collector keeps what it is sent. Its methods are safe for concurrent use.
type Collector struct {
	coltracepb.UnimplementedTraceServiceServer
	endpoint string
	mu       sync.Mutex
	spans    []Span
}

// NewCollector serves the OTLP trace service over gRPC (plaintext) on a
// loopback port until the test ends.
func NewCollector(t testing.TB) *Collector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{endpoint: "http://" + ln.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return c
}

// NewHTTPCollector serves OTLP/HTTP with protobuf bodies on POST /v1/traces
// on a loopback port until the test ends.
func NewHTTPCollector(t testing.TB) *Collector {
	t.Helper()
	c := &Collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			http.Error(w, "OTLP traces are POSTed to /v1/traces", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.add(&req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	c.endpoint = srv.URL
	return c
}

// Endpoint is the collector's base URL, http://127.0.0.1:PORT: what
// telemetry.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT would be set to.
func (c *Collector) Endpoint() string { return c.endpoint }

// Export implements the OTLP trace service.
func (c *Collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *Collector) add(req *coltracepb.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Service: res["service.name"], Resource: res, Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Attributes: attrMap(s.GetAttributes()),
					StatusCode: s.GetStatus().GetCode(), StatusMessage: s.GetStatus().GetMessage(),
				}
				if p := s.GetParentSpanId(); len(p) > 0 {
					sp.ParentSpanID = hex.EncodeToString(p)
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, e.GetName())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()),
						SpanID: hex.EncodeToString(l.GetSpanId()), Attributes: attrMap(l.GetAttributes())})
				}
				got = append(got, sp)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, got...)
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = valueString(kv.GetValue())
	}
	return out
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_ArrayValue:
		parts := make([]string, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, valueString(e))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprint(v)
}

// Spans returns every span received so far, in arrival order.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// WaitFor polls until cond holds for the spans received, and returns them;
// it fails the test after timeout, listing what did arrive.
func (c *Collector) WaitFor(t testing.TB, timeout time.Duration, what string, cond func([]Span) bool) []Span {
	t.Helper()
	var spans []Span
	testwait.For(t, timeout, func() error {
		spans = c.Spans()
		if cond(spans) {
			return nil
		}
		var names []string
		for _, s := range spans {
			names = append(names, s.Service+"/"+s.Name)
		}
		return fmt.Errorf("the collector never received %s; it has %d spans: %s", what, len(spans), strings.Join(names, ", "))
	})
	return spans
}

// Find returns the spans of the given service and name.
func Find(spans []Span, service, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Service == service && s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
