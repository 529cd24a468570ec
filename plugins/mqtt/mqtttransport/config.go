package mqtttransport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/sdk/transport"
)

// The plugin-wide settings Configure accepts.
const (
	// SettingURL is the broker every endpoint without its own url uses,
	// tcp://host:1883 or ssl://host:8883. The user name and password go
	// in SettingUsername and SettingPassword (or the URL's user info):
	// the plugin's settings live in the operator's config file, not in
	// the endpoint record.
	SettingURL      = "url"
	SettingUsername = "username"
	SettingPassword = "password"
	// SettingCAFile, SettingCertFile and SettingKeyFile are PEM files
	// for ssl:// to the SettingURL broker: the CA to trust instead of the
	// system's, and a client certificate and its key.
	SettingCAFile   = "tls_ca_file"
	SettingCertFile = "tls_cert_file"
	SettingKeyFile  = "tls_key_file"
	// SettingConnectTimeout bounds one dial with its TLS and MQTT
	// handshakes.
	SettingConnectTimeout = "connect_timeout"
	// SettingPublishTimeout bounds the wait for the broker's PUBACK when
	// the attempt's own deadline is later.
	SettingPublishTimeout = "publish_timeout"
	// SettingReconnectWait is the first wait before dialling again after
	// a failed dial; it doubles on each failure up to
	// SettingReconnectWaitMax.
	SettingReconnectWait    = "reconnect_wait"
	SettingReconnectWaitMax = "reconnect_wait_max"
	// SettingAllowedNetworks lists the networks (CIDRs or addresses,
	// comma-separated) of brokers that are not globally reachable but may
	// be connected to, such as the operator's own mosquitto on a private
	// network or loopback. Every other such address is refused, by the
	// rule of sdk/netguard.
	SettingAllowedNetworks = netguard.SettingAllowedNetworks
)

var settingNames = []string{SettingURL, SettingUsername, SettingPassword, SettingCAFile, SettingCertFile, SettingKeyFile,
	SettingConnectTimeout, SettingPublishTimeout, SettingReconnectWait, SettingReconnectWaitMax, SettingAllowedNetworks}

// The endpoint config keys Validate and Send read.
const (
	ConfigTopic = "topic"
	ConfigURL   = "url"
)

// Defaults for the plugin-wide settings.
const (
	DefaultConnectTimeout   = 5 * time.Second
	DefaultPublishTimeout   = 10 * time.Second
	DefaultReconnectWait    = 500 * time.Millisecond
	DefaultReconnectWaitMax = 15 * time.Second
)

// MaxTopicBytes is the longest topic MQTT 3.1.1 can carry (a two-byte
// length, §1.5.3).
const MaxTopicBytes = 65535

// settings is one Configure's worth of plugin-wide settings.
type settings struct {
	server           *server // nil when no default url is set
	connectTimeout   time.Duration
	publishTimeout   time.Duration
	reconnectWait    time.Duration
	reconnectWaitMax time.Duration
	guard            *netguard.Guard
}

func defaultSettings() settings {
	return settings{
		connectTimeout:   DefaultConnectTimeout,
		publishTimeout:   DefaultPublishTimeout,
		reconnectWait:    DefaultReconnectWait,
		reconnectWaitMax: DefaultReconnectWaitMax,
		guard:            newGuard(nil),
	}
}

func newGuard(allowed []netip.Prefix) *netguard.Guard {
	return netguard.New(netguard.Config{Allowed: allowed, Plugin: "mqtt", Target: "MQTT broker"})
}

