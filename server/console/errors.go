package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hymical/hymical/storage"
)

// pageError is an answer other than success. Message says what was wrong
// and Advice what to do; neither ever carries a secret or a database's own
// words.
type pageError struct {
	Status  int
	Title   string
	Message string
	Advice  string
	// Link, when set, is where the error page sends the operator next.
	Link, LinkText string
	// cause is logged, never shown.
	cause error
	// retryAfter, when set, is sent as the Retry-After header.
	retryAfter string
}

func (e *pageError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Title, e.Message, e.cause)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Title, e.Message)
}

func (e *pageError) Unwrap() error { return e.cause }

func errInternal(cause error) *pageError {
	return &pageError{Status: http.StatusInternalServerError, Title: "Something went wrong on the server",
		Message: "The server failed to complete the request. Nothing is wrong with what you did.",
		Advice:  "Try again; if it keeps failing, the server log has the details.", cause: cause}
}

func errCrossOrigin() *pageError {
	return &pageError{Status: http.StatusForbidden, Title: "Action refused: it came from another site",
		Message: "The browser says this form was sent from a page that is not the console, so it was refused (CSRF protection). Nothing was changed.",
		Advice:  "Open the console directly and use its own buttons.", Link: Prefix + "/", LinkText: "Open the overview"}
}

func badInput(title, format string, args ...any) *pageError {
	return &pageError{Status: http.StatusBadRequest, Title: title, Message: fmt.Sprintf(format, args...),
		Advice: "Correct it and try again."}
}

// awayRetryAfter is the Retry-After, in seconds, of a page refused for a
// database that is away, slow or short of resources: each usually passes
// within seconds (a restart of PostgreSQL takes a few).
const awayRetryAfter = "5"

// storeError is the one place a Store error becomes an error page. what
// names the thing the call was about ("delivery dlv_…"). Anything that is
// not a sentinel is a 500 whose detail goes only to the log.
func storeError(err error, what string) *pageError {
	var pe *pageError
	if errors.As(err, &pe) {
		return pe
	}
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return &pageError{Status: http.StatusNotFound, Title: "Not found", Message: "There is no " + what + ".",
			Advice: "Check the id; the lists link to everything that exists.", cause: err}
	case errors.Is(err, storage.ErrNotTerminal):
		return &pageError{Status: http.StatusConflict, Title: "Cannot replay yet",
			Message: "The " + what + " is pending or processing; only delivered or failed deliveries can be replayed.",
			Advice:  "Wait until it finishes, then replay it if it failed.", cause: err}
	case errors.Is(err, storage.ErrDeleted):
		return &pageError{Status: http.StatusGone, Title: "Endpoint deleted",
			Message: "The " + what + " is about an endpoint that was deleted: it takes no change, no replay and no new delivery.",
			Advice:  "Its deliveries and their attempts stay readable in the deliveries list.", Link: Prefix + "/deliveries", LinkText: "Deliveries", cause: err}
	case errors.Is(err, storage.ErrConflict):
		return &pageError{Status: http.StatusConflict, Title: "Changed by someone else",
			Message: "The " + what + " was changed by another request at the same moment, so this change was not saved.",
			Advice:  "Reload the page to see its state now, and try again.", cause: err}
	case errors.Is(err, storage.ErrInvalid):
		return &pageError{Status: http.StatusBadRequest, Title: "Refused by the delivery store",
			Message: "The request breaks a rule of the delivery store for the " + what + ".",
			Advice:  "Check the values you entered and try again.", cause: err}
	case errors.Is(err, storage.ErrUnavailable):
		return &pageError{Status: http.StatusServiceUnavailable, Title: "The database cannot be reached",
			Message: "The server cannot reach its database just now (it is stopped, restarting or cut off), so nothing was read or changed.",
			Advice:  "Try again in a few seconds. If it persists, bring the database back: /readyz says it is unreachable until then.",
			cause:   err, retryAfter: awayRetryAfter}
	case errors.Is(err, storage.ErrNoSpace):
		return &pageError{Status: http.StatusServiceUnavailable, Title: "The database is out of space",
			Message: "The server's database has no room left, so nothing of this change was saved.",
			Advice:  "Free space on the database's volume or grow the volume, then try again.", cause: err, retryAfter: "30"}
	case errors.Is(err, storage.ErrResources):
		return &pageError{Status: http.StatusServiceUnavailable, Title: "The database is short of resources",
			Message: "The server's database is short of memory or connections, or another process holds its write lock, so nothing of this change was saved.",
			Advice:  "Try again in a few seconds.", cause: err, retryAfter: awayRetryAfter}
	case errors.Is(err, context.DeadlineExceeded):
		return &pageError{Status: http.StatusServiceUnavailable, Title: "The database did not answer in time",
			Message: "The database took too long to answer.", Advice: "Try again in a moment.", cause: err, retryAfter: awayRetryAfter}
	}
	return errInternal(err)
}

// fail shows err as an error page, logging what the operator does not see.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, a authResult, err error) {
	pe := storeError(err, "item")
	switch {
	case r.Context().Err() != nil:
		h.log.Debug("console request abandoned by the client", "method", r.Method, "path", r.URL.Path)
	case pe.Status >= 500:
		h.log.Error("console request failed", "method", r.Method, "path", r.URL.Path, "status", pe.Status, "error", pe.cause)
	default:
		h.log.Debug("console request refused", "method", r.Method, "path", r.URL.Path, "status", pe.Status, "message", pe.Message)
	}
	h.renderError(w, r, a, pe)
}

type errorData struct {
	base
	Error *pageError
}

// renderError shows pe. a is who made the request, when the caller knows;
// otherwise the navigation is shown if the request carries a valid login.
func (h *handler) renderError(w http.ResponseWriter, r *http.Request, a authResult, pe *pageError) {
	if h.portal != nil {
		// The shared errors link into the console; the portal has no
		// login and no overview, and its pages live under its own prefix.
		switch {
		case pe.Link == Prefix+"/" || pe.Link == Prefix+"/login":
			pe.Link, pe.LinkText = "", ""
		case strings.HasPrefix(pe.Link, Prefix+"/"):
			pe.Link = h.prefix + strings.TrimPrefix(pe.Link, Prefix)
		}
	} else if pe.Status == http.StatusUnauthorized && pe.Link == "" {
		pe.Link, pe.LinkText = Prefix+"/login", "Log in"
	}
	if pe.retryAfter != "" {
		w.Header().Set("Retry-After", pe.retryAfter)
	}
	// Who is asking decides whether the page shows the navigation. The
	// refusals of credentials already looked at them: asking again would
	// count a wrong token twice.
	if a.session == nil && !a.bearer && pe.Status != http.StatusUnauthorized && pe.Status != http.StatusTooManyRequests {
		if who, perr := h.authenticate(r); perr == nil {
			a = who
		}
	}
	h.render(w, pe.Status, "error", errorData{base: h.base(a, "", pe.Title), Error: pe})
}
