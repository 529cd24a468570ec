// Package transporttest is what the transport plugins' own tests share:
// sending with a deadline as the host does, checking that an outcome's
// text gives nothing away, and a server that never answers. It imports
// only the standard library and the SDK, so a plugin's tests can use it
// without pulling in the server.
package transporttest

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/transport"
)

// Send sends msg through tr as the host would, with an attempt deadline
// within from now; the context itself lasts two seconds longer, like the
// host's grace, so that it is the transport that must keep the deadline.
func Send(tr transport.Transport, msg transport.Message, within time.Duration) transport.Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), within+2*time.Second)
	defer cancel()
	msg.Deadline = time.Now().Add(within)
	return tr.Send(ctx, msg)
}

// AssertNoLeak fails the test if out's error contains any of secrets (a
// signature, a body, a password the test handed over) or is longer than
// transport.MaxErrorBytes.
func AssertNoLeak(t testing.TB, out transport.Outcome, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(out.Error, s) {
			t.Errorf("outcome error %q contains %q", out.Error, s)
		}
	}
	if len(out.Error) > transport.MaxErrorBytes {
		t.Errorf("outcome error is %d bytes, want at most %d", len(out.Error), transport.MaxErrorBytes)
	}
}

// HungServer listens on loopback, accepts every connection and never
// answers, as a broker that hangs would; it returns its host:port. It
// closes the listener and the connections when the test ends.
func HungServer(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for c := range accepted {
			c.Close()
		}
	})
	return l.Addr().String()
}

// LoopbackResolver answers every name with 127.0.0.1, as one bad DNS
// answer for a name that usually leads to a public address would.
type LoopbackResolver struct{}

// LookupNetIP answers host with 127.0.0.1.
func (LoopbackResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// GuardCase is a URL the SSRF guard refuses, and what a send to it must
// report: the outcome's kind, no request, and an error containing WantErr.
type GuardCase struct {
	Name, URL string
	Want      transport.OutcomeKind
	WantErr   string
}

// GuardCases are the refusals every broker plugin answers alike, for URLs
// of the form scheme://HOST:port+path, with LoopbackResolver resolving
// names: the guard refuses a literal address on every try, so the
// delivery fails; an address a DNS answer gave may pass with the next
// answer, so the delivery is tried again.
func GuardCases(scheme, port, path string) []GuardCase {
	url := func(host string) string { return scheme + "://" + host + ":" + port + path }
	return []GuardCase{
		{"a literal loopback address", url("127.0.0.1"), transport.OutcomePermanent, "127.0.0.0/8, loopback"},
		{"localhost, which always leads here", url("localhost"), transport.OutcomePermanent, "localhost resolves to 127.0.0.1"},
		{"a name answered with loopback", url("broker.example"), transport.OutcomeRetryable, "broker.example resolved to an address this plugin will not connect to"},
	}
}

// CheckGuardCases sends to each case's URL through send and checks what
// it reported. Neither kind may send anything.
func CheckGuardCases(t *testing.T, cases []GuardCase, send func(url string) transport.Outcome) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			out := send(tt.URL)
			if out.Kind != tt.Want || !out.NoRequest || !strings.Contains(out.Error, tt.WantErr) {
				t.Fatalf("outcome = %+v, want %v with no request, containing %q", out, tt.Want, tt.WantErr)
			}
		})
	}
}