func parseSettings(s transport.Settings) (settings, error) {
	out := defaultSettings()
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(s)) {
		value := s[key]
		var err error
		switch key {
		case SettingURL, SettingUsername, SettingPassword, SettingCAFile, SettingCertFile, SettingKeyFile:
			// Read together below.
		case SettingConnectTimeout:
			out.connectTimeout, err = pluginkit.ParseDuration(key, value)
		case SettingPublishTimeout:
			out.publishTimeout, err = pluginkit.ParseDuration(key, value)
		case SettingReconnectWait:
			out.reconnectWait, err = pluginkit.ParseDuration(key, value)
		case SettingReconnectWaitMax:
			out.reconnectWaitMax, err = pluginkit.ParseDuration(key, value)
		case SettingAllowedNetworks:
			var allowed []netip.Prefix
			allowed, err = netguard.ParseNetworks("setting "+key, value)
			out.guard = newGuard(allowed)
		default:
			err = fmt.Errorf("unknown setting %q: the mqtt plugin takes %s", key, strings.Join(settingNames, ", "))
		}
		errs = append(errs, err)
	}
	if out.reconnectWaitMax < out.reconnectWait {
		errs = append(errs, fmt.Errorf("setting %s (%s) is shorter than %s (%s); the wait only grows from the one to the other",
			SettingReconnectWaitMax, out.reconnectWaitMax, SettingReconnectWait, out.reconnectWait))
	}
	srv, err := operatorServer(s)
	errs = append(errs, err)
	out.server = srv
	return out, errors.Join(errs...)
}

// operatorServer reads the url setting with its credentials and TLS files.
func operatorServer(s transport.Settings) (*server, error) {
	raw := strings.TrimSpace(s[SettingURL])
	if raw == "" {
		for _, key := range []string{SettingUsername, SettingPassword, SettingCAFile, SettingCertFile, SettingKeyFile} {
			if strings.TrimSpace(s[key]) != "" {
				return nil, fmt.Errorf("setting %s is given but setting %s is not; they are for the broker %s names, so give it too", key, SettingURL, SettingURL)
			}
		}
		return nil, nil
	}
	srv, err := parseServer(raw, true)
	if err != nil {
		return nil, fmt.Errorf("setting %s: %w", SettingURL, err)
	}
	if user := s[SettingUsername]; user != "" {
		if srv.username != "" && srv.username != user {
			return nil, fmt.Errorf("setting %s and the user name in setting %s differ; give the user once", SettingUsername, SettingURL)
		}
		srv.username = user
	}
	if pw := s[SettingPassword]; pw != "" {
		if srv.username == "" {
			return nil, fmt.Errorf("setting %s is given without a user name; set %s too", SettingPassword, SettingUsername)
		}
		srv.password = pw
	}
	ca, cert, key := strings.TrimSpace(s[SettingCAFile]), strings.TrimSpace(s[SettingCertFile]), strings.TrimSpace(s[SettingKeyFile])
	if ca == "" && cert == "" && key == "" {
		return srv, nil
	}
	if !srv.tls {
		return nil, fmt.Errorf("settings %s, %s and %s are for TLS, but setting %s is not ssl://; use ssl://host:8883", SettingCAFile, SettingCertFile, SettingKeyFile, SettingURL)
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("settings %s and %s go together: give both the client certificate and its key, or neither", SettingCertFile, SettingKeyFile)
	}
	if ca != "" {
		pool, err := pluginkit.CertPool(SettingCAFile, ca)
		if err != nil {
			return nil, err
		}
		srv.tlsConfig.RootCAs = pool
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("settings %s and %s: %w", SettingCertFile, SettingKeyFile, err)
		}
		srv.tlsConfig.Certificates = []tls.Certificate{pair}
	}
	srv.key += "|" + ca + "|" + cert + "|" + key
	return srv, nil
}

// server is one broker with the credentials to connect with.
type server struct {
	// broker is the URL handed to the client, without user info.
	broker string
	// shown names the broker for error text and logs.
	shown    string
	username string
	// password is never printed; scrub removes it from error text.
	password string
	tls      bool
	// tlsConfig is for ssl:// only.
	tlsConfig *tls.Config
	// addr is host:port, for the SSRF guard.
	addr string
	// key identifies the connection in the cache: one per broker and
	// credentials.
	key string
}

const urlExample = "give one such as tcp://mosquitto.internal:1883, or ssl://mosquitto.internal:8883 for TLS"

