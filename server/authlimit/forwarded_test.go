package authlimit_test

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/hymical/hymical/server/authlimit"
)

func TestClientAddr(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		peer    string
		headers map[string][]string
		want    string
	}{
		{"without trusted proxies the peer is the client, whatever it forwards", nil, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}, "10.0.0.1:5000"},
		{"an untrusted peer's spoofed headers are ignored", proxies, "198.51.100.9:5000",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}, "Forwarded": {"for=203.0.113.7"}}, "198.51.100.9:5000"},
		{"a trusted peer with no header is the client", proxies, "10.0.0.1:5000", nil, "10.0.0.1"},
		{"a trusted peer's X-Forwarded-For names the client", proxies, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"a client's own entry left of the untrusted hop is not believed", proxies, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"192.0.2.1, 203.0.113.7"}}, "203.0.113.7"},
		{"trusted hops are skipped from the right, across header lines", proxies, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"192.0.2.1, 203.0.113.7", "10.1.2.3"}}, "203.0.113.7"},
		{"a chain of only trusted hops ends at its leftmost", proxies, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"10.9.9.9, 10.1.2.3"}}, "10.9.9.9"},
		{"Forwarded names the client, IPv6 quoted with a port", proxies, "10.0.0.1:5000",
			map[string][]string{"Forwarded": {`for=192.0.2.1, For="[2001:db8::17]:4711";proto=https;by=10.0.0.1`}}, "2001:db8::17"},
		{"an IPv6 proxy forwards an IPv4 client", proxies, "[fd00::1]:443",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"an IPv6 client behind an IPv6 proxy, bracketed in X-Forwarded-For", proxies, "[fd00::1]:443",
			map[string][]string{"X-Forwarded-For": {"[2001:db8::17]:1234, fd00::2"}}, "2001:db8::17"},
		{"an IPv4-mapped peer matches an IPv4 range", proxies, "[::ffff:10.0.0.1]:5000",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"a malformed hop ends the walk at the trusted hop that passed it on", proxies, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7, not-an-address, 10.1.2.3"}}, "10.1.2.3"},
		{"for=unknown ends the walk at the peer", proxies, "10.0.0.1:5000",
			map[string][]string{"Forwarded": {"for=203.0.113.7, for=unknown"}}, "10.0.0.1"},
		{"a Forwarded element without for= ends the walk", proxies, "10.0.0.1:5000",
			map[string][]string{"Forwarded": {"for=203.0.113.7, proto=https"}}, "10.0.0.1"},
		{"an empty header ends the walk at the peer", proxies, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {""}}, "10.0.0.1"},
		{"both headers naming one client agree", proxies, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}, "Forwarded": {"for=203.0.113.7"}}, "203.0.113.7"},
		{"both headers naming different clients fall back to the peer", proxies, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}, "Forwarded": {"for=192.0.2.66"}}, "10.0.0.1"},
		{"a peer that cannot be read is kept as it is", proxies, "@",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}, "@"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &http.Request{RemoteAddr: tt.peer, Header: http.Header(tt.headers)}
			if got := authlimit.ClientAddr(r, tt.trusted); got != tt.want {
				t.Errorf("ClientAddr = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNewRefusesAnInvalidTrustedProxy(t *testing.T) {
	t.Parallel()
	_, err := authlimit.New(authlimit.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), {}}})
	if err == nil {
		t.Fatal("New accepted the zero Prefix as a trusted proxy")
	}
}
