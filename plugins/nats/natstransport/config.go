package natstransport

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/sdk/transport"
)

// The plugin-wide settings Configure accepts.
const (
	// SettingURL is the server every endpoint without its own url uses.
	SettingURL            = "url"
	SettingConnectTimeout = "connect_timeout"
	SettingReconnectWait  = "reconnect_wait"
	SettingAckTimeout     = "ack_timeout"
	// SettingAllowedNetworks lists the networks (CIDRs or addresses,
	// comma-separated) of NATS servers that are not globally reachable but
	// may be connected to, such as the operator's own broker on a private
	// network or loopback. Every other such address is refused, by the
	// rule of sdk/netguard.
	SettingAllowedNetworks = netguard.SettingAllowedNetworks
)

// The endpoint config keys Validate and Send read.
const (
	ConfigSubject = "subject"
	ConfigURL     = "url"
)

// Defaults for the plugin-wide settings.
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultReconnectWait  = 2 * time.Second
	// DefaultAckTimeout bounds the wait for a publish ack when the attempt's
	// own deadline is later or absent.
	DefaultAckTimeout = 10 * time.Second
)

// MaxSubjectBytes bounds a subject; NATS itself sets no limit, but a
// subject longer than this is a mistake, not a design.
const MaxSubjectBytes = 512

// settings is one Configure's worth of plugin-wide settings.
type settings struct {
	servers        *servers // nil when no default url is set
	connectTimeout time.Duration
	reconnectWait  time.Duration
	ackTimeout     time.Duration
	guard          *netguard.Guard
}

func defaultSettings() settings {
	return settings{
		connectTimeout: DefaultConnectTimeout,
		reconnectWait:  DefaultReconnectWait,
		ackTimeout:     DefaultAckTimeout,
		guard:          newGuard(nil),
	}
}

func newGuard(allowed []netip.Prefix) *netguard.Guard {
	return netguard.New(netguard.Config{Allowed: allowed, Plugin: "nats", Target: "NATS server"})
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
				out.servers, err = parseServers(value)
				if err != nil {
					err = fmt.Errorf("setting %s: %w", key, err)
				}
			}
		case SettingConnectTimeout:
			out.connectTimeout, err = pluginkit.ParseDuration(key, value)
		case SettingReconnectWait:
			out.reconnectWait, err = pluginkit.ParseDuration(key, value)
		case SettingAckTimeout:
			out.ackTimeout, err = pluginkit.ParseDuration(key, value)
		case SettingAllowedNetworks:
			var allowed []netip.Prefix
			allowed, err = netguard.ParseNetworks("setting "+key, value)
			out.guard = newGuard(allowed)
		default:
			err = fmt.Errorf("unknown setting %q: the nats plugin takes %s, %s, %s, %s and %s",
				key, SettingURL, SettingConnectTimeout, SettingReconnectWait, SettingAckTimeout, SettingAllowedNetworks)
		}
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// servers is a parsed server list: what nats.Connect is given, what error
// text may show, and the credentials that must never be shown.
type servers struct {
	// raw is the list as configured, credentials included. It is handed to
	// the client and keys the connection cache; it is never printed.
	raw string
	// shown names the servers without credentials, for error text and logs.
	shown string
	// secrets are the passwords and tokens in the URLs, scrubbed from any
	// error text before it leaves the plugin.
	secrets []string
	// hosts are the servers' host:port (or host), for the SSRF guard.
	hosts []string
}

var allowedSchemes = []string{"nats", "tls", "ws", "wss"}

// parseServers reads a comma-separated list of server URLs, such as
// "nats://n1:4222,nats://n2:4222", the form the NATS client takes.
func parseServers(raw string) (*servers, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, errors.New("no server URL; give one such as nats://127.0.0.1:4222")
	}
	s := &servers{raw: raw}
	var shown []string
	for i, part := range strings.Split(raw, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("server URL %d of the list is empty; separate URLs with single commas", i+1)
		}
		if !strings.Contains(part, "://") {
			return nil, fmt.Errorf("server URL %d has no scheme; write it as nats://host:port, such as nats://127.0.0.1:4222", i+1)
		}
		u, err := pluginkit.ParseURL(part)
		if err != nil {
			return nil, fmt.Errorf("server URL %d does not parse (%v); give one such as nats://127.0.0.1:4222", i+1, err)
		}
		if u.User != nil {
			if pw, ok := u.User.Password(); ok {
				s.secrets = append(s.secrets, pw)
			} else if tok := u.User.Username(); tok != "" {
				// nats://TOKEN@host is the token form: the user part is
				// the credential.
				s.secrets = append(s.secrets, tok)
			}
		}
		if !slices.Contains(allowedSchemes, u.Scheme) {
			return nil, fmt.Errorf("server URL %d has scheme %q; use nats://, tls://, ws:// or wss://, such as nats://127.0.0.1:4222", i+1, u.Scheme)
		}
		if u.Hostname() == "" {
			return nil, fmt.Errorf("server URL %d has no host; give one such as nats://127.0.0.1:4222", i+1)
		}
		shown = append(shown, u.Scheme+"://"+u.Host)
		s.hosts = append(s.hosts, u.Host)
	}
	s.shown = strings.Join(shown, ",")
	return s, nil
}

