// Package faceopts declares the defaults and bounds of the HTTP faces'
// options (server/api, server/console): how large and how deeply nested a
// request body may be, how long a rotated-out signing secret keeps signing,
// how long a console login lasts. Each face falls back to these when an
// option is zero, and the API refuses a nesting depth above its bound.
//
// They live here, not in the faces, because the configuration states the
// same defaults and bounds to its users and may not link the faces (they
// bring the store's HTTP handlers with them): both import this package,
// so each number is written once. This package imports nothing but the
// standard library and must stay that way.
package faceopts

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Bounds of a request body.
const (
	// DefaultMaxBodyBytes is the largest request body a face reads unless
	// told otherwise: 1 MiB.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxNestingDepth leaves room for the two levels the signed
	// payload wraps a submission's data in under the 100 levels some
	// receivers' parsers stop at (Ruby's JSON.parse, for one).
	DefaultMaxNestingDepth = 64
	// MaxNestingDepthLimit is the most the nesting depth may be set to:
	// the payload, two levels deeper, stays well under the 10000 levels
	// that Go's encoding/json, and so the store, accepts.
	MaxNestingDepthLimit = 1000
)

// DefaultSecretRotationGrace is how long a rotated-out endpoint signing
// secret keeps signing next to the new one. The API and the console
// rotate secrets alike, so they share it.
const DefaultSecretRotationGrace = 24 * time.Hour

// DefaultSessionTTL is how long a console login lasts.
const DefaultSessionTTL = 12 * time.Hour

// accentPattern is a CSS hex colour: nothing that could end the rule the
// portal writes it into.
var accentPattern = regexp.MustCompile(`^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})$`)

// CheckAccentColor says what is wrong with the portal's accent colour, a
// CSS colour written as #rgb or #rrggbb; empty is fine (the default).
func CheckAccentColor(c string) error {
	if c == "" || accentPattern.MatchString(c) {
		return nil
	}
	return fmt.Errorf("%q is not a colour written as #rgb or #rrggbb (for example #0550ae)", shorten(c))
}

// frameSourcePattern is one origin a CSP source list may name: http or
// https, a host (a leading *. allowed), an optional port, no path.
var frameSourcePattern = regexp.MustCompile(`^https?://(?:\*\.)?[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::(?:[0-9]{1,5}|\*))?$`)

// CheckFrameAncestors says what is wrong with the portal's CSP
// frame-ancestors list: each value is 'none', 'self' or an http(s)
// origin, and 'none' stands alone. Anything else could end the header's
// directive and start others.
func CheckFrameAncestors(values []string) error {
	for _, v := range values {
		switch {
		case v == "'none'" && len(values) > 1:
			return errors.New("'none' cannot be listed with other values; give either 'none' or the origins that may embed the portal")
		case v == "'none'" || v == "'self'":
		case !frameSourcePattern.MatchString(v):
			return fmt.Errorf("%q is not an origin such as https://forms.example.com or https://*.example.com:8443 (scheme and host, no path), nor 'self' or 'none'", shorten(v))
		}
	}
	return nil
}

// shorten bounds a value quoted in an error.
func shorten(s string) string {
	for i := range s {
		if i >= 64 {
			return s[:i] + "…"
		}
	}
	return s
}