// parseServer reads a broker URL. Only the operator's url setting may carry
// credentials: an endpoint's url connects anonymously.
func parseServer(raw string, operator bool) (*server, error) {
	raw = strings.TrimSpace(raw)
	if !strings.Contains(raw, "://") {
		return nil, errors.New("the broker URL has no scheme; " + urlExample)
	}
	u, err := pluginkit.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("the broker URL does not parse (%v); %s", err, urlExample)
	}
	s := &server{}
	if u.User != nil {
		if !operator {
			return nil, fmt.Errorf("the broker URL carries a user name or password; credentials belong in the mqtt plugin's %s and %s settings, not in an endpoint", SettingUsername, SettingPassword)
		}
		s.username = u.User.Username()
		s.password, _ = u.User.Password()
	}
	port := "1883"
	switch u.Scheme {
	case "tcp", "mqtt":
	case "ssl", "tls", "mqtts":
		s.tls, port = true, "8883"
	default:
		return nil, fmt.Errorf("the broker URL has scheme %q; use tcp:// or ssl:// (TLS); %s", u.Scheme, urlExample)
	}
	if u.Hostname() == "" {
		return nil, errors.New("the broker URL has no host; " + urlExample)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("the broker URL has a path, query or fragment, which MQTT has no use for; " + urlExample)
	}
	if u.Port() != "" {
		port = u.Port()
	}
	s.addr = net.JoinHostPort(u.Hostname(), port)
	scheme := "tcp"
	if s.tls {
		scheme = "ssl"
		s.tlsConfig = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	}
	s.broker = scheme + "://" + s.addr
	s.shown = s.broker
	s.key = s.broker + "|" + s.username + "|" + s.password
	return s, nil
}

// scrub removes the password from text.
func (s *server) scrub(text string) string {
	return redact.Hide(text, s.password)
}

// target is where one endpoint publishes.
type target struct {
	topic  string
	server *server
}

// resolve reads an endpoint's config against the plugin-wide settings.
func (st settings) resolve(e transport.Endpoint) (target, error) {
	if key, ok := pluginkit.UnknownKey(e.Config, ConfigTopic, ConfigURL); ok {
		return target{}, fmt.Errorf("unknown endpoint config %q: the mqtt transport takes %s and, optionally, %s", key, ConfigTopic, ConfigURL)
	}
	topic, ok := e.Config[ConfigTopic]
	if !ok {
		return target{}, fmt.Errorf("the endpoint config has no %s; give the topic to publish to, such as forms/submissions", ConfigTopic)
	}
	if err := checkTopic(topic); err != nil {
		return target{}, err
	}
	tgt := target{topic: topic}
	raw, err := pluginkit.EndpointURL(e, ConfigURL, "broker")
	if err != nil {
		return target{}, err
	}
	if raw == "" {
		if st.server == nil {
			return target{}, fmt.Errorf("the endpoint config has no %s and the mqtt plugin has no %s setting; set the plugin's %s (with %s and %s, which stay out of the endpoint), such as tcp://mosquitto.internal:1883", ConfigURL, SettingURL, SettingURL, SettingUsername, SettingPassword)
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

// ErrInvalidTopic is wrapped by every refusal of a topic.
var ErrInvalidTopic = errors.New("invalid topic")

// checkTopic refuses a topic MQTT 3.1.1 cannot publish to (§4.7): empty,
// over 65535 bytes, invalid UTF-8, a NUL, or a wildcard, which only
// subscriptions may hold. Topics under $ are the broker's own ($SYS).
func checkTopic(topic string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s; give a topic such as forms/submissions", ErrInvalidTopic, pluginkit.Clip(topic), why)
	}
	switch {
	case topic == "":
		return bad("it is empty")
	case len(topic) > MaxTopicBytes:
		return bad(fmt.Sprintf("it is %d bytes, more than the %d MQTT allows", len(topic), MaxTopicBytes))
	case !utf8.ValidString(topic):
		return bad("it is not valid UTF-8")
	case strings.ContainsAny(topic, "+#"):
		return bad("it contains the wildcard + or #, which only subscriptions may use")
	case strings.ContainsRune(topic, 0):
		return bad("it contains a NUL character")
	case strings.HasPrefix(topic, "$"):
		return bad("topics starting with $ are the broker's own (such as $SYS)")
	}
	return nil
}
