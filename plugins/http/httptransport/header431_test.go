package httptransport

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hymical/hymical/sdk/transport"
)

// TestHeadersTooLargeForTheReceiverAreRetried sends a message whose
// webhook-signature carries 1,001 v1 signatures (48 KB, what 1,000
// rotations inside the grace made before the cap on live secrets) to a
// real net/http server with its default header limit, which refuses it
// itself with 431 before any handler runs, as a default Node server does
// at 16 KB. The event is not at fault, so the outcome is retryable; the
// same message with five signatures is delivered.
func TestHeadersTooLargeForTheReceiverAreRetried(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int32
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handled.Add(1) }),
		// 1 byte plus net/http's own 4 KiB slack: a small default limit.
		MaxHeaderBytes: 1,
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	tr := newTransport(t, loopback)

	for _, tc := range []struct {
		signatures int
		want       transport.OutcomeKind
		status     int
	}{
		{1001, transport.OutcomeRetryable, http.StatusRequestHeaderFieldsTooLarge},
		{5, transport.OutcomeDelivered, http.StatusOK},
	} {
		msg := message("http://" + ln.Addr().String() + "/hook")
		sig := strings.TrimSpace(strings.Repeat("v1,"+strings.Repeat("A", 43)+"= ", tc.signatures))
		for i := range msg.Headers {
			if msg.Headers[i].Name == "webhook-signature" {
				msg.Headers[i].Value = sig
			}
		}
		out := tr.Send(context.Background(), msg)
		if out.Kind != tc.want || out.StatusCode != tc.status || out.NoRequest {
			t.Errorf("%d signatures (a %d-byte header): outcome %+v, want %s with HTTP %d", tc.signatures, len(sig), out, tc.want, tc.status)
		}
	}
	if n := handled.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once: the 431 must come from the server's own limit", n)
	}
}
