package redistransport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// failure is what classify knows about an XADD besides its error.
type failure struct {
	stream string
	// server names the server without credentials.
	server string
	// waited is how long the XADD waited before it failed.
	waited time.Duration
}

// permanentPrefixes are the server's answers no retry can change until an
// operator does something, with what to do.
var permanentPrefixes = []struct{ prefix, hint string }{
	{"WRONGTYPE", "the key holds a value that is not a stream; delete or rename that key, or give the endpoint another stream"},
	{"NOAUTH", "the server requires a password and the endpoint's url gives none; write it as redis://:password@host:port/db"},
	{"WRONGPASS", "the user name or password in the endpoint's url is wrong; fix the url"},
	{"AUTH", "the endpoint's url gives a password the server does not expect; remove it or set one on the server"},
	{"NOPERM", "the server's ACL does not let this user XADD to the key; grant +xadd on it"},
	{"DB index is out of range", "the database number in the endpoint's url does not exist on the server; use one below its databases setting"},
	{"invalid DB index", "the database number in the endpoint's url does not exist on the server"},
	{"unknown command", "the server does not support streams; Redis 5.0 or newer is needed"},
	{"MOVED", "the server is a Redis Cluster node, which this transport does not support; point the url at a standalone server"},
	{"ASK", "the server is a Redis Cluster node, which this transport does not support; point the url at a standalone server"},
}

// classify decides what a failed XADD means for the delivery, in one place.
func classify(err error, f failure) transport.Outcome {
	var refused *netguard.RefusedError
	if errors.As(err, &refused) {
		// The guard refused the dial: nothing reached the server.
		// A literal address fails the delivery; a DNS answer is tried
		// again, since the next answer may differ.
		out, _ := pluginkit.GuardOutcome(err)
		return out
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		text := strings.TrimSpace(rerr.Error())
		for _, p := range permanentPrefixes {
			if redis.HasErrorPrefix(err, p.prefix) {
				return transport.Permanent(0, fmt.Sprintf("Redis at %s refused the XADD to %q: %s; %s", f.server, f.stream, text, p.hint))
			}
		}
		// LOADING, BUSY, OOM, READONLY, MASTERDOWN, TRYAGAIN, max clients
		// and anything unknown: the server answered, and may answer
		// differently later. Keeping the message is what at-least-once
		// asks for when in doubt.
		return transport.Retryable(0, fmt.Sprintf("Redis at %s refused the XADD to %q for now: %s", f.server, f.stream, text))
	}
	if redis.IsAuthError(err) {
		return transport.Permanent(0, fmt.Sprintf("Redis at %s refused the credentials: %v; fix the endpoint's url", f.server, err))
	}
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return transport.Retryable(0, fmt.Sprintf("no reply from Redis at %s within %s: %v", f.server, f.waited.Round(time.Millisecond), err))
	case errors.Is(err, context.Canceled):
		return transport.Retryable(0, fmt.Sprintf("XADD to %q on %s abandoned: the attempt was cancelled", f.stream, f.server))
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return transport.Retryable(0, fmt.Sprintf("every connection to Redis at %s is busy (%v); raise the plugin's pool_size if this persists", f.server, err))
	case errors.Is(err, redis.ErrClosed):
		return transport.Retryable(0, "the redis transport is shutting down")
	}
	return transport.Retryable(0, fmt.Sprintf("could not reach Redis at %s: %v", f.server, err))
}
