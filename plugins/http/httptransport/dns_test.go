package httptransport

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/hymical/hymical/sdk/transport"
)

// fakeDNS is a DNS server the test controls: it answers every query from
// answers, which the test may change between sends, and NXDOMAIN for a
// name it does not know. resolver hands it to the transport over an
// in-memory connection, so no packet leaves the test.
type fakeDNS struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr // by lower-case name with its final dot
}

func newFakeDNS() *fakeDNS { return &fakeDNS{answers: map[string][]netip.Addr{}} }

// set makes name resolve to addrs from now on.
func (f *fakeDNS) set(name string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	f.answers[strings.ToLower(strings.TrimSuffix(name, "."))+"."] = as
}

func (f *fakeDNS) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go f.serve(server)
		return client, nil
	}}
}

// serve answers queries over a stream connection (two length bytes, then
// the message), which is how the Go resolver talks to a conn that is not
// a net.PacketConn.
func (f *fakeDNS) serve(c net.Conn) {
	defer c.Close()
	for {
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		answer, err := f.answer(query)
		if err != nil {
			return
		}
		binary.BigEndian.PutUint16(n[:], uint16(len(answer)))
		if _, err := c.Write(append(n[:], answer...)); err != nil {
			return
		}
	}
}

func (f *fakeDNS) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	addrs, known := f.answers[strings.ToLower(q.Name.String())]
	f.mu.Unlock()
	rcode := dnsmessage.RCodeSuccess
	if !known {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rcode})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
	for _, a := range addrs {
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// A receiver's name that resolves once to an address the guard refuses
// (here 10.0.0.1, private) is not failed for good: the outcome is
// retryable, says no request went out (so the server records no attempt
// and spends no retry), and names the host; the next try, with the usual
// answer back, delivers. This holds with and without webhook.proxy, and
// the proxy is never asked for the refused address. A literal address the
// guard refuses stays a permanent refusal, as does localhost: no DNS
// answer will change them.
func TestRefusedDNSAnswerIsRetryable(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	const name = "hooks.example.com"

	tests := []struct {
		name      string
		proxy     bool
		url       string
		bad, good string // the DNS answer first, then the one after; empty: none
		wantKind  transport.OutcomeKind
		wantText  string
	}{
		{"name, one refused answer", false, fmt.Sprintf("http://%s:%d/in", name, port), "10.0.0.1", "127.0.0.1",
			transport.OutcomeRetryable, name + " resolved to an address"},
		{"name, one refused answer, through the proxy", true, fmt.Sprintf("http://%s:%d/in", name, port), "10.0.0.1", "127.0.0.1",
			transport.OutcomeRetryable, name + " resolved to an address"},
		{"name, refused IPv6 answer", false, fmt.Sprintf("http://%s:%d/in", name, port), "fd00::1", "127.0.0.1",
			transport.OutcomeRetryable, "private"},
		{"literal address", false, fmt.Sprintf("http://10.0.0.1:%d/in", port), "", "",
			transport.OutcomePermanent, "10.0.0.1"},
		{"literal address, through the proxy", true, fmt.Sprintf("http://10.0.0.1:%d/in", port), "", "",
			transport.OutcomePermanent, "10.0.0.1"},
		{"localhost", false, fmt.Sprintf("http://localhost:%d/in", port), "", "",
			transport.OutcomePermanent, "loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dns := newFakeDNS()
			if tt.bad != "" {
				dns.set(name, tt.bad)
			}
			// Only the receiver's own address is allowed; localhost and
			// the literal test the refusal of what is not.
			settings := transport.Settings{SettingAllowedNetworks: "127.0.0.1/32"}
			if tt.name == "localhost" {
				settings = nil
			}
			var px *connectProxy
			if tt.proxy {
				px = newConnectProxy(t, "127.0.0.2:0", false)
				settings[SettingProxy] = px.URL()
			}
			tr := New(Options{})
			tr.resolver = dns.resolver()
			if err := tr.Configure(context.Background(), settings); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.current().client.CloseIdleConnections() })

			before := hits.Load()
			out := tr.Send(context.Background(), message(tt.url))
			if out.Kind != tt.wantKind || !out.NoRequest {
				t.Fatalf("outcome = %+v, want %s with no request", out, tt.wantKind)
			}
			if !strings.Contains(out.Error, tt.wantText) {
				t.Errorf("error = %q, want it to contain %q", out.Error, tt.wantText)
			}
			if tt.wantKind == transport.OutcomeRetryable && !strings.Contains(out.Error, "tried again") {
				t.Errorf("error = %q, want it to say the delivery is tried again", out.Error)
			}
			if hits.Load() != before {
				t.Error("the receiver was reached despite the refusal")
			}
			if px != nil && len(px.seen()) != 0 {
				t.Errorf("the proxy was asked to CONNECT to %q for a refused address", px.seen())
			}
			assertNoLeak(t, out)
			if tt.good == "" {
				return
			}
			dns.set(name, tt.good)
			if out := tr.Send(context.Background(), message(tt.url)); out.Kind != transport.OutcomeDelivered {
				t.Fatalf("with the usual answer back: outcome = %+v, want delivered", out)
			}
			if px != nil {
				if got, want := px.seen(), []string{fmt.Sprintf("127.0.0.1:%d", port)}; strings.Join(got, " ") != strings.Join(want, " ") {
					t.Errorf("the proxy was asked for %q, want %q", got, want)
				}
			}
		})
	}
}

// A zoned IPv6 target cannot go through webhook.proxy: the CONNECT would
// carry this host's interface name to the proxy. Validate refuses it when
// a proxy is set, and so does Send (for an endpoint registered before the
// proxy was), before any CONNECT; without a proxy the zone is fine.
func TestZonedTargetRefusedWithProxy(t *testing.T) {
	t.Parallel()
	const url = "http://[fe80::1%25eth0]:9/in"
	px := newConnectProxy(t, "127.0.0.2:0", false)
	// fe80::/10 is allowed, so only the zone stands in the way.
	tests := []struct {
		name     string
		settings transport.Settings
		wantErr  string // empty: accepted
	}{
		{"with a proxy", transport.Settings{SettingAllowedNetworks: "fe80::/10", SettingProxy: px.URL()}, "IPv6 zone (%eth0)"},
		{"without a proxy", transport.Settings{SettingAllowedNetworks: "fe80::/10"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTransport(t, tt.settings)
			err := tr.Validate(context.Background(), transport.Endpoint{URL: url})
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Validate: %v, want accepted", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "webhook.proxy") {
				t.Errorf("Validate error = %v, want it to name the zone %q and webhook.proxy", err, tt.wantErr)
			}
			out := tr.Send(context.Background(), message(url))
			if out.Kind != transport.OutcomePermanent || !out.NoRequest || !strings.Contains(out.Error, tt.wantErr) {
				t.Errorf("Send outcome = %+v, want refused (permanent, no request) naming %q", out, tt.wantErr)
			}
			if got := px.seen(); len(got) != 0 {
				t.Errorf("the proxy was asked to CONNECT to %q", got)
			}
		})
	}
}
