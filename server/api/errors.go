package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/storage"
)

// apiError is an answer other than success, written in the one error shape
// every route uses (apiwire.ErrorResponse) with its cause kept for the log.
// Its status is its code's (apiwire.Code.Status), never set beside it, so
// no route can send a code with another status than the others do.
// Message is written for the caller: it says what was wrong and what to do,
// and never carries a secret or a database's own words.
type apiError struct {
	Code    apiwire.Code
	Message string
	// RetryAfter, when set, is sent as the Retry-After header: when a
	// request refused for a passing reason is worth sending again.
	RetryAfter time.Duration
	// cause is logged, never sent.
	cause error
}

// status is the HTTP status e is sent with. A code without one is a bug
// here, answered as one rather than with a status the code does not mean.
func (e *apiError) status() int {
	if s := e.Code.Status(); s != 0 {
		return s
	}
	return http.StatusInternalServerError
}

func (e *apiError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.status(), e.Code, e.Message, e.cause)
	}
	return fmt.Sprintf("%d %s: %s", e.status(), e.Code, e.Message)
}

func (e *apiError) Unwrap() error { return e.cause }

// refuse is the apiError with code and a message made from format.
func refuse(code apiwire.Code, format string, args ...any) *apiError {
	return &apiError{Code: code, Message: fmt.Sprintf(format, args...)}
}

func errInternal() *apiError {
	return &apiError{Code: apiwire.CodeInternal,
		Message: "the server failed to complete the request; nothing is wrong with the request itself, try again and see the server log if it persists"}
}

// How long a request refused for the store's want of space, or of other
// resources, or for a database that is away or slow, is told to wait
// before it is sent again: space takes an operator, the rest usually
// passes by itself (a restart of PostgreSQL takes seconds).
const (
	noSpaceRetryAfter   = 30 * time.Second
	resourcesRetryAfter = 5 * time.Second
	awayRetryAfter      = 5 * time.Second
)

// storeError is the one place a Store error becomes an HTTP answer. what
// names the thing the call was about ("delivery dlv_…"), for 404 and 409.
// Anything that is not a sentinel is a 500 with a generic message: the
// detail, which may hold SQL or driver text, goes only to the log.
func storeError(err error, what string) *apiError {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return &apiError{Code: apiwire.CodeNotFound,
			Message: what + " does not exist; check the id", cause: err}
	case errors.Is(err, storage.ErrDeleted):
		return &apiError{Code: apiwire.CodeEndpointDeleted,
			Message: what + ": the endpoint was deleted; its deliveries and their attempts stay readable under GET /v1/deliveries?endpoint_id=…, but it takes no change, no replay and no new delivery", cause: err}
	case errors.Is(err, storage.ErrKeyReused):
		ae := keyReused()
		ae.cause = err
		return ae
	case errors.Is(err, storage.ErrNotTerminal):
		return &apiError{Code: apiwire.CodeNotTerminal,
			Message: what + " is pending or processing; only delivered or failed deliveries can be replayed, so wait until it finishes", cause: err}
	case errors.Is(err, storage.ErrConflict):
		return &apiError{Code: apiwire.CodeConflict,
			Message: what + " conflicts with one that already exists; retry, and if it persists use a new id or idempotency key", cause: err}
	case errors.Is(err, storage.ErrInvalid):
		return &apiError{Code: apiwire.CodeInvalidRequest,
			Message: "the request breaks a rule of the delivery store for " + what + "; check the values sent against docs/api.md", cause: err}
	}
	if ae := passingStoreError(err); ae != nil {
		return ae
	}
	e := errInternal()
	e.cause = err
	return e
}

// passingStoreError is the answer to a Store error that a later request
// may not meet (the database full, short of resources, away or slow), or
// nil for any other error. It is a 503 with Retry-After on every route,
// including those that hand a store error to fail without storeError.
func passingStoreError(err error) *apiError {
	switch {
	case errors.Is(err, storage.ErrNoSpace):
		return &apiError{Code: apiwire.CodeStorageFull, RetryAfter: noSpaceRetryAfter,
			Message: "the server's database is out of space, so nothing of this request was stored; send it again later. " +
				"Whoever runs the server must free space on the database's volume or grow the volume (GET /readyz says so until then)", cause: err}
	case errors.Is(err, storage.ErrResources):
		return &apiError{Code: apiwire.CodeStorageBusy, RetryAfter: resourcesRetryAfter,
			Message: "the server's database is short of resources (memory or connections, or on SQLite its write lock, held by another process), so nothing of this request was stored; send it again shortly", cause: err}
	case errors.Is(err, storage.ErrUnavailable):
		return &apiError{Code: apiwire.CodeStorageUnavailable, RetryAfter: awayRetryAfter,
			Message: "the server cannot reach its database just now (it is stopped, restarting or cut off), so this request was not carried out; send it again shortly. " +
				"If it persists, whoever runs the server must bring the database back (GET /readyz says it is unreachable until then)", cause: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Code: apiwire.CodeTimeout, RetryAfter: awayRetryAfter,
			Message: "the database did not answer in time; try again", cause: err}
	}
	return nil
}

// fail writes err as the error response, logging what the caller does not
// see.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		if ae = passingStoreError(err); ae == nil {
			ae = errInternal()
			ae.cause = err
		}
	}
	if errors.Is(err, storage.ErrNoSpace) {
		h.storeHealth.Observe(err)
	}
	switch {
	case r.Context().Err() != nil:
		// The client went away; there is no one to answer.
		h.log.Debug("request abandoned by the client", "method", r.Method, "route", r.Pattern, "path", r.URL.Path)
	case ae.status() >= 500 && ae.cause == nil:
		// An answer the handler chose itself (/readyz's not_ready) has no
		// cause to log: its message is the why, where error=<nil> said nothing.
		h.log.Error("request failed", "method", r.Method, "route", r.Pattern, "path", r.URL.Path,
			"status", ae.status(), "code", ae.Code, "message", ae.Message)
	case ae.status() >= 500:
		h.log.Error("request failed", "method", r.Method, "route", r.Pattern, "path", r.URL.Path,
			"status", ae.status(), "code", ae.Code, "error", ae.cause)
	default:
		h.log.Debug("request refused", "method", r.Method, "route", r.Pattern, "path", r.URL.Path,
			"status", ae.status(), "code", ae.Code, "message", ae.Message)
	}
	writeError(w, ae)
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.Code.Status() == 0 {
		// A code apiwire does not list is a bug here; no client could know it.
		e = errInternal()
	}
	if e.status() == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="hymical"`)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(e.RetryAfter/time.Second)))
	}
	writeJSON(w, e.status(), apiwire.ErrorResponse{Error: apiwire.Error{Code: e.Code, Message: e.Message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Answers are application/json with nosniff, never HTML, so "<" in a
	// message stays readable instead of becoming \u003c.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own view types are written; one that does not encode
		// is a bug, answered without its details.
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"` + string(apiwire.CodeInternal) + `","message":"the server could not encode its answer"}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
