package transport

import (
	"context"
	"errors"
	"time"

	"github.com/hymical/hymical/sdk/boundtext"
)

// Transport is what a plugin implements. The host calls Configure once after
// every launch and before anything else; Validate and Send may then be
// called concurrently from many goroutines.
type Transport interface {
	// Configure receives the plugin-wide settings from the operator's
	// config. A returned error stops the host from using the plugin, so it
	// should say which setting is wrong and what it should be.
	Configure(ctx context.Context, settings Settings) error
	// Validate checks one endpoint's configuration when it is created, so an
	// endpoint the plugin could never send to is refused then, not at its
	// first send. The error is shown to whoever created the endpoint.
	Validate(ctx context.Context, endpoint Endpoint) error
	// Send performs one attempt and reports its outcome. It must return by
	// ctx's deadline (also in Message.Deadline); a plugin that does not is
	// killed and restarted by the host, and the attempt counts as
	// retryable.
	Send(ctx context.Context, msg Message) Outcome
}

// Settings are the plugin-wide settings from the operator's config.
type Settings map[string]string

// Endpoint is where one message goes.
type Endpoint struct {
	// URL is the target for URL-shaped transports; others may leave it
	// empty and read Config.
	URL string
	// Config is the endpoint's transport-specific settings.
	Config map[string]string
}

// Header is one header to carry. Names may repeat; order is kept.
type Header struct {
	Name  string
	Value string
}

// Message is one attempt to send.
type Message struct {
	// DeliveryID is stable across every attempt and replay of a delivery.
	DeliveryID string
	// Attempt is the lifetime attempt number of this request, from 1.
	Attempt  int
	Endpoint Endpoint
	// Headers are carried exactly as given. They include the signature, so
	// they must never be logged or put into error text.
	Headers []Header
	// Body is the exact signed payload.
	Body []byte
	// Deadline is when the host stops waiting; the plugin's context carries
	// the same deadline. Zero means none.
	Deadline time.Time
}

// OutcomeKind is what an attempt produced. Its values are the words the
// attempt history uses: the server's storage declares the same kinds (it
// may not import the plugin contract), and a test in server/worker holds
// the two equal.
type OutcomeKind string

const (
	// OutcomeDelivered: the receiver accepted the message.
	OutcomeDelivered OutcomeKind = "delivered"
	// OutcomeRetryable: the attempt failed in a way another try may fix.
	OutcomeRetryable OutcomeKind = "retryable"
	// OutcomePermanent: the attempt failed in a way no retry will fix.
	OutcomePermanent OutcomeKind = "permanent"
)

// Valid reports whether k is one of the three kinds.
func (k OutcomeKind) Valid() bool {
	switch k {
	case OutcomeDelivered, OutcomeRetryable, OutcomePermanent:
		return true
	}
	return false
}

// Outcome is what one attempt produced.
type Outcome struct {
	Kind OutcomeKind
	// StatusCode is the receiver's protocol status (HTTP for the http
	// transport); 0 means there was none.
	StatusCode int
	// Error says what went wrong, for the attempt history. It is cut to
	// MaxErrorBytes on both sides of the boundary and must never contain
	// request headers, the body or the receiver's response body.
	Error string
	// RetryAfter is the receiver's own hint of when to try again; 0 means
	// it gave none.
	RetryAfter time.Duration
	// NoRequest says that no request went out: the plugin refused before
	// sending anything toward the receiver, because of a decision of its
	// own (its guard refused the target, the endpoint's config is
	// unusable, it is shutting down). The server then records no attempt
	// and spends none of the retry allowance: a permanent outcome fails the
	// delivery with Error as its reason, a retryable one is tried again
	// after a short wait, for as long as the plugin keeps saying so. Leave
	// it false whenever a request may have gone out, a connection attempt
	// to the receiver included: false is always safe, since the history may
	// over-count requests but must never under-count them. It is ignored on
	// a delivered outcome.
	NoRequest bool
}

// Delivered is the outcome of an accepted message.
func Delivered(status int) Outcome {
	return Outcome{Kind: OutcomeDelivered, StatusCode: status}
}

// Retryable is the outcome of an attempt another try may fix.
func Retryable(status int, reason string) Outcome {
	return Outcome{Kind: OutcomeRetryable, StatusCode: status, Error: BoundError(reason)}
}

// Permanent is the outcome of an attempt no retry will fix.
func Permanent(status int, reason string) Outcome {
	return Outcome{Kind: OutcomePermanent, StatusCode: status, Error: BoundError(reason)}
}

// Refused is the outcome of a send the plugin refused before any request
// went out, which no retry will fix: its guard refused the target, or the
// endpoint's config is unusable. The delivery fails with reason, and no
// attempt is recorded.
func Refused(reason string) Outcome {
	return Outcome{Kind: OutcomePermanent, Error: BoundError(reason), NoRequest: true}
}

// Deferred is the outcome of a send the plugin did not make, for a reason
// of its own that passes (it is shutting down): no request went out, no
// attempt is recorded, and the delivery is tried again after a short wait.
// A receiver that cannot be reached is not such a reason: that is a
// Retryable attempt, which the retry allowance bounds.
func Deferred(reason string) Outcome {
	return Outcome{Kind: OutcomeRetryable, Error: BoundError(reason), NoRequest: true}
}

// MaxErrorBytes bounds every error text that crosses the plugin boundary.
// It matches what the attempt history stores (storage.MaxErrorBytes, held
// equal by the same test).
const MaxErrorBytes = 1024

// BoundError makes error text safe to carry and store: valid UTF-8, no NUL
// bytes, and at most MaxErrorBytes, cut on a rune boundary.
func BoundError(s string) string { return boundtext.Bound(s, MaxErrorBytes) }

// Errors from the host side of a call. Check them with errors.Is.
var (
	// ErrRejected: the plugin answered and refused the settings or the
	// endpoint; the wrapped text says why.
	ErrRejected = errors.New("refused by the transport plugin")
	// ErrUnavailable: the call did not complete: the plugin crashed, did not
	// answer in time, or the connection to it was lost.
	ErrUnavailable = errors.New("transport plugin did not answer")
	// ErrNotSent is wrapped with ErrUnavailable when the host knows the
	// request never left it, so the plugin cannot have acted on it: under
	// protocol 2, the stream had broken before the send was queued, or a
	// new one could not be opened. Without it, a failed call may have
	// reached the plugin.
	ErrNotSent = errors.New("the request never left the host")
)
