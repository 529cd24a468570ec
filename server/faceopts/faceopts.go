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

import "time"

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
