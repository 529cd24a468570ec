package amqptransport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// failure is what classify knows about a publish besides its error.
type failure struct {
	destination, routingKey string
	// server names the broker without credentials.
	server string
	// waited is how long the publish waited before it failed.
	waited time.Duration
}

// verdict is what one AMQP reply code means for a delivery.
type verdict struct {
	permanent bool
	hint      string
}

// replyCodes reads the broker's reply codes (AMQP 0-9-1 §1.2, as RabbitMQ
// uses them), whether they close the channel, the connection, or came back
// with a returned message. Only what no retry can change until an operator
// acts is permanent; a code not listed is retryable, since keeping the
// message is what at-least-once asks for when in doubt.
var replyCodes = map[int]verdict{
	amqp.ContentTooLarge: {true, "the message is larger than the broker accepts; raise its max_message_size"},
	// Unroutable is retryable: no queue matches now, but one often will
	// soon. A restarted broker answers before it has recovered its
	// durable queues and bindings (TestBrokerAwayAndBack saw it for a
	// durable, bound queue), and consumers commonly declare their own
	// queue when they start. Counted permanent, every delivery sent in
	// such a moment would fail until an operator replayed it; retried, a
	// binding that never comes fails the delivery once its retry
	// allowance is spent, with this hint in every attempt.
	amqp.NoRoute:          {false, "no queue is bound to the exchange with a matching routing key; bind a queue (or give the exchange an alternate-exchange), and the delivery goes on its next retry"},
	amqp.NoConsumers:      {false, ""},
	amqp.ConnectionForced: {false, "the broker or an operator closed the connection (a restart, or rabbitmqctl close_connection)"},
	amqp.InvalidPath:      {true, "the virtual host in the url does not exist; create it or fix the url"},
	amqp.AccessRefused:    {true, "the user in the url may not do this; grant it write permission on the exchange (rabbitmqctl set_permissions) or fix the credentials"},
	// An exchange that does not exist is the operator's to declare: the
	// broker's answer is definite (unlike JetStream's "no responders",
	// which a stream between leaders also gives), so it is permanent, and
	// the delivery is replayed once the exchange exists.
	amqp.NotFound:           {true, "the exchange does not exist on the broker; declare it, then replay the delivery"},
	amqp.ResourceLocked:     {false, ""},
	amqp.PreconditionFailed: {true, "the broker refused the message as it stands (a size or argument limit); see its text"},
	amqp.FrameError:         {false, ""},
	// The broker could not parse what the client sent: the same message
	// would be refused again.
	amqp.SyntaxError:     {true, "the broker could not parse the message; report this with the broker's text"},
	amqp.CommandInvalid:  {false, ""},
	amqp.ChannelError:    {false, ""},
	amqp.UnexpectedFrame: {false, ""},
	amqp.ResourceError:   {false, "the broker is short of a resource (channels, memory); it may take the message later"},
	// RabbitMQ says NOT_ALLOWED for a virtual host the user may not open
	// or that does not exist, and for a reached connection limit, which
	// passes; the latter is told apart by its text.
	amqp.NotAllowed:     {true, "the user may not open the virtual host in the url, or it does not exist; grant access (rabbitmqctl set_permissions -p) or fix the url"},
	amqp.NotImplemented: {true, "the broker does not implement what the plugin asked; it needs publisher confirms (RabbitMQ does)"},
	amqp.InternalError:  {false, ""},
}

// classify decides what a failed publish means for the delivery, in one
// place.
func classify(err error, f failure) transport.Outcome {
	var refused *netguard.RefusedError
	var returned *ReturnedError
	var aerr *amqp.Error
	var netErr net.Error
	where := fmt.Sprintf("exchange %q with routing key %q on %s", f.destination, f.routingKey, f.server)
	switch {
	case errors.As(err, &refused):
		// The guard refused the dial: nothing reached the broker.
		// A literal address fails the delivery; a DNS answer is tried
		// again, since the next answer may differ.
		out, _ := pluginkit.GuardOutcome(err)
		return out
	case errors.Is(err, errClosed):
		return transport.Deferred(errClosed.Error())
	case errors.As(err, &returned):
		return fromCode(int(returned.Code), fmt.Sprintf("publishing to %s: %v", where, returned))
	case errors.Is(err, errNacked):
		// RabbitMQ nacks what a queue refused (reject-publish overflow) or
		// what it failed to store: both may pass.
		return transport.Retryable(0, fmt.Sprintf("publishing to %s: %v (a full queue with overflow reject-publish, or a broker error); it may take the message later", where, err))
	case errors.Is(err, errBlocked):
		return transport.Retryable(0, fmt.Sprintf("publishing to %s: %v; it resumes once the alarm clears", where, err))
	case errors.Is(err, errNotConnected):
		// The connection is down: its last error says why. A refusal of
		// the credentials or the virtual host is as permanent here as in
		// a reply; anything else is the broker being away.
		switch {
		case errors.Is(err, amqp.ErrCredentials):
			return transport.Permanent(0, fmt.Sprintf("%s refused the user name or password in the url (403 ACCESS_REFUSED); fix the credentials", f.server))
		case errors.Is(err, amqp.ErrSASL):
			return transport.Permanent(0, fmt.Sprintf("%s offers no authentication mechanism the plugin speaks (PLAIN or AMQPLAIN)", f.server))
		case errors.Is(err, amqp.ErrVhost):
			return transport.Permanent(0, fmt.Sprintf("%s refused the virtual host in the url; grant the user access to it (rabbitmqctl set_permissions -p) or fix the url", f.server))
		case errors.As(err, &aerr) && aerr.Server:
			return fromCode(aerr.Code, fmt.Sprintf("not connected to %s: the broker said %d %s", f.server, aerr.Code, aerr.Reason))
		}
		return transport.Retryable(0, fmt.Sprintf("%v; the plugin keeps reconnecting to %s", err, f.server))
	case errors.Is(err, amqp.ErrClosed):
		// Before the check for *amqp.Error: the client's own "not open"
		// carries a channel-error code no broker sent.
		return transport.Retryable(0, fmt.Sprintf("publishing to %s: the connection or channel closed under the publish; the plugin reconnects by itself", where))
	case errors.As(err, &aerr) && !aerr.Server:
		// The client reports a failed read or write as an *amqp.Error of
		// its own: the connection broke, the broker said nothing.
		return transport.Retryable(0, fmt.Sprintf("publishing to %s: the connection failed under the publish (%s); the plugin reconnects by itself", where, aerr.Reason))
	case errors.As(err, &aerr):
		return fromCode(aerr.Code, fmt.Sprintf("publishing to %s: the broker said %d %s", where, aerr.Code, aerr.Reason))
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return transport.Retryable(0, fmt.Sprintf("no publisher confirm from %s within %s", where, f.waited.Round(time.Millisecond)))
	case errors.Is(err, context.Canceled):
		return transport.Retryable(0, fmt.Sprintf("publishing to %s abandoned: the attempt was cancelled", where))
	}
	return transport.Retryable(0, fmt.Sprintf("publishing to %s failed: %v", where, err))
}

// fromCode applies replyCodes to what happened.
func fromCode(code int, what string) transport.Outcome {
	v, known := replyCodes[code]
	if known && v.permanent && code == amqp.NotAllowed && strings.Contains(strings.ToLower(what), "limit") {
		// "connection limit (n) is reached": it passes.
		v = verdict{false, "a connection limit of the user or virtual host is reached"}
	}
	if v.hint != "" {
		what += "; " + v.hint
	}
	if known && v.permanent {
		return transport.Permanent(0, what)
	}
	return transport.Retryable(0, what)
}
