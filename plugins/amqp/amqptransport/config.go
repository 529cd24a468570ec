package amqptransport

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/sdk/transport"
)

// The plugin-wide settings Configure accepts.
const (
	// SettingURL is the broker every endpoint without its own url uses. It
	// is where the password belongs: the plugin's settings live in the
	// operator's config file, not in the endpoint record.
	SettingURL            = "url"
	SettingConnectTimeout = "connect_timeout"
	// SettingConfirmTimeout bounds the wait for the broker's publisher
	// confirm when the attempt's own deadline is later.
	SettingConfirmTimeout = "confirm_timeout"
	// SettingReconnectWait is the first wait before dialling again after
	// a failed dial; it doubles on each failure up to
	// SettingReconnectWaitMax.
	SettingReconnectWait    = "reconnect_wait"
	SettingReconnectWaitMax = "reconnect_wait_max"
	// SettingAllowedNetworks lists the networks (CIDRs or addresses,
	// comma-separated) of brokers that are not globally reachable but may
	// be connected to, such as the operator's own RabbitMQ on a private
	// network or loopback. Every other such address is refused, by the
	// rule of sdk/netguard.
	SettingAllowedNetworks = netguard.SettingAllowedNetworks
)

// The endpoint config keys Validate and Send read.
const (
	// ConfigExchange is the exchange to publish to; "" is the default
	// exchange, which routes by queue name.
	ConfigExchange   = "exchange"
	ConfigRoutingKey = "routing_key"
	ConfigURL        = "url"
)

// Defaults for the plugin-wide settings.
const (
	DefaultConnectTimeout   = 5 * time.Second
	DefaultConfirmTimeout   = 10 * time.Second
	DefaultReconnectWait    = 500 * time.Millisecond
	DefaultReconnectWaitMax = 15 * time.Second
)

// MaxNameBytes is the longest exchange name or routing key AMQP 0-9-1 can
// carry: both are short strings, one length byte.
const MaxNameBytes = 255

// settings is one Configure's worth of plugin-wide settings.
type settings struct {
	server           *server // nil when no default url is set
	connectTimeout   time.Duration
	confirmTimeout   time.Duration
	reconnectWait    time.Duration
	reconnectWaitMax time.Duration
	guard            *netguard.Guard
}

func defaultSettings() settings {
	return settings{
		connectTimeout:   DefaultConnectTimeout,
		confirmTimeout:   DefaultConfirmTimeout,
		reconnectWait:    DefaultReconnectWait,
		reconnectWaitMax: DefaultReconnectWaitMax,
		guard:            newGuard(nil),
	}
}

func newGuard(allowed []netip.Prefix) *netguard.Guard {
	return netguard.New(netguard.Config{Allowed: allowed, Plugin: "amqp", Target: "AMQP broker"})
}

func parseSettings(s transport.Settings) (settings, error) {
	out := defaultSettings()
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(s)) {
		value := s[key]
		var err error
		switch key {
		case SettingURL:
			if strings.TrimSpace(value) != "" {
				// The operator's own file may name TLS files on this host.
				out.server, err = parseServer(value, true)
				if err != nil {
					err = fmt.Errorf("setting %s: %w", key, err)
				}
			}
		case SettingConnectTimeout:
			out.connectTimeout, err = pluginkit.ParseDuration(key, value)
		case SettingConfirmTimeout:
			out.confirmTimeout, err = pluginkit.ParseDuration(key, value)
		case SettingReconnectWait:
			out.reconnectWait, err = pluginkit.ParseDuration(key, value)
		case SettingReconnectWaitMax:
			out.reconnectWaitMax, err = pluginkit.ParseDuration(key, value)
		case SettingAllowedNetworks:
			var allowed []netip.Prefix
			allowed, err = netguard.ParseNetworks("setting "+key, value)
			out.guard = newGuard(allowed)
		default:
			err = fmt.Errorf("unknown setting %q: the amqp plugin takes %s, %s, %s, %s, %s and %s", key,
				SettingURL, SettingConnectTimeout, SettingConfirmTimeout, SettingReconnectWait, SettingReconnectWaitMax, SettingAllowedNetworks)
		}
		errs = append(errs, err)
	}
	if out.reconnectWaitMax < out.reconnectWait {
		errs = append(errs, fmt.Errorf("setting %s (%s) is shorter than %s (%s); the wait only grows from the one to the other",
			SettingReconnectWaitMax, out.reconnectWaitMax, SettingReconnectWait, out.reconnectWait))
	}
	return out, errors.Join(errs...)
}

// server is one parsed broker URL.
type server struct {
	// raw is the URL as configured, password included. It is handed to
	// the client and keys the connection cache; it is never printed.
	raw string
	// shown names the broker without credentials, for error text and logs.
	shown string
	// secret is the URL's password, scrubbed from any error text.
	secret string
	// addr is host:port, for the SSRF guard.
	addr string
}

const urlExample = "give one such as amqp://user:password@rabbitmq.internal:5672/vhost, or amqps:// for TLS"

// tlsFileParams are the URL query parameters that make the client read
// files on the plugin's host. Only the operator's own url setting may use
// them: whoever creates an endpoint must not point the plugin at files.
var tlsFileParams = []string{"certfile", "keyfile", "cacertfile"}

