package netguard

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// registry is the rule written out again from the IANA IPv4 and IPv6
// Special-Purpose Address Registries (and the extras the package doc
// names), apart from the table, so a typo in either shows up as a
// difference. refused is the registry's verdict for an address whose most
// specific entry this is ("Globally Reachable" False or N/A: refused);
// outside are addresses just past the range's ends that must be allowed.
var registry = []struct {
	prefix  string
	refused bool
	source  string
	outside []string
}{
	// IPv4 Special-Purpose Address Registry.
	{"0.0.0.0/8", true, "RFC 791", []string{"1.0.0.0"}},
	{"0.0.0.0/32", true, "RFC 1122", nil},
	{"10.0.0.0/8", true, "RFC 1918", []string{"9.255.255.255", "11.0.0.0"}},
	{"100.64.0.0/10", true, "RFC 6598", []string{"100.63.255.255", "100.128.0.0"}},
	{"127.0.0.0/8", true, "RFC 1122", []string{"126.255.255.255", "128.0.0.0"}},
	{"169.254.0.0/16", true, "RFC 3927", []string{"169.253.255.255", "169.255.0.0"}},
	{"172.16.0.0/12", true, "RFC 1918", []string{"172.15.255.255", "172.32.0.0"}},
	{"192.0.0.0/24", true, "RFC 6890", []string{"191.255.255.255", "192.0.1.0"}},
	{"192.0.0.0/29", true, "RFC 7335", nil},
	{"192.0.0.8/32", true, "RFC 7600", nil},
	{"192.0.0.9/32", false, "RFC 7723", nil},
	{"192.0.0.10/32", false, "RFC 8155", nil},
	{"192.0.0.170/31", true, "RFC 8880", nil},
	{"192.0.2.0/24", true, "RFC 5737", []string{"192.0.1.255", "192.0.3.0"}},
	{"192.31.196.0/24", false, "RFC 7535", nil},
	{"192.52.193.0/24", false, "RFC 7450", nil},
	{"192.88.99.0/24", true, "RFC 7526", []string{"192.88.98.255", "192.88.100.0"}},
	{"192.168.0.0/16", true, "RFC 1918", []string{"192.167.255.255", "192.169.0.0"}},
	{"192.175.48.0/24", false, "RFC 7534", nil},
	{"198.18.0.0/15", true, "RFC 2544", []string{"198.17.255.255", "198.20.0.0"}},
	{"198.51.100.0/24", true, "RFC 5737", []string{"198.51.99.255", "198.51.101.0"}},
	{"203.0.113.0/24", true, "RFC 5737", []string{"203.0.112.255", "203.0.114.0"}},
	{"240.0.0.0/4", true, "RFC 1112", nil}, // 239.255.255.255 below is multicast
	{"255.255.255.255/32", true, "RFC 8190", nil},
	{"224.0.0.0/4", true, "RFC 5771", []string{"223.255.255.255"}},

	// IPv6 Special-Purpose Address Registry.
	{"::1/128", true, "RFC 4291", nil},
	{"::/128", true, "RFC 4291", nil},
	{"64:ff9b:1::/48", true, "RFC 8215", nil},
	{"100::/64", true, "RFC 6666", nil},
	{"100:0:0:1::/64", true, "RFC 9780", nil},
	{"2001::/23", true, "RFC 2928", []string{"2001:200::", "2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}},
	{"2001::/32", true, "RFC 4380", nil},
	{"2001:1::1/128", false, "RFC 7723", nil},
	{"2001:1::2/128", false, "RFC 8155", nil},
	{"2001:1::3/128", false, "RFC 9665", nil},
	{"2001:2::/48", true, "RFC 5180", nil},
	{"2001:3::/32", false, "RFC 7450", nil},
	{"2001:4:112::/48", false, "RFC 7535", nil},
	{"2001:10::/28", true, "RFC 4843", nil},
	{"2001:20::/28", false, "RFC 7343", nil},
	{"2001:30::/28", false, "RFC 9374", nil},
	{"2001:db8::/32", true, "RFC 3849", []string{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::"}},
	{"2620:4f:8000::/48", false, "RFC 7534", nil},
	{"3fff::/20", true, "RFC 9637", []string{"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "3fff:1000::"}},
	{"5f00::/16", true, "RFC 9602", nil},
	{"fc00::/7", true, "RFC 4193", nil},
	{"fe80::/10", true, "RFC 4291", nil},
	{"fec0::/10", true, "RFC 3879", nil},
	{"ff00::/8", true, "RFC 4291", nil},

	// IPv6 Address Space: reserved by the IETF, outside 2000::/3.
	{"::/8", true, "RFC 4291", nil},
	{"100::/8", true, "RFC 4291", nil},
	{"200::/7", true, "RFC 4048", nil},
	{"400::/6", true, "RFC 4291", nil},
	{"800::/5", true, "RFC 4291", nil},
	{"1000::/4", true, "RFC 4291", []string{"2000::"}},
	{"4000::/3", true, "RFC 4291", []string{"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}},
	{"6000::/3", true, "RFC 4291", nil},
	{"8000::/3", true, "RFC 4291", nil},
	{"a000::/3", true, "RFC 4291", nil},
	{"c000::/3", true, "RFC 4291", nil},
	{"e000::/4", true, "RFC 4291", nil},
	{"f000::/5", true, "RFC 4291", nil},
	{"f800::/6", true, "RFC 4291", nil},
	{"fe00::/9", true, "RFC 4291", nil},
}

// embeddedForms are the entries judged by the IPv4 address they carry.
var embeddedForms = []string{"::ffff:0:0/96", "64:ff9b::/96", "2002::/16", "::/96"}

// lastAddr is the highest address in p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// ownAddr finds an address in registry entry i that no more specific
// registry entry (or embedded form) covers, so its verdict is entry i's.
func ownAddr(t *testing.T, i int) netip.Addr {
	t.Helper()
	p := netip.MustParsePrefix(registry[i].prefix)
	first, last := p.Addr(), lastAddr(p)
	candidates := []netip.Addr{last, first, last.Prev(), first.Next()}
	var others []netip.Prefix
	for j, e := range registry {
		if j != i {
			others = append(others, netip.MustParsePrefix(e.prefix))
		}
	}
	for _, s := range embeddedForms {
		others = append(others, netip.MustParsePrefix(s))
	}
	for _, a := range candidates {
		if !a.IsValid() || !p.Contains(a) {
			continue
		}
		covered := false
		for _, o := range others {
			if o.Bits() > p.Bits() && o.Contains(a) {
				covered = true
			}
		}
		if !covered {
			return a
		}
	}
	t.Fatalf("no address in %s is covered by it alone", p)
	return netip.Addr{}
}

func TestTableIsTheRegistry(t *testing.T) {
	t.Parallel()
	want := map[string]Verdict{}
	for _, e := range registry {
		v := Allow
		if e.refused {
			v = Refuse
		}
		want[netip.MustParsePrefix(e.prefix).String()] = v
	}
	for _, s := range embeddedForms {
		want[netip.MustParsePrefix(s).String()] = Embedded
	}
	got := map[string]Verdict{}
	for _, e := range Ranges() {
		if _, dup := got[e.Prefix.String()]; dup {
			t.Errorf("%s is in the table twice", e.Prefix)
		}
		got[e.Prefix.String()] = e.Verdict
		if e.Name == "" || !strings.HasPrefix(e.Source, "RFC ") {
			t.Errorf("%s has no name or no RFC: %+v", e.Prefix, e)
		}
		if e.Prefix != e.Prefix.Masked() {
			t.Errorf("%s is not a masked prefix", e.Prefix)
		}
	}
	for p, v := range want {
		if g, ok := got[p]; !ok || g != v {
			t.Errorf("%s: table says %v (present %v), registry says %v", p, g, ok, v)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s is in the table but not in the registry", p)
		}
	}
}

func TestEveryRegistryEntry(t *testing.T) {
	t.Parallel()
	g := New(Config{Plugin: "test"})
	for i, e := range registry {
		t.Run(e.prefix, func(t *testing.T) {
			t.Parallel()
			a := ownAddr(t, i)
			err := g.Check(a)
			if !e.refused {
				if err != nil {
					t.Errorf("%s (globally reachable) refused: %v", a, err)
				}
			} else {
				var refused *RefusedError
				if !errors.As(err, &refused) {
					t.Fatalf("%s: Check = %v, want a *RefusedError", a, err)
				}
				for _, s := range []string{e.prefix, e.source, "not globally reachable", "test plugin's allowed_networks"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("refusal %q does not name %q", err, s)
					}
				}
				if refused.Range.Prefix != netip.MustParsePrefix(e.prefix) {
					t.Errorf("refusal's range = %s, want %s", refused.Range.Prefix, e.prefix)
				}
				// The operator's allow-list lets it through.
				allowing := New(Config{Allowed: []netip.Prefix{netip.MustParsePrefix(e.prefix)}})
				if err := allowing.Check(a); err != nil {
					t.Errorf("%s refused although %s is allowed: %v", a, e.prefix, err)
				}
			}
			for _, s := range e.outside {
				if err := g.Check(netip.MustParseAddr(s)); err != nil {
					t.Errorf("%s, just outside %s, refused: %v", s, e.prefix, err)
				}
			}
		})
	}
}

func TestEmbeddedAddressesAreJudgedByTheIPv4TheyCarry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr   string
		wantIn string // empty: allowed
	}{
		// The gaps the guard used to let through.
		{"64:ff9b::a00:5", "leads to 10.0.0.5, which is in 10.0.0.0/8"},
		{"2002:a00:5::1", "leads to 10.0.0.5"},
		{"::a00:5", "leads to 10.0.0.5"},
		{"fec0::1", "fec0::/10, site-local"},
		{"198.18.0.1", "198.18.0.0/15, benchmarking (RFC 2544), which is not globally reachable"},

		{"64:ff9b::808:808", ""},
		{"64:ff9b::7f00:1", "leads to 127.0.0.1"},
		{"64:ff9b::a9fe:a9fe", "leads to 169.254.169.254"},
		{"64:ff9b::c000:9", ""}, // 192.0.0.9 is globally reachable
		{"64:ff9b::c000:8", "192.0.0.8/32"},
		{"2002:808:808::1", ""},
		{"2002:c0a8:101::1", "leads to 192.168.1.1"},
		{"2002:7f00:1::", "leads to 127.0.0.1"},
		{"::808:808", ""},
		{"::7f00:2", "leads to 127.0.0.2"},
		{"::ffff:8.8.8.8", ""},
		{"::ffff:127.0.0.1", "leads to 127.0.0.1, which is in 127.0.0.0/8, loopback"},
		{"::ffff:100.64.0.1", "CGNAT"},
		{"::ffff:0:808:808", "::/8, reserved"}, // SIIT's IPv4-translated form is not allocated
		{"64:ff9b:1::808:808", "64:ff9b:1::/48"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"},
		{"fe80::1%eth0", "fe80::/10, link-local"},
		{"8.8.8.8", ""},
		{"2606:4700:4700::1111", ""},
	}
	g := New(Config{Plugin: "http", Target: "receiver", AllowedSetting: "webhook.allowed_networks"})
	for _, tt := range tests {
		err := g.Check(netip.MustParseAddr(tt.addr))
		if tt.wantIn == "" {
			if err != nil {
				t.Errorf("%s: %v, want allowed", tt.addr, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantIn) || !strings.Contains(err.Error(), "webhook.allowed_networks") {
			t.Errorf("%s: Check = %v, want a refusal containing %q and naming the setting", tt.addr, err, tt.wantIn)
		}
	}
}

func TestAllowList(t *testing.T) {
	t.Parallel()
	nets, err := ParseNetworks("allowed_networks", " 10.0.0.0/8, 127.0.0.1 ,fd00::/8,::ffff:192.168.1.7")
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Collect(func(yield func(string) bool) {
		for _, p := range nets {
			yield(p.String())
		}
	}); !slices.Equal(got, []string{"10.0.0.0/8", "127.0.0.1/32", "fd00::/8", "192.168.1.7/32"}) {
		t.Errorf("ParseNetworks = %v", got)
	}
	g := New(Config{Allowed: nets, Plugin: "nats"})
	tests := []struct {
		addr    string
		allowed bool
	}{
		{"10.1.2.3", true},
		{"64:ff9b::a00:5", true}, // leads to 10.0.0.5, which the operator allowed
		{"2002:a00:5::1", true},
		{"::ffff:10.9.9.9", true},
		{"127.0.0.1", true},
		{"127.0.0.2", false},
		{"fd00::1", true},
		{"fc00::1", false},
		{"192.168.1.7", true},
		{"192.168.1.8", false},
		{"169.254.169.254", false},
	}
	for _, tt := range tests {
		err := g.Check(netip.MustParseAddr(tt.addr))
		if (err == nil) != tt.allowed {
			t.Errorf("%s: Check = %v, want allowed %v", tt.addr, err, tt.allowed)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "fe80::1%eth0"} {
		if _, err := ParseNetworks("allowed_networks", bad); err == nil || !strings.Contains(err.Error(), "allowed_networks: ") {
			t.Errorf("ParseNetworks(%q) = %v, want an error naming the setting", bad, err)
		}
	}
}

// acceptLines serves a loopback listener and reports, in order, the first
// line each connection wrote (empty when it wrote nothing).
func acceptLines(t *testing.T, l net.Listener) <-chan string {
	t.Helper()
	out := make(chan string, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(out)
				return
			}
			b, _ := io.ReadAll(c)
			_ = c.Close()
			out <- string(b)
		}
	}()
	return out
}

func TestDialerChecksTheAddressActuallyDialled(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	lines := acceptLines(t, l)
	port := l.Addr().(*net.TCPAddr).Port
	ctx := context.Background()

	refusing := New(Config{Plugin: "redis"}).Dialer(nil)
	for _, target := range []string{l.Addr().String(), net.JoinHostPort("localhost", strconv.Itoa(port))} {
		c, err := refusing.DialContext(ctx, "tcp4", target)
		var refused *RefusedError
		if !errors.As(err, &refused) {
			if c != nil {
				_ = c.Close()
			}
			t.Fatalf("dial %s = %v, want a *RefusedError", target, err)
		}
		if !strings.Contains(err.Error(), "127.0.0.0/8, loopback") || !strings.Contains(err.Error(), "redis plugin's allowed_networks") {
			t.Errorf("refusal %q does not say why or what to change", err)
		}
	}

	// A base Control still runs, and the allowed dial connects.
	baseRan := false
	base := &net.Dialer{Control: func(string, string, syscall.RawConn) error { baseRan = true; return nil }}
	allowing := New(Config{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}).Dialer(base)
	c, err := allowing.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("allowed dial: %v", err)
	}
	_, _ = io.WriteString(c, "allowed")
	_ = c.Close()
	if !baseRan {
		t.Error("the base dialer's Control did not run")
	}
	// The refused dials never connected: the first connection the
	// listener accepted is the allowed one.
	if got := <-lines; got != "allowed" {
		t.Errorf("first connection accepted wrote %q, want the allowed one", got)
	}
}

func TestUnixSocketsNeedTheirOwnSetting(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	lines := acceptLines(t, l)
	ctx := context.Background()

	// Allowing every network does not allow a socket path.
	everything := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	_, err = New(Config{Allowed: everything, Plugin: "redis"}).Dialer(nil).DialContext(ctx, "unix", path)
	if err == nil || !strings.Contains(err.Error(), "set the redis plugin's allow_unix_sockets setting to true") {
		t.Fatalf("unix dial = %v, want a refusal naming allow_unix_sockets", err)
	}
	c, err := New(Config{AllowUnixSockets: true}).Dialer(nil).DialContext(ctx, "unix", path)
	if err != nil {
		t.Fatalf("allowed unix dial: %v", err)
	}
	_, _ = io.WriteString(c, "allowed")
	_ = c.Close()
	if got := <-lines; got != "allowed" {
		t.Errorf("first connection accepted wrote %q, want the allowed one", got)
	}
}

// resolver answers from a fixed table, for names DNS cannot be made to
// return in a test.
type resolver map[string][]string

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	as, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range as {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

func TestValidateHostPort(t *testing.T) {
	t.Parallel()
	r := resolver{
		"public.example":  {"93.184.216.34", "2606:2800:220:1::1"},
		"mixed.example":   {"93.184.216.34", "10.0.0.5"},
		"nat64.example":   {"64:ff9b::a00:5"},
		"metadata.google": {"169.254.169.254"},
	}
	g := New(Config{Plugin: "nats"})
	tests := []struct {
		name     string
		r        Resolver
		hostport string
		wantIn   string // empty: nil; "lookup": ErrLookup
	}{
		{"public name", r, "public.example:4222", ""},
		{"public literal", r, "93.184.216.34:4222", ""},
		{"loopback literal", r, "127.0.0.1:4222", "127.0.0.0/8"},
		{"bracketed IPv6 literal", r, "[::1]:4222", "::1/128"},
		{"bare literal", r, "10.0.0.1", "10.0.0.0/8"},
		{"one bad address among good ones", r, "mixed.example:6379", "mixed.example resolves to 10.0.0.5"},
		{"name resolving to NAT64 of a private address", r, "nat64.example:4222", "leads to 10.0.0.5"},
		{"metadata", r, "metadata.google:80", "169.254.0.0/16"},
		{"unresolvable", r, "nowhere.example:4222", "lookup"},
		{"no resolver leaves names to the dial", nil, "mixed.example:6379", ""},
		{"real DNS: localhost", net.DefaultResolver, "localhost:4222", "loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := g.ValidateHostPort(context.Background(), tt.r, tt.hostport)
			var refused *RefusedError
			switch tt.wantIn {
			case "":
				if err != nil {
					t.Errorf("= %v, want nil", err)
				}
			case "lookup":
				if !errors.Is(err, ErrLookup) || errors.As(err, &refused) {
					t.Errorf("= %v, want an ErrLookup that is not a refusal", err)
				}
			default:
				if !errors.As(err, &refused) || !strings.Contains(err.Error(), tt.wantIn) {
					t.Errorf("= %v, want a refusal containing %q", err, tt.wantIn)
				}
			}
		})
	}
}
