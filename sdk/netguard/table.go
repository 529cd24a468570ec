package netguard

import "net/netip"

// Verdict is what the guard does with an address whose most specific
// range is a given entry.
type Verdict int

const (
	// Refuse: the range is not globally reachable ("Globally Reachable"
	// is False or N/A in its IANA registry), or is multicast, reserved or
	// deprecated.
	Refuse Verdict = iota
	// Allow: a globally reachable entry, listed so that it is judged on its
	// own and not by a wider refused block around it (192.0.0.9 inside
	// 192.0.0.0/24), or so the table shows it was looked at.
	Allow
	// Embedded: the address carries an IPv4 address (a translation or
	// tunnelling form) and is judged by that address, since that is where
	// a packet to it ends up.
	Embedded
)

func (v Verdict) String() string {
	switch v {
	case Refuse:
		return "refuse"
	case Allow:
		return "allow"
	case Embedded:
		return "judge the embedded IPv4 address"
	}
	return "unknown verdict"
}

// Range is one entry of the guard's table.
type Range struct {
	Prefix netip.Prefix
	// Name is the registry's name for the range, as the refusal names it.
	Name string
	// Source is the RFC (or registry) that defines it.
	Source  string
	Verdict Verdict
	// embed takes the IPv4 address out of an address in an Embedded range.
	embed func(a [16]byte) netip.Addr
}

// Ranges returns a copy of the table, IPv4 entries first, in registry order.
func Ranges() []Range {
	out := make([]Range, len(table))
	copy(out, table)
	return out
}

func lastFour(a [16]byte) netip.Addr { return netip.AddrFrom4([4]byte(a[12:16])) }

// sixToFour reads 2002:AABB:CCDD::/48, the 6to4 form (RFC 3056 §2).
func sixToFour(a [16]byte) netip.Addr { return netip.AddrFrom4([4]byte(a[2:6])) }

func r(prefix, name, source string, v Verdict) Range {
	return Range{Prefix: netip.MustParsePrefix(prefix), Name: name, Source: source, Verdict: v}
}

func embedded(prefix, name, source string, embed func([16]byte) netip.Addr) Range {
	return Range{Prefix: netip.MustParsePrefix(prefix), Name: name, Source: source, Verdict: Embedded, embed: embed}
}

