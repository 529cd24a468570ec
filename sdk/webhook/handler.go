package webhook

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// EventSubmissionReceived is the type of the event every form submission
// produces.
const EventSubmissionReceived = "submission.received"

// DefaultMaxBodyBytes is the largest request body a Handler reads unless
// told otherwise.
const DefaultMaxBodyBytes = 1 << 20

// Event is one verified delivery of a submission.received event.
type Event struct {
	// Type is EventSubmissionReceived.
	Type       string     `json:"type"`
	Submission Submission `json:"submission"`

	// MessageID is the webhook-id header: the delivery's id, the same on
	// every attempt of one delivery but different for each endpoint. Dedupe
	// on Submission.ID, not on this.
	MessageID string `json:"-"`
	// Timestamp is the webhook-timestamp header: when this attempt was
	// signed. It changes on every attempt.
	Timestamp time.Time `json:"-"`
	// Raw is the request body exactly as it was verified, for fields this
	// struct does not name and for storing the event as it came.
	Raw []byte `json:"-"`
}

// Submission is the submission an Event carries.
type Submission struct {
	// ID is stable across every attempt and replay: the dedupe key.
	ID     string `json:"id"`
	FormID string `json:"form_id"`
	// Data is the submitted form, a JSON object, as it was sent.
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

// HandlerFunc does a receiver's work for one submission. Returning an error
// makes the Handler answer 500, which the sender retries; the submission is
// then not recorded as processed.
type HandlerFunc func(ctx context.Context, ev Event) error

// TxHandlerFunc is a HandlerFunc that does its work through the transaction
// that records the submission as processed, so both commit together.
type TxHandlerFunc func(ctx context.Context, tx *sql.Tx, ev Event) error

// HandlerOption configures a Handler.
type HandlerOption func(*Handler)

// WithMaxBodyBytes sets the largest body the Handler reads; a larger one is
// refused with 413. It must be positive; the default is
// DefaultMaxBodyBytes.
func WithMaxBodyBytes(n int64) HandlerOption { return func(h *Handler) { h.maxBody = n } }

// WithLogger sets where the Handler logs refusals and failures. It logs ids
// and reasons, never the body, the headers or the handler's error detail in
// a response. nil, the default, means slog.Default().
func WithLogger(l *slog.Logger) HandlerOption { return func(h *Handler) { h.log = l } }

// Handler is the http.Handler for a webhook receiver. For each request it:
//
//  1. reads the body, at most the limit (413 beyond it);
//  2. verifies the signature over the raw bytes (401, with a short reason,
//     on failure);
//  3. decodes the event (400 when it is not a submission event with an id;
//     an event of another type is acknowledged with 204 and not handled, so
//     a receiver that predates a new type does not make it retry forever);
//  4. deduplicates on submission.id: a submission already processed is
//     answered 200 without running the handler again, which is what stops
//     the sender retrying;
//  5. runs the handler, answering 204 when it succeeds and 500 when it
//     fails, in which case the id is not recorded and the sender retries.
//
// Responses say what class of problem it was and nothing more: never a
// secret, an expected signature or the handler's error text.
type Handler struct {
	verifier *Verifier
	process  func(ctx context.Context, ev Event) (duplicate bool, err error)
	maxBody  int64
	log      *slog.Logger
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler that verifies with v, dedupes with d and
// hands each new submission to fn.
func NewHandler(v *Verifier, d Deduper, fn HandlerFunc, opts ...HandlerOption) (*Handler, error) {
	if d == nil {
		return nil, errors.New("webhook: handler: the deduper is nil; use a SQLDeduper, or NewMemoryDeduper in tests")
	}
	if fn == nil {
		return nil, errors.New("webhook: handler: the handler func is nil")
	}
	return newHandler(v, func(ctx context.Context, ev Event) (bool, error) {
		return d.Process(ctx, ev.Submission.ID, func(ctx context.Context) error { return fn(ctx, ev) })
	}, opts)
}

// NewTxHandler is NewHandler for work in the deduper's database: fn gets
// the transaction that records the submission, and its writes commit with
// that record or not at all.
func NewTxHandler(v *Verifier, d *SQLDeduper, fn TxHandlerFunc, opts ...HandlerOption) (*Handler, error) {
	if d == nil {
		return nil, errors.New("webhook: handler: the SQL deduper is nil")
	}
	if fn == nil {
		return nil, errors.New("webhook: handler: the handler func is nil")
	}
	return newHandler(v, func(ctx context.Context, ev Event) (bool, error) {
		return d.ProcessTx(ctx, ev.Submission.ID, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx, ev) })
	}, opts)
}

