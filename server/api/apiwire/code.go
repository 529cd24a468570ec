package apiwire

import "net/http"

// Code is the stable, machine-readable name of an API error, the "code" of
// ErrorResponse. Each code comes with one HTTP status, Status, so a program
// can branch on either and find them agreeing on every route; the server
// sends no code but these (openapi.json lists them as the enum of the code).
type Code string

// The codes, grouped by the status they come with.
const (
	// 400: the request itself is malformed; sending it again unchanged
	// cannot succeed.
	CodeUnreadableBody   Code = "unreadable_body"
	CodeEmptyBody        Code = "empty_body"
	CodeInvalidJSON      Code = "invalid_json"
	CodeTrailingData     Code = "trailing_data"
	CodeWrongType        Code = "wrong_type"
	CodeUnknownField     Code = "unknown_field"
	CodeInvalidUTF8      Code = "invalid_utf8"
	CodeLoneSurrogate    Code = "lone_surrogate"
	CodeNULCharacter     Code = "nul_character"
	CodeNumberOutOfRange Code = "number_out_of_range"
	CodeTooDeep          Code = "too_deep"
	CodeDuplicateKey     Code = "duplicate_key"
	CodeInvalidParameter Code = "invalid_parameter"
	// CodeInvalidIdempotencyKey is a malformed Idempotency-Key header; a
	// well-formed key used with another request is CodeIdempotencyKeyReused.
	CodeInvalidIdempotencyKey  Code = "invalid_idempotency_key"
	CodeInvalidSignatureScheme Code = "invalid_signature_scheme"

	// 401, 403: who is asking.
	CodeUnauthorized Code = "unauthorized"
	CodeForbidden    Code = "forbidden"
	// Insecure dev mode only: a request a browser says came from a page
	// of another site or origin.
	CodeCrossSiteRequest   Code = "cross_site_request"
	CodeCrossOriginRequest Code = "cross_origin_request"
	// CodeReadOnlyToken is a scoped token made read-only, on a route that
	// changes something.
	CodeReadOnlyToken Code = "read_only_token"
	// CodeFormOutOfScope is a scoped token naming a form outside its scope
	// in an endpoint it creates or changes, or an endpoint of no form.
	CodeFormOutOfScope Code = "form_out_of_scope"

	CodeNotFound         Code = "not_found"
	CodeMetricsOff       Code = "metrics_off"
	CodeMethodNotAllowed Code = "method_not_allowed"

	// 409: the request is fine but the state of what it names is not.
	CodeNotTerminal      Code = "not_terminal"
	CodeConflict         Code = "conflict"
	CodeEndpointBusy     Code = "endpoint_busy"
	CodeOperatorEndpoint Code = "operator_endpoint"
	CodeSecretRotated    Code = "secret_rotated"

	CodeEndpointDeleted      Code = "endpoint_deleted"
	CodeBodyTooLarge         Code = "body_too_large"
	CodeUnsupportedMediaType Code = "unsupported_media_type"
	// CodeMisdirectedRequest is insecure dev mode only: a Host that is not
	// a loopback name, as after DNS rebinding.
	CodeMisdirectedRequest Code = "misdirected_request"

	// 422: well-formed, but a value is not acceptable.
	CodeInvalidBody          Code = "invalid_body"
	CodeInvalidRequest       Code = "invalid_request"
	CodeInvalidURL           Code = "invalid_url"
	CodeInvalidFormID        Code = "invalid_form_id"
	CodeInvalidEventType     Code = "invalid_event_type"
	CodeUnknownTransport     Code = "unknown_transport"
	CodeTransportRefused     Code = "transport_refused"
	CodeIdempotencyKeyReused Code = "idempotency_key_reused"
	CodeInvalidRateLimit     Code = "invalid_rate_limit"
	CodeInvalidMaxInFlight   Code = "invalid_max_in_flight"
	CodeInvalidRetrySchedule Code = "invalid_retry_schedule"
	CodeInvalidHeader        Code = "invalid_header"

	CodeTooManyFailedAuthentications Code = "too_many_failed_authentications"
	CodeInternal                     Code = "internal"

	// 503: nothing was stored; the same request may succeed later.
	// CodeStorageUnavailable is a database that cannot be reached now
	// (stopped, restarting, cut off by the network); a write whose answer
	// was lost with the connection may have been stored, which its
	// Idempotency-Key settles when it is sent again.
	CodeNotReady             Code = "not_ready"
	CodeStorageFull          Code = "storage_full"
	CodeStorageBusy          Code = "storage_busy"
	CodeStorageUnavailable   Code = "storage_unavailable"
	CodeTimeout              Code = "timeout"
	CodeTransportUnavailable Code = "transport_unavailable"
)

