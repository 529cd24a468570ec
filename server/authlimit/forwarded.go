package authlimit

import (
	"net/http"
	"net/netip"
	"strings"
)

// ClientAddr is the address a request counts as coming from, for the
// limits and the logs: the TCP peer, unless the peer is inside trusted
// (the reverse proxies in front of the server). Then the forwarding
// header the proxies append to (Forwarded, or else X-Forwarded-For) is
// walked from the right, skipping hops inside trusted, and the first hop
// that is not trusted is the client. Only the right end of the chain is
// believed because every hop can write anything to the left of its own
// entry: a client may send a made-up header, and an untrusted peer's
// headers are never read at all.
//
// A hop that cannot be read (for=unknown, an obfuscated identifier, junk)
// ends the walk: the trusted hop to its right, which passed it on, is the
// client, since nothing further left can be believed. When a request
// carries both headers and they name different clients, the proxy wrote
// only one of them and a client the other; which is which cannot be told,
// so the TCP peer is the client: such requests share the proxy's count,
// and no one can borrow another client's address.
//
// The result is an address without a port, or r.RemoteAddr itself when
// the peer cannot be read (a Unix socket, a test's made-up value), ready
// for Check and ClientOf.
func ClientAddr(r *http.Request, trusted []netip.Prefix) string {
	peer, ok := parseHop(r.RemoteAddr)
	if !ok || !contains(trusted, peer) {
		return r.RemoteAddr
	}
	fwd, hasFwd := r.Header["Forwarded"]
	xff, hasXFF := r.Header["X-Forwarded-For"]
	var client netip.Addr
	switch {
	case hasFwd && hasXFF:
		a, b := walk(peer, forwardedHops(fwd), trusted), walk(peer, xffHops(xff), trusted)
		client = peer
		if a == b {
			client = a
		}
	case hasFwd:
		client = walk(peer, forwardedHops(fwd), trusted)
	case hasXFF:
		client = walk(peer, xffHops(xff), trusted)
	default:
		client = peer
	}
	return client.String()
}

// walk returns the first hop from the right of hops that is not in
// trusted; peer, which is, sent the request.
func walk(peer netip.Addr, hops []string, trusted []netip.Prefix) netip.Addr {
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			return client
		}
		client = a
		if !contains(trusted, a) {
			return a
		}
	}
	return client
}

func contains(nets []netip.Prefix, a netip.Addr) bool {
	for _, p := range nets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop reads an address as hops write it: bare, with a port, IPv6 in
// brackets with or without one. Zones are dropped, IPv4-mapped IPv6 is
// read as IPv4, so trusted ranges match either spelling.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			b, ok := strings.CutPrefix(s, "[")
			b, ok2 := strings.CutSuffix(b, "]")
			if !ok || !ok2 {
				return netip.Addr{}, false
			}
			if a, err = netip.ParseAddr(b); err != nil {
				return netip.Addr{}, false
			}
		} else {
			a = ap.Addr()
		}
	}
	return a.Unmap().WithZone(""), true
}

// xffHops splits X-Forwarded-For lines into hops, left to right; several
// lines count as one list joined by commas (RFC 9110, 5.3).
func xffHops(lines []string) []string {
	var hops []string
	for _, l := range lines {
		hops = append(hops, strings.Split(l, ",")...)
	}
	return hops
}

// forwardedHops reads the for= of each element of Forwarded lines (RFC
// 7239), left to right. An element without one is a hop that cannot be
// read, kept as "" so the walk stops there.
func forwardedHops(lines []string) []string {
	var hops []string
	for _, l := range lines {
		for _, elem := range splitOutsideQuotes(l, ',') {
			hop := ""
			for _, pair := range splitOutsideQuotes(elem, ';') {
				k, v, _ := strings.Cut(strings.TrimSpace(pair), "=")
				if strings.EqualFold(k, "for") {
					hop = strings.Trim(v, `"`)
				}
			}
			hops = append(hops, hop)
		}
	}
	return hops
}

// splitOutsideQuotes splits s at sep where sep is not inside a quoted
// string, which RFC 7239 allows to hold separators.
func splitOutsideQuotes(s string, sep byte) []string {
	var parts []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quoted:
			i++
		case s[i] == '"':
			quoted = !quoted
		case s[i] == sep && !quoted:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}