func newHandler(v *Verifier, process func(context.Context, Event) (bool, error), opts []HandlerOption) (*Handler, error) {
	if v == nil {
		return nil, errors.New("webhook: handler: the verifier is nil; build one with NewVerifier and the endpoint's secret")
	}
	h := &Handler{verifier: v, process: process, maxBody: DefaultMaxBodyBytes}
	for _, o := range opts {
		o(h)
	}
	if h.maxBody <= 0 {
		return nil, fmt.Errorf("webhook: handler: max body size must be positive, got %d", h.maxBody)
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, "webhooks are POSTed")
		return
	}
	log := h.log.With("webhook_id", clipLog(firstHeader(r.Header, HeaderID)))

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			log.Warn("webhook refused: body too large", "limit_bytes", h.maxBody)
			reply(w, http.StatusRequestEntityTooLarge, "body larger than "+strconv.FormatInt(h.maxBody, 10)+" bytes")
			return
		}
		log.Warn("webhook refused: reading the body failed", "error", err)
		reply(w, http.StatusBadRequest, "could not read the body")
		return
	}

	if err := h.verifier.Verify(r.Header, body); err != nil {
		// Verify's errors are safe to log: they never hold a secret or an
		// expected signature. The response is shorter still.
		log.Warn("webhook refused: verification failed", "error", err)
		reply(w, http.StatusUnauthorized, verifyReason(err))
		return
	}

	ev, err := decodeEvent(r.Header, body)
	if errors.Is(err, errOtherType) {
		log.Info("webhook acknowledged without handling: not a submission event", "type", clipLog(ev.Type))
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err != nil {
		log.Warn("webhook refused: not a submission event", "error", err)
		reply(w, http.StatusBadRequest, err.Error())
		return
	}
	log = log.With("submission_id", ev.Submission.ID)

	duplicate, err := h.process(r.Context(), ev)
	switch {
	case err != nil && r.Context().Err() != nil:
		log.Warn("webhook not processed: the request ended first; the sender will retry", "error", err)
		reply(w, http.StatusServiceUnavailable, "request ended before the submission was processed")
	case err != nil:
		log.Error("webhook handler failed; the submission is not recorded and the sender will retry", "error", err)
		reply(w, http.StatusInternalServerError, "the submission could not be processed; it will be retried")
	case duplicate:
		log.Info("webhook acknowledged: submission already processed")
		reply(w, http.StatusOK, "already processed")
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

var errOtherType = errors.New("not a submission event")

// clipLog bounds request-supplied text before it goes into a log line:
// long enough for any real id, short enough that nobody fills a log.
func clipLog(s string) string {
	const limit = 128
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}

// decodeEvent reads a verified body. Its errors are meant for the sender and
// say only what is wrong with the shape.
func decodeEvent(header http.Header, body []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return ev, errors.New("body is not a JSON event")
	}
	if ev.Type != EventSubmissionReceived {
		return ev, errOtherType
	}
	if err := checkID(ev.Submission.ID); err != nil {
		return ev, errors.New("submission.id is missing or too long")
	}
	ev.MessageID = firstHeader(header, HeaderID)
	// Verify accepted the header, so it parses.
	ev.Timestamp, _ = parseUnix(firstHeader(header, HeaderTimestamp))
	ev.Raw = body
	return ev, nil
}

// verifyReason is the short, fixed text a sender gets for a failed
// verification.
func verifyReason(err error) string {
	var missing *MissingHeaderError
	switch {
	case errors.As(err, &missing):
		return "missing " + missing.Header + " header"
	case errors.Is(err, ErrMalformedTimestamp):
		return "malformed " + HeaderTimestamp + " header"
	case errors.Is(err, ErrTimestampTooOld), errors.Is(err, ErrTimestampTooNew):
		return HeaderTimestamp + " is outside the tolerance; check the clocks"
	default:
		return "no matching signature"
	}
}

func reply(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, text+"\n")
}