// Status is the HTTP status every answer with c carries, or 0 when c is
// not one of this package's codes (one a newer server added, as a client
// sees it).
func (c Code) Status() int {
	switch c {
	case CodeUnreadableBody, CodeEmptyBody, CodeInvalidJSON, CodeTrailingData, CodeWrongType, CodeUnknownField,
		CodeInvalidUTF8, CodeLoneSurrogate, CodeNULCharacter, CodeNumberOutOfRange, CodeTooDeep, CodeDuplicateKey,
		CodeInvalidParameter, CodeInvalidIdempotencyKey, CodeInvalidSignatureScheme:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden, CodeCrossSiteRequest, CodeCrossOriginRequest, CodeReadOnlyToken, CodeFormOutOfScope:
		return http.StatusForbidden
	case CodeNotFound, CodeMetricsOff:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeNotTerminal, CodeConflict, CodeEndpointBusy, CodeOperatorEndpoint, CodeSecretRotated:
		return http.StatusConflict
	case CodeEndpointDeleted:
		return http.StatusGone
	case CodeBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case CodeMisdirectedRequest:
		return http.StatusMisdirectedRequest
	case CodeInvalidBody, CodeInvalidRequest, CodeInvalidURL, CodeInvalidFormID, CodeInvalidEventType,
		CodeUnknownTransport, CodeTransportRefused, CodeIdempotencyKeyReused, CodeInvalidRateLimit,
		CodeInvalidMaxInFlight, CodeInvalidRetrySchedule, CodeInvalidHeader:
		return http.StatusUnprocessableEntity
	case CodeTooManyFailedAuthentications:
		return http.StatusTooManyRequests
	case CodeInternal:
		return http.StatusInternalServerError
	case CodeNotReady, CodeStorageFull, CodeStorageBusy, CodeStorageUnavailable, CodeTimeout, CodeTransportUnavailable:
		return http.StatusServiceUnavailable
	}
	return 0
}

// Codes lists every code, in the order they are declared: what a client
// may meet, and what the tests hold openapi.json and docs/api.md to.
func Codes() []Code {
	return []Code{
		CodeUnreadableBody, CodeEmptyBody, CodeInvalidJSON, CodeTrailingData, CodeWrongType, CodeUnknownField,
		CodeInvalidUTF8, CodeLoneSurrogate, CodeNULCharacter, CodeNumberOutOfRange, CodeTooDeep, CodeDuplicateKey,
		CodeInvalidParameter, CodeInvalidIdempotencyKey, CodeInvalidSignatureScheme,
		CodeUnauthorized, CodeForbidden, CodeCrossSiteRequest, CodeCrossOriginRequest, CodeReadOnlyToken, CodeFormOutOfScope,
		CodeNotFound, CodeMetricsOff, CodeMethodNotAllowed,
		CodeNotTerminal, CodeConflict, CodeEndpointBusy, CodeOperatorEndpoint, CodeSecretRotated,
		CodeEndpointDeleted, CodeBodyTooLarge, CodeUnsupportedMediaType, CodeMisdirectedRequest,
		CodeInvalidBody, CodeInvalidRequest, CodeInvalidURL, CodeInvalidFormID, CodeInvalidEventType,
		CodeUnknownTransport, CodeTransportRefused, CodeIdempotencyKeyReused, CodeInvalidRateLimit,
		CodeInvalidMaxInFlight, CodeInvalidRetrySchedule, CodeInvalidHeader,
		CodeTooManyFailedAuthentications, CodeInternal,
		CodeNotReady, CodeStorageFull, CodeStorageBusy, CodeStorageUnavailable, CodeTimeout, CodeTransportUnavailable,
	}
}
