package api

import (
	"net/http"

	"github.com/hymical/hymical/server/faceopts"
)

// RoutePatterns lists the patterns h registered, e.g. "GET /v1/deliveries",
// so a test can hold the OpenAPI document to the real route list.
func RoutePatterns(h http.Handler) []string {
	return append([]string(nil), h.(*handler).patterns...)
}

// ReadableJSON reports whether receivers can read the well-formed JSON
// text b by the API's rules at the default nesting limit, as the reference
// the fuzz tests hold checkJSON to decides it.
func ReadableJSON(b []byte) bool { return len(readableJSON(b, faceopts.DefaultMaxNestingDepth)) == 0 }
