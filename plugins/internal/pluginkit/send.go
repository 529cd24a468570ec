package pluginkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
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
// resolving names with r (nil: net.DefaultResolver) for at most timeout in
// all. It returns the guard's first refusal, or nil: a name that does not
// resolve now is left to the dial, whose guarded dialer checks every
// address it connects to. A refusal is a *netguard.RefusedError, wrapped
// in a *NameRefusedError when a DNS answer gave the address (see
// NameRefusal).
func CheckAddrs(ctx context.Context, guard *netguard.Guard, r netguard.Resolver, timeout time.Duration, addrs ...string) error {
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, addr := range addrs {
		err := guard.ValidateHostPort(ctx, r, addr)
		var refused *netguard.RefusedError
		if errors.As(err, &refused) {
			return NameRefusal(err, addr)
		}
	}
	return nil
}

// NameRefusedError is the guard's refusal of an address that a DNS answer
// for Name gave. The next answer may differ (a resolver's mistake, a
// rebinding attempt that passes), so, unlike a refused literal address, it
// does not fail the delivery for good.
type NameRefusedError struct {
	Name    string
	Refused *netguard.RefusedError
}

func (e *NameRefusedError) Error() string {
	return fmt.Sprintf("%s resolved to an address this plugin will not connect to: %v; a DNS answer can change, so the delivery is tried again", e.Name, e.Refused)
}

func (e *NameRefusedError) Unwrap() error { return e.Refused }

// NameRefusal wraps err in a *NameRefusedError when it holds a guard
// refusal and hostport (host:port, or a bare host) names its host by a
// name rather than a literal address; otherwise it returns err as it is.
// localhost and its subdomains count as literal: they lead to this host
// whatever a resolver says. Dialers call it with the address they were
// asked to dial, which still carries the name.
func NameRefusal(err error, hostport string) error {
	var refused *netguard.RefusedError
	// Only an address the table refused can have come from a DNS answer:
	// a unix socket path, or an address the guard could not read, cannot.
	if err == nil || !errors.As(err, &refused) || !refused.Range.Prefix.IsValid() {
		return err
	}
	host := hostport
	if h, _, serr := net.SplitHostPort(hostport); serr == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, perr := netip.ParseAddr(host); perr == nil {
		return err
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" || h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return err
	}
	return &NameRefusedError{Name: host, Refused: refused}
}

// GuardOutcome is the outcome of a send the SSRF guard refused before any
// connection was made, and whether err is such a refusal. Nothing was
// sent either way. A refused literal address is refused on every try
// until the operator changes a setting or the URL, so the delivery fails
// (transport.Refused); an address a DNS answer gave is tried again after a
// short wait without using up the retries (transport.Deferred), as the
// http plugin does.
func GuardOutcome(err error) (transport.Outcome, bool) {
	var named *NameRefusedError
	if errors.As(err, &named) {
		return transport.Deferred(named.Error()), true
	}
	var refused *netguard.RefusedError
	if errors.As(err, &refused) {
		return transport.Refused(refused.Error()), true
	}
	return transport.Outcome{}, false
}
