// Package api is the HTTP API of the Hymical delivery server: ingest of form
// submissions and generic events, management of endpoints, inspection and
// replay of deliveries, the liveness and readiness probes, and the
// Prometheus exposition on /metrics. Everything it serves is JSON under /v1
// (the probes and /metrics excepted), routed with the Go 1.22 ServeMux
// patterns, behind bearer-token authentication whose failures are limited
// per client address (server/authlimit, shared with the console); in
// insecure dev mode it answers only requests from this machine
// (server/devmode). Every /v1 request is a
// server span that continues the caller's W3C trace context; an ingest
// stores its span's traceparent with the event, so every later attempt
// links back to it.
//
// It owns request parsing, authentication, input validation and the mapping
// of storage sentinels to HTTP statuses, and nothing else. It must not
// decide a delivery state transition: every change goes through one
// storage.Store call, which is one transaction, so a refused request writes
// nothing. It must not talk to plugin processes beyond asking the
// Transports whether an endpoint is acceptable, and it must never put a
// signing secret into a log line or any response other than the one that
// creates it (endpoint creation and secret rotation).
package api
