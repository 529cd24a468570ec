// Package broker is the skeleton of the shipped transports that keep one
// long-lived connection per broker up in the background (amqp, mqtt): the
// plugin-wide settings they share, those settings swapped at once with the
// connections made under them, the SSRF guard asked about a broker before
// its first dial, and the goroutine that dials, dials again after a loss
// with a growing wait, and stops. What a broker's client does, how a
// message is laid out and what an error means stay in each transport.
//
// Like pluginkit it is not SDK: it sits under plugins/internal, where Go
// keeps it to plugins/, and changes with the plugins that use it.
package broker

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
)

// The plugin-wide settings every broker transport takes, under these names.
const (
	// SettingConnectTimeout bounds one dial with its handshakes, and
	// resolving a broker's name for the guard.
	SettingConnectTimeout = "connect_timeout"
	// SettingReconnectWait is the first wait before dialling again after
	// a failed dial; it doubles on each failure up to
	// SettingReconnectWaitMax.
	SettingReconnectWait    = "reconnect_wait"
	SettingReconnectWaitMax = "reconnect_wait_max"
	// SettingAllowedNetworks lists the networks (CIDRs or addresses,
	// comma-separated) of brokers that are not globally reachable but may
	// be connected to, such as the operator's own broker on a private
	// network or loopback. Every other such address is refused, by the
	// rule of sdk/netguard.
	SettingAllowedNetworks = netguard.SettingAllowedNetworks
)

// Defaults for the common settings.
const (
	DefaultConnectTimeout   = 5 * time.Second
	DefaultReconnectWait    = 500 * time.Millisecond
	DefaultReconnectWaitMax = 15 * time.Second
)

// Common are the plugin-wide settings every broker transport takes. A
// transport's own settings embed it, which makes them Settings.
type Common struct {
	ConnectTimeout   time.Duration
	ReconnectWait    time.Duration
	ReconnectWaitMax time.Duration
	// Guard is the SSRF guard every broker address passes.
	Guard *netguard.Guard
	// guard names the plugin and its brokers in the guard's refusals.
	guard netguard.Config
}

// Settings is a transport's plugin-wide settings: its own, with Common
// embedded.
type Settings interface{ common() Common }

func (c Common) common() Common { return c }

// Defaults are the common settings before Configure; plugin and target
// name the plugin and its brokers in the guard's refusals ("amqp",
// "AMQP broker").
func Defaults(plugin, target string) Common {
	cfg := netguard.Config{Plugin: plugin, Target: target}
	return Common{
		ConnectTimeout:   DefaultConnectTimeout,
		ReconnectWait:    DefaultReconnectWait,
		ReconnectWaitMax: DefaultReconnectWaitMax,
		Guard:            netguard.New(cfg),
		guard:            cfg,
	}
}

// Parse reads value into the common setting key, and reports whether key
// is one; the error names the setting.
func (c *Common) Parse(key, value string) (bool, error) {
	var err error
	switch key {
	case SettingConnectTimeout:
		c.ConnectTimeout, err = pluginkit.ParseDuration(key, value)
	case SettingReconnectWait:
		c.ReconnectWait, err = pluginkit.ParseDuration(key, value)
	case SettingReconnectWaitMax:
		c.ReconnectWaitMax, err = pluginkit.ParseDuration(key, value)
	case SettingAllowedNetworks:
		var allowed []netip.Prefix
		allowed, err = netguard.ParseNetworks("setting "+key, value)
		cfg := c.guard
		cfg.Allowed = allowed
		c.Guard = netguard.New(cfg)
	default:
		return false, nil
	}
	return true, err
}

// Check says what is wrong between the common settings, once all are read.
func (c Common) Check() error {
	if c.ReconnectWaitMax < c.ReconnectWait {
		return fmt.Errorf("setting %s (%s) is shorter than %s (%s); the wait only grows from the one to the other",
			SettingReconnectWaitMax, c.ReconnectWaitMax, SettingReconnectWait, c.ReconnectWait)
	}
	return nil
}
