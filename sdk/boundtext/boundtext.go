// Package boundtext makes text from elsewhere (a transport's error, a
// receiver's reason) safe to carry across the plugin boundary and to store:
// valid UTF-8, no NUL bytes (which PostgreSQL text rejects), and at most a
// given number of bytes, cut on a rune boundary. The core and the SDK share
// this one rule so a message is never cut differently on the two sides; it
// lives in the SDK module because that is the side the core may import.
//
// It is public because it has to be: the server's storage bounds what it
// stores with it and may not import sdk/transport. It is kept to this one
// function. A plugin calls transport.BoundError, which is this rule at
// transport.MaxErrorBytes, and a receiver has no use for it.
package boundtext

import (
	"strings"
	"unicode/utf8"
)

// Bound returns s made valid and cut to at most max bytes, marking a cut
// with an ellipsis.
func Bound(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut < 0 {
		cut = 0
	}
	return s[:cut] + ellipsis
}
