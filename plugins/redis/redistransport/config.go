package redistransport

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

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
	SettingPoolSize       = "pool_size"
	// SettingAllowedNetworks lists the networks (CIDRs or addresses,
	// comma-separated) of Redis servers that are not globally reachable but
	// may be connected to, such as the operator's own server on a private
	// network or loopback. Every other such address is refused, by the
	// rule of sdk/netguard.
	SettingAllowedNetworks = netguard.SettingAllowedNetworks
	// SettingAllowUnixSockets ("true" or "false", default false) lets
	// unix:// server URLs through; a socket path reaches this host's own
	// services, so they are refused unless the operator says otherwise.
	SettingAllowUnixSockets = "allow_unix_sockets"
)

// The endpoint config keys Validate and Send read.
const (
	ConfigStream = "stream"
	ConfigURL    = "url"
	// ConfigMaxLen caps the stream's length with approximate trimming
	// (XADD MAXLEN ~ n): Redis trims whole internal nodes, so the stream
	// may hold somewhat more than n entries, never fewer.
	ConfigMaxLen = "maxlen"
)

// Defaults for the plugin-wide settings.
const (
	DefaultConnectTimeout = 5 * time.Second
	// DefaultSendTimeout bounds one XADD when the attempt's own deadline
	// is later or absent.
	DefaultSendTimeout = 10 * time.Second
)

// Limits on endpoint config values.
const (
	MaxStreamBytes = 1024
	MaxMaxLen      = 1 << 40
)

// The entry's field names, in the order they are written.
const (
	FieldID        = "id"
	FieldTimestamp = "timestamp"
	FieldSignature = "signature"
	FieldBody      = "body"
	// FieldTraceparent and FieldTracestate carry the attempt's W3C trace
	// context, when it has one, after the others.
	FieldTraceparent = "traceparent"
	FieldTracestate  = "tracestate"
)

type settings struct {
	server         *server // nil when no default url is set
	connectTimeout time.Duration
	poolSize       int // 0: the client's default
	guard          *netguard.Guard
}

func defaultSettings() settings {
	return settings{connectTimeout: DefaultConnectTimeout, guard: newGuard(nil, false)}
}

func newGuard(allowed []netip.Prefix, unix bool) *netguard.Guard {
	return netguard.New(netguard.Config{Allowed: allowed, AllowUnixSockets: unix, Plugin: "redis",
		Target: "Redis server", UnixSetting: SettingAllowUnixSockets})
}

func parseSettings(s transport.Settings) (settings, error) {
	out := defaultSettings()
	var allowed []netip.Prefix
	unix := false
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(s)) {
		value := strings.TrimSpace(s[key])
		var err error
		switch key {
		case SettingURL:
			if value != "" {
				out.server, err = parseServer(value)
				if err != nil {
					err = fmt.Errorf("setting %s: %w", key, err)
				}
			}
		case SettingConnectTimeout:
			out.connectTimeout, err = pluginkit.ParseDuration(key, value)
		case SettingPoolSize:
			n, perr := strconv.Atoi(value)
			if perr != nil || n < 1 || n > 10000 {
				err = fmt.Errorf("setting %s: %q is not a whole number of connections from 1 to 10000", key, value)
			}
			out.poolSize = n
		case SettingAllowedNetworks:
			allowed, err = netguard.ParseNetworks("setting "+key, value)
		case SettingAllowUnixSockets:
			var perr error
			unix, perr = strconv.ParseBool(value)
			if perr != nil {
				err = fmt.Errorf("setting %s: %q is not true or false", key, value)
			}
		default:
			err = fmt.Errorf("unknown setting %q: the redis plugin takes %s, %s, %s, %s and %s", key,
				SettingURL, SettingConnectTimeout, SettingPoolSize, SettingAllowedNetworks, SettingAllowUnixSockets)
		}
		errs = append(errs, err)
	}
	out.guard = newGuard(allowed, unix)
	return out, errors.Join(errs...)
}

// server is one parsed server URL.
type server struct {
	// raw is the URL as configured, password included. It keys the pool
	// cache and is never printed.
	raw string
	// shown names the server without credentials, for error text and logs.
	shown string
	// secret is the URL's password, scrubbed from any error text.
	secret string
	opts   *redis.Options
	// network and addr are where the client dials ("tcp" and host:port,
	// or "unix" and a socket path), for the SSRF guard.
	network, addr string
}