// parseServer reads an AMQP URL the way the client will, so what the
// client would refuse is refused here with a clear error first.
func parseServer(raw string, operator bool) (*server, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, errors.New("no broker URL; " + urlExample)
	}
	if !strings.Contains(raw, "://") {
		return nil, errors.New("the broker URL has no scheme; " + urlExample)
	}
	u, err := pluginkit.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("the broker URL does not parse (%v); %s", err, urlExample)
	}
	s := &server{raw: raw}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			s.secret = pw
		}
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return nil, fmt.Errorf("the broker URL has scheme %q; use amqp:// or amqps:// (TLS); %s", u.Scheme, urlExample)
	}
	if u.Hostname() == "" {
		return nil, errors.New("the broker URL has no host; " + urlExample)
	}
	if !operator {
		for _, p := range tlsFileParams {
			if u.Query().Has(p) {
				return nil, fmt.Errorf("the broker URL names a file on the plugin's host (%s); TLS files may only be named in the amqp plugin's %s setting", p, SettingURL)
			}
		}
	}
	uri, err := amqp.ParseURI(raw)
	if err != nil {
		return nil, fmt.Errorf("the broker URL %s://%s is not usable: %s; %s", u.Scheme, u.Host, s.scrub(err.Error()), urlExample)
	}
	s.addr = net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	vhost := uri.Vhost
	if vhost == "/" {
		vhost = ""
	}
	s.shown = u.Scheme + "://" + s.addr + "/" + url.PathEscape(vhost)
	return s, nil
}

// scrub removes the URL's password from text.
func (s *server) scrub(text string) string {
	return redact.Hide(text, s.secret)
}

// target is where one endpoint publishes.
type target struct {
	exchange, routingKey string
	server               *server
}

// destination names the target for spans and error text.
func (tgt target) destination() string {
	if tgt.exchange == "" {
		return "(default exchange)"
	}
	return tgt.exchange
}

// resolve reads an endpoint's config against the plugin-wide settings.
func (st settings) resolve(e transport.Endpoint) (target, error) {
	if key, ok := pluginkit.UnknownKey(e.Config, ConfigExchange, ConfigRoutingKey, ConfigURL); ok {
		return target{}, fmt.Errorf("unknown endpoint config %q: the amqp transport takes %s, %s and, optionally, %s", key, ConfigExchange, ConfigRoutingKey, ConfigURL)
	}
	exchange, ok := e.Config[ConfigExchange]
	if !ok {
		return target{}, fmt.Errorf("the endpoint config has no %s; give the exchange to publish to, such as forms, or \"\" for the default exchange, which routes by queue name", ConfigExchange)
	}
	if err := checkName(ErrInvalidExchange, exchange, "an exchange such as forms"); err != nil {
		return target{}, err
	}
	key, ok := e.Config[ConfigRoutingKey]
	if !ok {
		return target{}, fmt.Errorf("the endpoint config has no %s; give the routing key to publish with, such as forms.submissions (the queue's name on the default exchange), or \"\" for a fanout exchange", ConfigRoutingKey)
	}
	if err := checkName(ErrInvalidRoutingKey, key, "a routing key such as forms.submissions"); err != nil {
		return target{}, err
	}
	if exchange == "" && key == "" {
		return target{}, fmt.Errorf("%w: on the default exchange the routing key is the queue's name, and it is empty; give the queue's name as %s", ErrInvalidRoutingKey, ConfigRoutingKey)
	}
	tgt := target{exchange: exchange, routingKey: key}
	raw, err := pluginkit.EndpointURL(e, ConfigURL, "broker")
	if err != nil {
		return target{}, err
	}
	if raw == "" {
		if st.server == nil {
			return target{}, fmt.Errorf("the endpoint config has no %s and the amqp plugin has no %s setting; set the plugin's %s (it keeps the password out of the endpoint), such as amqp://user:password@rabbitmq.internal:5672/vhost", ConfigURL, SettingURL, SettingURL)
		}
		tgt.server = st.server
		return tgt, nil
	}
	srv, err := parseServer(raw, false)
	if err != nil {
		return target{}, fmt.Errorf("endpoint config %s: %w", ConfigURL, err)
	}
	tgt.server = srv
	return tgt, nil
}

// Errors wrapped by every refusal of an exchange name or a routing key.
var (
	ErrInvalidExchange   = errors.New("invalid exchange name")
	ErrInvalidRoutingKey = errors.New("invalid routing key")
)

// checkName refuses a name AMQP cannot carry (over 255 bytes) or that is
// surely a mistake: invalid UTF-8, white space or control characters, which
// RabbitMQ would take but nobody could type back into rabbitmqadmin.
func checkName(kind error, name, example string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s; give %s", kind, pluginkit.Clip(name), why, example)
	}
	switch {
	case len(name) > MaxNameBytes:
		return bad(fmt.Sprintf("it is %d bytes, more than the %d AMQP allows", len(name), MaxNameBytes))
	case !utf8.ValidString(name):
		return bad("it is not valid UTF-8")
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return bad("it contains white space or a control character")
		}
	}
	return nil
}
