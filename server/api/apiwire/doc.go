// Package apiwire holds the JSON types of the /v1 HTTP API: the request
// bodies, the responses and the one error shape. The handlers in server/api
// answer with them, the hymical CLI and the tests decode with them, so a
// field is named and encoded in one place.
//
// It owns shapes only: no handler, no validation, no conversion from the
// store's types (server/api does that, in views.go). It imports nothing of
// the server and no package that links a database driver, the worker or the
// plugin host, so a client can import it and get only the standard library.
// States and outcomes are its own typed strings, with the same values as the
// store's.
//
// Times are UTC, encoded as RFC 3339 with nanoseconds. A pointer field is
// null in the JSON when it has no value; a list is [] rather than null,
// unless its doc says the field is left out when empty.
package apiwire
