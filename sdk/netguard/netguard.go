// Package netguard is the SSRF guard every transport plugin shares: it
// decides whether a plugin may connect to an address, so that whoever
// registers an endpoint cannot make the server reach its own host, its
// private network or a cloud metadata service.
//
// The rule is one table (see Ranges), written from the IANA IPv4 and IPv6
// Special-Purpose Address Registries: every range that is not globally
// reachable is refused, as are multicast, the deprecated site-local range
// and the IPv6 space not allocated for unicast. Addresses that carry an
// IPv4 address (IPv4-mapped, IPv4-compatible, NAT64 64:ff9b::/96, 6to4) are
// judged by the IPv4 address they carry, since that is where they lead. An
// operator's allow-list (each plugin's allowed_networks setting) lets named
// networks through.
//
// A plugin checks twice: when an endpoint is created (Guard.ValidateHostPort,
// so a bad target is refused with a clear error at once) and when it dials
// (Guard.Dialer, on every address actually connected to after DNS
// resolution, so a name that re-resolves to an internal address, as in DNS
// rebinding, is caught too).
//
// It lives in the SDK because plugins import only the SDK; it imports
// nothing of the server.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// SettingAllowedNetworks is the name every plugin gives its allow-list
// setting, so operators meet one name everywhere.
const SettingAllowedNetworks = "allowed_networks"

// Config shapes a Guard.
type Config struct {
	// Allowed are networks the operator trusts: an address inside one is
	// never refused.
	Allowed []netip.Prefix
	// AllowUnixSockets lets the guard pass "unix" dials; without it they
	// are refused, since a socket path reaches this host's own services.
	AllowUnixSockets bool
	// Plugin names the plugin in refusals, as in "the nats plugin's
	// allowed_networks setting".
	Plugin string
	// Target names what is being reached, as in "if this receiver is meant
	// to be internal"; empty means "server".
	Target string
	// AllowedSetting names, in the refusal's advice, the setting an
	// operator changes to allow a network, where the host maps its own
	// key onto the plugin's (the http plugin's allowed_networks is the
	// server's webhook.allowed_networks). Empty means "the <Plugin>
	// plugin's allowed_networks setting".
	AllowedSetting string
	// UnixSetting names the setting that allows unix sockets, for the
	// refusal's advice; empty means "allow_unix_sockets".
	UnixSetting string
}

// Guard checks addresses against the table and an allow-list. The zero
// value refuses every address the table refuses. A Guard is immutable and
// safe for concurrent use.
type Guard struct {
	cfg Config
}

// New returns a guard for cfg; the allow-list is copied.
func New(cfg Config) *Guard {
	allowed := make([]netip.Prefix, len(cfg.Allowed))
	for i, p := range cfg.Allowed {
		allowed[i] = p.Masked()
	}
	cfg.Allowed = allowed
	if cfg.Target == "" {
		cfg.Target = "server"
	}
	if cfg.AllowedSetting == "" {
		cfg.AllowedSetting = fmt.Sprintf("the %s plugin's %s setting", cfg.Plugin, SettingAllowedNetworks)
	}
	if cfg.UnixSetting == "" {
		cfg.UnixSetting = "allow_unix_sockets"
	}
	return &Guard{cfg: cfg}
}

// Allowed returns a copy of the guard's allow-list.
func (g *Guard) Allowed() []netip.Prefix {
	return append([]netip.Prefix(nil), g.cfg.Allowed...)
}

// RefusedError is a connection the guard would not make. The same
// address is refused on every retry until the operator changes the
// setting it names, so a refused literal address is a permanent failure;
// an address a DNS answer gave may differ on the next try, and the http,
// nats, redis, amqp and mqtt plugins try such a delivery again (without a
// request, so no attempt).
type RefusedError struct {
	// Addr is the address refused, with its port when dialing, or a
	// socket path.
	Addr string
	// Reason says what the address is, e.g. "in 198.18.0.0/15,
	// benchmarking (RFC 2544), which is not globally reachable".
	Reason string
	// Range is the table entry that refused it (for an embedded form, the
	// entry of the IPv4 address it carries); zero for a unix socket.
	Range Range
	// Advice says what the operator can change.
	Advice string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused to connect to %s: it is %s; %s", e.Addr, e.Reason, e.Advice)
}

// Check returns a *RefusedError if addr may not be reached, naming it as
// the bare address.
func (g *Guard) Check(addr netip.Addr) error {
	return g.check(addr, addr.String())
}