// table is the rule. The IPv4 and IPv6 entries follow the IANA IPv4 and
// IPv6 Special-Purpose Address Registries (RFC 6890 and their later
// entries); every entry whose "Globally Reachable" is False or N/A is
// refused, and the globally reachable ones are listed as Allow. Beyond
// the registries: IPv4 and IPv6 multicast, the deprecated IPv6 site-local
// fec0::/10, and the IPv6 space the IETF has not allocated for unicast
// (everything outside 2000::/3 not otherwise listed, from the IANA IPv6
// Address Space registry), which no receiver can legitimately have.
//
// The most specific entry containing an address decides. Names are
// lower-case where they are read in a sentence: "it is in 198.18.0.0/15,
// benchmarking (RFC 2544)".
var table = []Range{
	// IANA IPv4 Special-Purpose Address Registry.
	r("0.0.0.0/8", `"this network"`, "RFC 791 §3.2", Refuse),
	r("0.0.0.0/32", `"this host on this network" (the unspecified address)`, "RFC 1122 §3.2.1.3", Refuse),
	r("10.0.0.0/8", "private-use", "RFC 1918", Refuse),
	r("100.64.0.0/10", "shared address space (CGNAT)", "RFC 6598", Refuse),
	r("127.0.0.0/8", "loopback", "RFC 1122 §3.2.1.3", Refuse),
	r("169.254.0.0/16", "link-local (cloud metadata services live here)", "RFC 3927", Refuse),
	r("172.16.0.0/12", "private-use", "RFC 1918", Refuse),
	r("192.0.0.0/24", "IETF protocol assignments", "RFC 6890 §2.1", Refuse),
	r("192.0.0.0/29", "IPv4 service continuity prefix", "RFC 7335", Refuse),
	r("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", Refuse),
	r("192.0.0.9/32", "Port Control Protocol anycast", "RFC 7723", Allow),
	r("192.0.0.10/32", "Traversal Using Relays around NAT anycast", "RFC 8155", Allow),
	r("192.0.0.170/31", "NAT64/DNS64 discovery", "RFC 8880, RFC 7050 §2.2", Refuse),
	r("192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737", Refuse),
	r("192.31.196.0/24", "AS112-v4", "RFC 7535", Allow),
	r("192.52.193.0/24", "AMT", "RFC 7450", Allow),
	r("192.88.99.0/24", "deprecated 6to4 relay anycast", "RFC 7526", Refuse),
	r("192.168.0.0/16", "private-use", "RFC 1918", Refuse),
	r("192.175.48.0/24", "direct delegation AS112 service", "RFC 7534", Allow),
	r("198.18.0.0/15", "benchmarking", "RFC 2544", Refuse),
	r("198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737", Refuse),
	r("203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737", Refuse),
	r("240.0.0.0/4", "reserved", "RFC 1112 §4", Refuse),
	r("255.255.255.255/32", "limited broadcast", "RFC 8190, RFC 919 §7", Refuse),
	// IANA IPv4 Multicast Address Space Registry.
	r("224.0.0.0/4", "multicast", "RFC 5771", Refuse),

	// IANA IPv6 Special-Purpose Address Registry.
	r("::1/128", "the loopback address", "RFC 4291", Refuse),
	r("::/128", "the unspecified address", "RFC 4291", Refuse),
	embedded("::ffff:0:0/96", "IPv4-mapped", "RFC 4291", lastFour),
	embedded("64:ff9b::/96", "IPv4-IPv6 translation (NAT64 well-known prefix)", "RFC 6052", lastFour),
	// Local-use translation: the registry says not globally reachable,
	// and where the IPv4 address sits depends on the prefix length the
	// network chose, so it cannot be read reliably: refused whole.
	r("64:ff9b:1::/48", "IPv4-IPv6 translation (local-use NAT64 prefix)", "RFC 8215", Refuse),
	r("100::/64", "discard-only", "RFC 6666", Refuse),
	r("100:0:0:1::/64", "dummy IPv6 prefix", "RFC 9780", Refuse),
	r("2001::/23", "IETF protocol assignments", "RFC 2928", Refuse),
	r("2001::/32", "Teredo", "RFC 4380, RFC 8190", Refuse),
	r("2001:1::1/128", "Port Control Protocol anycast", "RFC 7723", Allow),
	r("2001:1::2/128", "Traversal Using Relays around NAT anycast", "RFC 8155", Allow),
	r("2001:1::3/128", "DNS-SD Service Registration Protocol anycast", "RFC 9665", Allow),
	r("2001:2::/48", "benchmarking", "RFC 5180", Refuse),
	r("2001:3::/32", "AMT", "RFC 7450", Allow),
	r("2001:4:112::/48", "AS112-v6", "RFC 7535", Allow),
	r("2001:10::/28", "deprecated ORCHID", "RFC 4843", Refuse),
	r("2001:20::/28", "ORCHIDv2", "RFC 7343", Allow),
	r("2001:30::/28", "drone remote ID entity tags (DETs)", "RFC 9374", Allow),
	r("2001:db8::/32", "documentation", "RFC 3849", Refuse),
	embedded("2002::/16", "6to4", "RFC 3056", sixToFour),
	r("2620:4f:8000::/48", "direct delegation AS112 service", "RFC 7534", Allow),
	r("3fff::/20", "documentation", "RFC 9637", Refuse),
	r("5f00::/16", "segment routing (SRv6) SIDs", "RFC 9602", Refuse),
	r("fc00::/7", "unique-local (private)", "RFC 4193, RFC 8190", Refuse),
	r("fe80::/10", "link-local unicast", "RFC 4291", Refuse),
	// Deprecated, not in the registry, still routed by some stacks.
	r("fec0::/10", "site-local (deprecated)", "RFC 3879", Refuse),
	r("ff00::/8", "multicast", "RFC 4291", Refuse),
	// IPv4-compatible addresses (deprecated): some stacks still tunnel
	// them to the IPv4 address they carry. ::/128 and ::1/128 above are
	// more specific and win.
	embedded("::/96", "IPv4-compatible (deprecated)", "RFC 4291 §2.5.5.1", lastFour),

	// IANA IPv6 Address Space: what the IETF has reserved rather than
	// allocated for global unicast (2000::/3).
	r("::/8", "reserved by the IETF", "RFC 4291", Refuse),
	r("100::/8", "reserved by the IETF", "RFC 4291", Refuse),
	r("200::/7", "reserved by the IETF", "RFC 4048", Refuse),
	r("400::/6", "reserved by the IETF", "RFC 4291", Refuse),
	r("800::/5", "reserved by the IETF", "RFC 4291", Refuse),
	r("1000::/4", "reserved by the IETF", "RFC 4291", Refuse),
	r("4000::/3", "reserved by the IETF", "RFC 4291", Refuse),
	r("6000::/3", "reserved by the IETF", "RFC 4291", Refuse),
	r("8000::/3", "reserved by the IETF", "RFC 4291", Refuse),
	r("a000::/3", "reserved by the IETF", "RFC 4291", Refuse),
	r("c000::/3", "reserved by the IETF", "RFC 4291", Refuse),
	r("e000::/4", "reserved by the IETF", "RFC 4291", Refuse),
	r("f000::/5", "reserved by the IETF", "RFC 4291", Refuse),
	r("f800::/6", "reserved by the IETF", "RFC 4291", Refuse),
	r("fe00::/9", "reserved by the IETF", "RFC 4291", Refuse),
}

// lookup returns the most specific entry containing addr, which must
// carry no zone and, if IPv4, be a plain 4-byte address.
func lookup(addr netip.Addr) (Range, bool) {
	var best Range
	found := false
	for _, e := range table {
		if e.Prefix.Contains(addr) && (!found || e.Prefix.Bits() > best.Prefix.Bits()) {
			best, found = e, true
		}
	}
	return best, found
}
