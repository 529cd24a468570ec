package httptransport

import (
	"fmt"
	"net/netip"
	"syscall"
)

// RefusedError is a connection the SSRF guard would not make. It is a
// permanent failure: the same address will be refused on every retry until
// the operator changes allowed_networks.
type RefusedError struct {
	// Addr is the address that was refused, with its port when dialing.
	Addr string
	// Reason names the kind of address, e.g. "a loopback address".
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused to connect to %s: it is %s, which webhooks may not reach; "+
		"if this receiver is meant to be internal, add a network containing it to the http plugin's allowed_networks setting",
		e.Addr, e.Reason)
}

// guard refuses connections to addresses inside the operator's own network
// or the host itself, unless the operator allowed them.
type guard struct {
	allowed []netip.Prefix
}

func prefix4(a, b byte, bits int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{a, b, 0, 0}), bits)
}

// blockedReason says why addr is refused by default, or "" if it is not.
func blockedReason(addr netip.Addr) string {
	addr = addr.Unmap()
	switch {
	case addr.IsUnspecified():
		return "an unspecified address"
	case addr.IsLoopback():
		return "a loopback address"
	case addr.IsPrivate():
		return "a private address (RFC 1918 or IPv6 unique local)"
	case addr.IsLinkLocalUnicast():
		// Includes 169.254.169.254, the cloud metadata service.
		return "a link-local address (cloud metadata services live here)"
	case addr.IsMulticast():
		return "a multicast address"
	case addr.Is4() && prefix4(100, 64, 10).Contains(addr):
		return "a shared (CGNAT, 100.64.0.0/10) address"
	case addr.Is4() && prefix4(0, 0, 8).Contains(addr):
		return "a \"this network\" (0.0.0.0/8) address"
	case addr.Is4() && prefix4(240, 0, 4).Contains(addr):
		return "a reserved or broadcast address (240.0.0.0/4)"
	}
	return ""
}

// check returns a *RefusedError when addr may not be reached; shown is how
// the address is named in the error.
func (g guard) check(addr netip.Addr, shown string) error {
	reason := blockedReason(addr)
	if reason == "" {
		return nil
	}
	addr = addr.Unmap().WithZone("")
	for _, p := range g.allowed {
		if p.Contains(addr) {
			return nil
		}
	}
	return &RefusedError{Addr: shown, Reason: reason}
}

// control runs after name resolution and before connect, on the address
// actually being dialed, so a name that resolves (or re-resolves, as in DNS
// rebinding) to a refused address is caught.
func (g guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Fail closed: an address the guard cannot read is not dialed.
		return &RefusedError{Addr: address, Reason: "an address the SSRF guard could not parse"}
	}
	return g.check(ap.Addr(), address)
}