// check is Check with the address named as shown (host:port when dialing).
func (g *Guard) check(addr netip.Addr, shown string) error {
	addr = addr.WithZone("")
	if g.allows(addr) {
		return nil
	}
	e, ok := lookup(addr)
	if !ok {
		return nil
	}
	switch e.Verdict {
	case Allow:
		return nil
	case Refuse:
		return g.refused(shown, fmt.Sprintf("in %s, %s (%s), which is not globally reachable", e.Prefix, e.Name, e.Source), e)
	}
	inner := e.embed(addr.As16())
	if g.allows(inner) {
		return nil
	}
	ie, ok := lookup(inner)
	if !ok || ie.Verdict != Refuse {
		return nil
	}
	return g.refused(shown, fmt.Sprintf("in %s, %s (%s), and leads to %s, which is in %s, %s (%s), not globally reachable",
		e.Prefix, e.Name, e.Source, inner, ie.Prefix, ie.Name, ie.Source), ie)
}

func (g *Guard) allows(addr netip.Addr) bool {
	for _, p := range g.cfg.Allowed {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func (g *Guard) refused(shown, reason string, e Range) error {
	return &RefusedError{Addr: shown, Reason: reason, Range: e,
		Advice: fmt.Sprintf("if this %s is meant to be internal, add a network containing it to %s",
			g.cfg.Target, g.cfg.AllowedSetting)}
}

// CheckNetwork checks a dial to address over network ("tcp", "tcp4",
// "udp6", "unix", …) as Control sees it: an IP address and port for IP
// networks, a path for unix sockets.
func (g *Guard) CheckNetwork(network, address string) error {
	if strings.HasPrefix(network, "unix") {
		if g.cfg.AllowUnixSockets {
			return nil
		}
		return &RefusedError{Addr: "unix socket " + address,
			Reason: "a unix socket, which reaches this host's own services",
			Advice: fmt.Sprintf("if this %s is meant to be reached that way, set the %s plugin's %s setting to true",
				g.cfg.Target, g.cfg.Plugin, g.cfg.UnixSetting)}
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Fail closed: an address the guard cannot read is not dialed.
		return &RefusedError{Addr: address, Reason: "an address the SSRF guard could not parse",
			Advice: "report this as a bug"}
	}
	return g.check(ap.Addr(), address)
}

// Control is a net.Dialer Control function. It runs after name resolution
// and before connect, on each address actually being dialed.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	return g.CheckNetwork(network, address)
}

// Dialer returns a copy of base (nil: a zero net.Dialer) that checks every
// address it connects to, after any Control base already had. Its
// DialContext and Dial are what to hand a client library: they resolve the
// name, check each address and connect only to checked ones, falling back
// through the resolved addresses as net.Dialer does.
func (g *Guard) Dialer(base *net.Dialer) *net.Dialer {
	var d net.Dialer
	if base != nil {
		d = *base
	}
	prevCtx, prev := d.ControlContext, d.Control
	d.Control = nil
	d.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
		switch {
		case prevCtx != nil:
			if err := prevCtx(ctx, network, address, c); err != nil {
				return err
			}
		case prev != nil:
			if err := prev(network, address, c); err != nil {
				return err
			}
		}
		return g.CheckNetwork(network, address)
	}
	return &d
}

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ErrLookup is wrapped when ValidateHostPort cannot resolve a name. It is
// not a refusal: the dial checks whatever the name resolves to then.
var ErrLookup = errors.New("could not resolve the host")

// ValidateHostPort checks a host:port (or a bare host) before an endpoint
// is accepted. A literal address is checked as it is. A name is resolved
// with r and every address it resolves to must pass; with a nil r names
// are not resolved and pass, left to the dial. It returns a *RefusedError
// for a refusal, an error wrapping ErrLookup when the name does not
// resolve (callers usually accept the endpoint then: DNS may be down right
// now, and the dial checks again), and nil otherwise.
func (g *Guard) ValidateHostPort(ctx context.Context, r Resolver, hostport string) error {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if addr, err := netip.ParseAddr(host); err == nil {
		return g.check(addr, hostport)
	}
	if r == nil {
		return nil
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrLookup, host, err)
	}
	for _, a := range addrs {
		if err := g.check(a.Unmap(), fmt.Sprintf("%s (%s resolves to %s)", hostport, host, a.Unmap())); err != nil {
			return err
		}
	}
	return nil
}

// ParseNetworks reads an allowed_networks value: comma-separated CIDRs,
// where a bare address means just that address. setting names the setting
// in the error.
func ParseNetworks(setting, value string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, field := range strings.Split(value, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		if p, err := netip.ParsePrefix(field); err == nil {
			out = append(out, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(field); err == nil && a.Zone() == "" {
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		return nil, fmt.Errorf("%s: %q is not a CIDR such as 10.0.0.0/8 or fd00::/8, nor an address", setting, field)
	}
	return out, nil
}