var allowedSchemes = []string{"redis", "rediss", "unix"}

func parseServer(raw string) (*server, error) {
	const example = "give one such as redis://127.0.0.1:6379/0, or redis://:password@host:6379/0"
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, errors.New("no server URL; " + example)
	}
	if !strings.Contains(raw, "://") {
		return nil, errors.New("the server URL has no scheme; " + example)
	}
	u, err := pluginkit.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("the server URL does not parse (%v); %s", err, example)
	}
	s := &server{raw: raw}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			s.secret = pw
		}
	}
	if !slices.Contains(allowedSchemes, u.Scheme) {
		return nil, fmt.Errorf("the server URL has scheme %q; use redis://, rediss:// (TLS) or unix://; %s", u.Scheme, example)
	}
	if u.Scheme == "unix" {
		if u.Path == "" {
			return nil, errors.New("the unix:// server URL has no socket path, such as unix:///run/redis/redis.sock")
		}
		s.shown = "unix://" + u.Path
	} else {
		if u.Hostname() == "" {
			return nil, errors.New("the server URL has no host; " + example)
		}
		s.shown = u.Scheme + "://" + u.Host + u.Path
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("the server URL %s is not usable: %s", s.shown, s.scrub(err.Error()))
	}
	s.opts = opts
	s.network, s.addr = opts.Network, opts.Addr
	return s, nil
}

// scrub removes the URL's password from text.
func (s *server) scrub(text string) string {
	return redact.Hide(text, s.secret)
}

// target is where one endpoint appends.
type target struct {
	stream string
	maxLen int64 // 0: no trimming
	server *server
}

func (st settings) resolve(e transport.Endpoint) (target, error) {
	if key, ok := pluginkit.UnknownKey(e.Config, ConfigStream, ConfigURL, ConfigMaxLen); ok {
		return target{}, fmt.Errorf("unknown endpoint config %q: the redis transport takes %s, %s and, optionally, %s", key, ConfigStream, ConfigURL, ConfigMaxLen)
	}
	stream := e.Config[ConfigStream]
	if stream == "" {
		return target{}, fmt.Errorf("the endpoint config has no %s; give the key of the stream to append to, such as forms:submissions", ConfigStream)
	}
	if err := checkStream(stream); err != nil {
		return target{}, err
	}
	tgt := target{stream: stream}
	if v, ok := e.Config[ConfigMaxLen]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 1 || n > MaxMaxLen {
			return target{}, fmt.Errorf("endpoint config %s: %q is not a whole number from 1 to %d; it caps the stream's length (approximately), or leave it out to keep every entry", ConfigMaxLen, pluginkit.Clip(v), int64(MaxMaxLen))
		}
		tgt.maxLen = n
	}
	raw, err := pluginkit.EndpointURL(e, ConfigURL, "server")
	if err != nil {
		return target{}, err
	}
	if raw == "" {
		if st.server == nil {
			return target{}, fmt.Errorf("the endpoint config has no %s and the redis plugin has no %s setting; set %s, such as redis://127.0.0.1:6379/0", ConfigURL, SettingURL, ConfigURL)
		}
		tgt.server = st.server
		return tgt, nil
	}
	srv, err := parseServer(raw)
	if err != nil {
		return target{}, fmt.Errorf("endpoint config %s: %w", ConfigURL, err)
	}
	tgt.server = srv
	return tgt, nil
}

// ErrInvalidStream is wrapped by every refusal of a stream key.
var ErrInvalidStream = errors.New("invalid stream key")

// checkStream refuses a key that is surely a mistake. Redis itself takes
// any bytes as a key, but a key with white space, control characters or
// invalid UTF-8 is one nobody can type into redis-cli to read it back.
func checkStream(stream string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s; give a key such as forms:submissions", ErrInvalidStream, pluginkit.Clip(stream), why)
	}
	if len(stream) > MaxStreamBytes {
		return bad(fmt.Sprintf("it is %d bytes, more than %d", len(stream), MaxStreamBytes))
	}
	if !utf8.ValidString(stream) {
		return bad("it is not valid UTF-8")
	}
	for _, r := range stream {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return bad("it contains white space or a control character")
		}
	}
	return nil
}
