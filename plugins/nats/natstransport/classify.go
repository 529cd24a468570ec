package natstransport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// failure is what classify knows about a publish besides its error.
type failure struct {
	subject string
	// servers names the servers without credentials.
	servers string
	// lastErr is the connection's newest error of its own, if any.
	lastErr string
	// waited is how long the publish waited before it failed.
	waited time.Duration
	// connected is whether the connection was up after the failure; some
	// client errors mean something else while it is down.
	connected bool
}

// errNotConnected is a publish not tried because the connection is down.
var errNotConnected = errors.New("the connection is down")

// classify decides what a failed publish means for the delivery, in one
// place. cause is the publish context's cause, which carries a
// *PermissionError when the server refused the subject.
func classify(err, cause error, f failure) transport.Outcome {
	var perr *PermissionError
	var apiErr *jetstream.APIError
	var refused *netguard.RefusedError
	switch {
	case errors.As(err, &refused):
		// The guard refused the server before any connection was made.
		// A literal address fails the delivery; a DNS answer is tried
		// again, since the next answer may differ.
		out, _ := pluginkit.GuardOutcome(err)
		return out
	case errors.As(cause, &perr), errors.As(err, &perr):
		return transport.Permanent(0, perr.Error())
	case errors.Is(err, nats.ErrPermissionViolation):
		return transport.Permanent(0, fmt.Sprintf("the NATS server refused the publish to %q: %v; grant the plugin's user publish permission on the subject", f.subject, err))
	case errors.Is(err, ErrInvalidSubject), errors.Is(err, ErrInvalidHeader):
		return transport.Permanent(0, err.Error())
	case errors.Is(err, nats.ErrBadSubject):
		return transport.Permanent(0, fmt.Sprintf("%v: the client refused subject %q; change the endpoint's subject", ErrInvalidSubject, f.subject))
	case errors.Is(err, nats.ErrMaxPayload):
		return transport.Permanent(0, fmt.Sprintf("the message is larger than the max_payload of %s; raise max_payload on the server", f.servers))
	case errors.Is(err, nats.ErrHeadersNotSupported) && f.connected:
		return transport.Permanent(0, fmt.Sprintf("%s does not support message headers, which JetStream publishing needs; upgrade the server to NATS 2.2 or newer", f.servers))
	case errors.As(err, &apiErr):
		return classifyAPIError(apiErr, f)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return transport.Retryable(0, fmt.Sprintf("no JetStream stream on %s captures subject %q (no responders); create a stream whose subjects include it, or check that JetStream is enabled%s",
			f.servers, f.subject, f.last()))
	case errors.Is(err, errClosed):
		// Close ran before the publish was tried: nothing went out.
		return transport.Deferred(errClosed.Error())
	case errors.Is(err, errNotConnected), errors.Is(err, nats.ErrHeadersNotSupported),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrDisconnected):
		return transport.Retryable(0, fmt.Sprintf("not connected to %s (%v); the plugin keeps reconnecting%s", f.servers, err, f.last()))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return transport.Retryable(0, fmt.Sprintf("no publish ack from JetStream on %s for subject %q within %s%s",
			f.servers, f.subject, f.waited.Round(time.Millisecond), f.last()))
	case errors.Is(err, context.Canceled):
		return transport.Retryable(0, fmt.Sprintf("publish to %q on %s abandoned: the attempt was cancelled", f.subject, f.servers))
	}
	return transport.Retryable(0, fmt.Sprintf("publishing to %q on %s failed: %v%s", f.subject, f.servers, err, f.last()))
}

// classifyAPIError reads JetStream's own refusal of a message. Only what
// no retry can change is permanent: a message over the stream's size limit.
// Limits that fill and empty (storage, message counts), a stream being
// moved or JetStream being switched off are retryable, so the message is
// kept until the operator has room for it.
func classifyAPIError(e *jetstream.APIError, f failure) transport.Outcome {
	what := fmt.Sprintf("JetStream on %s refused the message for subject %q: %s (error code %d)", f.servers, f.subject, e.Description, e.ErrorCode)
	if e.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return transport.Permanent(0, what+"; raise the stream's max_msg_size")
	}
	return transport.Retryable(0, what)
}

func (f failure) last() string {
	if f.lastErr == "" {
		return ""
	}
	return "; the server last reported: " + f.lastErr
}
