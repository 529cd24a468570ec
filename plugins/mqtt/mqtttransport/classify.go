package mqtttransport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// failure is what classify knows about a publish besides its error.
type failure struct {
	topic string
	// server names the broker without credentials.
	server string
	// waited is how long the publish waited before it failed.
	waited time.Duration
}

// verdict is what one CONNACK return code means for a delivery.
type verdict struct {
	permanent bool
	hint      string
}

// connackCodes reads the broker's refusals of a CONNECT (MQTT 3.1.1
// §3.2.2.3). Only what no retry can change until an operator acts is
// permanent.
var connackCodes = map[byte]verdict{
	packets.ErrRefusedBadProtocolVersion: {true, "the broker does not speak MQTT 3.1.1; upgrade it or enable the protocol"},
	// The plugin draws a fresh identifier of its own on each dial, so a
	// refusal is the broker's policy (a required prefix), not chance.
	packets.ErrRefusedIDRejected:        {true, "the broker refused the plugin's client identifier (hymical-<random>); allow that prefix in the broker's configuration"},
	packets.ErrRefusedServerUnavailable: {false, "the broker is unavailable for now"},
	packets.ErrRefusedBadUsernameOrPassword: {true, "the broker refused the user name or password; fix the mqtt plugin's " +
		SettingUsername + " and " + SettingPassword + " settings"},
	packets.ErrRefusedNotAuthorised: {true, "the broker refused to let the plugin connect (wrong user name or password, or anonymous clients not allowed); fix the mqtt plugin's " +
		SettingUsername + " and " + SettingPassword + " settings or the broker's access rules"},
}

// classify decides what a failed publish means for the delivery, in one
// place.
func classify(err error, f failure) transport.Outcome {
	var refused *netguard.RefusedError
	var ce *ConnectError
	var lost *lostError
	var netErr net.Error
	where := fmt.Sprintf("topic %q on %s", f.topic, f.server)
	switch {
	case errors.As(err, &refused):
		// The guard refused the dial: nothing reached the broker.
		// A literal address fails the delivery; a DNS answer is tried
		// again, since the next answer may differ.
		out, _ := pluginkit.GuardOutcome(err)
		return out
	case errors.Is(err, errClosed):
		return transport.Deferred(errClosed.Error())
	case errors.As(err, &ce) && ce.Code != 0 && ce.Code != packets.ErrNetworkError:
		what := fmt.Sprintf("%s refused the connection (CONNACK %d: %s)", f.server, ce.Code, ce.text)
		v, known := connackCodes[ce.Code]
		if v.hint != "" {
			what += "; " + v.hint
		}
		if known && v.permanent {
			return transport.Permanent(0, what)
		}
		return transport.Retryable(0, what+"; the plugin keeps reconnecting")
	case errors.As(err, &ce):
		return transport.Retryable(0, fmt.Sprintf("could not connect to %s: %s; the plugin keeps reconnecting", f.server, ce.text))
	case errors.As(err, &lost):
		return transport.Retryable(0, fmt.Sprintf("not connected to %s: %s; the plugin reconnects by itself", f.server, lost.text))
	case errors.Is(err, errNotConnected):
		return transport.Retryable(0, fmt.Sprintf("%v; the plugin keeps reconnecting to %s", err, f.server))
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return transport.Retryable(0, fmt.Sprintf("no PUBACK for %s within %s", where, f.waited.Round(time.Millisecond)))
	case errors.Is(err, context.Canceled):
		return transport.Retryable(0, fmt.Sprintf("publishing to %s abandoned: the attempt was cancelled", where))
	}
	// paho reports a connection lost under the publish ("connection lost
	// before Publish completed") and a write that failed as plain errors:
	// the broker said nothing, so a retry may pass.
	return transport.Retryable(0, fmt.Sprintf("publishing to %s failed: %v; the plugin reconnects by itself", where, err))
}
