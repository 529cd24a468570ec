package api

import "net/http"

// RoutePatterns lists the patterns h registered, e.g. "GET /v1/deliveries",
// so a test can hold the OpenAPI document to the real route list.
func RoutePatterns(h http.Handler) []string {
	return append([]string(nil), h.(*handler).patterns...)
}