// scrub removes every credential in s from text.
func (s *servers) scrub(text string) string {
	return redact.Hide(text, s.secrets...)
}

// target is where one endpoint publishes.
type target struct {
	subject string
	servers *servers
}

// resolve reads an endpoint's config against the plugin-wide settings.
func (st settings) resolve(e transport.Endpoint) (target, error) {
	if key, ok := pluginkit.UnknownKey(e.Config, ConfigSubject, ConfigURL); ok {
		return target{}, fmt.Errorf("unknown endpoint config %q: the nats transport takes %s and, optionally, %s", key, ConfigSubject, ConfigURL)
	}
	subject, ok := e.Config[ConfigSubject]
	if !ok || subject == "" {
		return target{}, fmt.Errorf("the endpoint config has no %s; give the JetStream subject to publish to, such as forms.submissions", ConfigSubject)
	}
	if err := checkSubject(subject); err != nil {
		return target{}, err
	}
	raw, err := pluginkit.EndpointURL(e, ConfigURL, "server")
	if err != nil {
		return target{}, err
	}
	if raw == "" {
		if st.servers == nil {
			return target{}, fmt.Errorf("the endpoint names no server and the nats plugin has no %s setting; set %s in the endpoint config, such as nats://127.0.0.1:4222, or in the plugin's settings", SettingURL, ConfigURL)
		}
		return target{subject: subject, servers: st.servers}, nil
	}
	srv, err := parseServers(raw)
	if err != nil {
		return target{}, fmt.Errorf("endpoint config %s: %w", ConfigURL, err)
	}
	return target{subject: subject, servers: srv}, nil
}

// ErrInvalidSubject is wrapped by every refusal of a subject.
var ErrInvalidSubject = errors.New("invalid NATS subject")

// checkSubject refuses a subject JetStream could never store a message
// under: one with wildcards, empty tokens, white space or control
// characters, or one in the server's own $-prefixed namespace.
func checkSubject(subject string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s; give dot-separated tokens such as forms.submissions", ErrInvalidSubject, pluginkit.Clip(subject), why)
	}
	switch {
	case len(subject) > MaxSubjectBytes:
		return bad(fmt.Sprintf("it is %d bytes, more than %d", len(subject), MaxSubjectBytes))
	case !utf8.ValidString(subject):
		return bad("it is not valid UTF-8")
	case strings.HasPrefix(subject, "$"):
		return bad("subjects starting with $ belong to the server (JetStream's API, system events)")
	case strings.HasPrefix(subject, "_INBOX."):
		return bad("_INBOX. subjects carry replies, not messages")
	}
	for _, r := range subject {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return bad("it contains white space or a control character")
		}
	}
	for _, token := range strings.Split(subject, ".") {
		switch token {
		case "":
			return bad("it has an empty token (a leading, trailing or doubled dot)")
		case "*", ">":
			return bad("wildcards (* and >) subscribe to subjects, they cannot be published to")
		}
	}
	return nil
}

// ErrInvalidHeader is wrapped when a handed-over header cannot be carried
// in a NATS message.
var ErrInvalidHeader = errors.New("header cannot be carried in a NATS message")

// checkHeader refuses a header the NATS wire format cannot carry intact. The
// value may be a signature, so only the name is ever quoted.
func checkHeader(h transport.Header) error {
	if h.Name == "" {
		return fmt.Errorf("%w: a header has an empty name", ErrInvalidHeader)
	}
	for i := 0; i < len(h.Name); i++ {
		c := h.Name[i]
		if c <= ' ' || c == ':' || c >= 0x7f {
			return fmt.Errorf("%w: header name %q contains a space, a colon, a control or a non-ASCII character", ErrInvalidHeader, pluginkit.Clip(h.Name))
		}
	}
	if strings.ContainsAny(h.Value, "\r\n") {
		return fmt.Errorf("%w: the value of header %q contains a line break", ErrInvalidHeader, pluginkit.Clip(h.Name))
	}
	return nil
}
