package pluginkit

import (
	"context"
	"errors"
	"net"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// AttemptContext bounds ctx by the attempt's deadline, or by limit from
// now when that is sooner or the attempt has none. Waiting for a broker's
// answer must end at the attempt's deadline, not at the host's (which is
// later by a grace), so the answer is back in time.
func AttemptContext(ctx context.Context, deadline time.Time, limit time.Duration) (context.Context, context.CancelFunc) {
	d := time.Now().Add(limit)
	if !deadline.IsZero() && deadline.Before(d) {
		d = deadline
	}
	return context.WithDeadline(ctx, d)
}

// EndPublish ends the span transport.StartPublish started, marking it
// failed with the outcome's error unless the message was delivered. Defer
// it with a pointer to Send's named result:
//
//	defer pluginkit.EndPublish(span, &out)
func EndPublish(span trace.Span, out *transport.Outcome) {
	if out.Kind != transport.OutcomeDelivered {
		span.SetStatus(codes.Error, out.Error)
	}
	span.End()
}

// CheckAddrs asks guard about each host:port before a connection is made,
// resolving names for at most timeout in all. It returns the guard's first
// refusal (a *netguard.RefusedError), or nil: a name that does not resolve
// now is left to the dial, whose guarded dialer checks every address it
// connects to.
func CheckAddrs(ctx context.Context, guard *netguard.Guard, timeout time.Duration, addrs ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, addr := range addrs {
		err := guard.ValidateHostPort(ctx, net.DefaultResolver, addr)
		var refused *netguard.RefusedError
		if errors.As(err, &refused) {
			return err
		}
	}
	return nil
}
