package kafkatransport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// The plugin-wide settings Configure accepts.
const (
	// SettingBrokers is the comma-separated host:port list of seed
	// brokers every endpoint without its own brokers uses.
	SettingBrokers     = "brokers"
	SettingDialTimeout = "dial_timeout"
	// SettingProduceTimeout bounds the wait for the brokers'
	// acknowledgement when the attempt's own deadline is later.
	SettingProduceTimeout = "produce_timeout"
	// SettingSASLMechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; the
	// user name and password live here, in the operator's file, never in
	// an endpoint.
	SettingSASLMechanism = "sasl_mechanism"
	SettingSASLUsername  = "sasl_username"
	SettingSASLPassword  = "sasl_password"
	// SettingTLS ("true" or "false") makes every broker connection TLS,
	// verified against the system roots or SettingTLSCAFile.
	SettingTLS       = "tls"
	SettingTLSCAFile = "tls_ca_file"
	// SettingCompression is the codec record batches are compressed with:
	// none (the default), gzip, snappy, lz4 or zstd.
	SettingCompression = "compression"
	// SettingAllowedNetworks lists the networks of brokers that are not
	// globally reachable but may be connected to, by the rule of
	// sdk/netguard.
	SettingAllowedNetworks = netguard.SettingAllowedNetworks
)

// The endpoint config keys Validate and Send read.
const (
	ConfigTopic = "topic"
	// ConfigBrokers names the endpoint's own seed brokers; it carries no
	// credentials (they are the plugin's settings).
	ConfigBrokers = "brokers"
)

// Defaults for the plugin-wide settings.
const (
	DefaultDialTimeout    = 5 * time.Second
	DefaultProduceTimeout = 10 * time.Second
)

// MaxTopicBytes is the longest topic name Kafka accepts.
const MaxTopicBytes = 249

var settingNames = []string{SettingBrokers, SettingDialTimeout, SettingProduceTimeout, SettingSASLMechanism,
	SettingSASLUsername, SettingSASLPassword, SettingTLS, SettingTLSCAFile, SettingCompression, SettingAllowedNetworks}

// settings is one Configure's worth of plugin-wide settings.
type settings struct {
	brokers        []string // nil when no default is set
	dialTimeout    time.Duration
	produceTimeout time.Duration
	sasl           sasl.Mechanism // nil: no SASL
	password       string         // scrubbed from error text
	tls            *tls.Config    // nil: plaintext
	compression    string         // a name compressionCodec knows
	guard          *netguard.Guard
}

func defaultSettings() settings {
	return settings{dialTimeout: DefaultDialTimeout, produceTimeout: DefaultProduceTimeout,
		compression: DefaultCompression, guard: newGuard(nil)}
}

// DefaultCompression is no compression, not franz-go's own default of
// snappy: every Kafka client reads an uncompressed batch, while snappy,
// lz4 and zstd need a codec library some consumers lack (KafkaJS fails on
// the first snappy record without one). The plugin produces one record per
// batch, so a codec has little to work with anyway, and a topic's own
// compression.type still compresses on the brokers for those who want it.
const DefaultCompression = "none"

// compressionCodec is the codec SettingCompression's value name stands
// for; false for a name that is none of them.
func compressionCodec(name string) (kgo.CompressionCodec, bool) {
	switch name {
	case "none":
		return kgo.NoCompression(), true
	case "gzip":
		return kgo.GzipCompression(), true
	case "snappy":
		return kgo.SnappyCompression(), true
	case "lz4":
		return kgo.Lz4Compression(), true
	case "zstd":
		return kgo.ZstdCompression(), true
	}
	return kgo.CompressionCodec{}, false
}

func parseCompression(value string) (string, error) {
	name := strings.ToLower(strings.TrimSpace(value))
	if name == "" {
		return DefaultCompression, nil
	}
	if _, ok := compressionCodec(name); ok {
		return name, nil
	}
	return "", fmt.Errorf("setting %s: %q is not none, gzip, snappy, lz4 or zstd; leave it out for none, which every Kafka consumer reads, "+
		"or name a codec all of the topic's consumers decode", SettingCompression, pluginkit.Clip(value))
}

func newGuard(allowed []netip.Prefix) *netguard.Guard {
	return netguard.New(netguard.Config{Allowed: allowed, Plugin: "kafka", Target: "Kafka broker"})
}

func parseSettings(s transport.Settings) (settings, error) {
	out := defaultSettings()
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(s)) {
		value := s[key]
		var err error
		switch key {
		case SettingBrokers:
			if strings.TrimSpace(value) != "" {
				out.brokers, err = parseBrokers(value)
				if err != nil {
					err = fmt.Errorf("setting %s: %w", key, err)
				}
			}
		case SettingDialTimeout:
			out.dialTimeout, err = pluginkit.ParseDuration(key, value)
		case SettingProduceTimeout:
			out.produceTimeout, err = pluginkit.ParseDuration(key, value)
		case SettingSASLMechanism, SettingSASLUsername, SettingSASLPassword, SettingTLSCAFile:
			// Read together below.
		case SettingTLS:
			switch strings.TrimSpace(value) {
			case "true":
				out.tls = &tls.Config{MinVersion: tls.VersionTLS12}
			case "false", "":
			default:
				err = fmt.Errorf("setting %s: %q is neither true nor false", key, value)
			}
		case SettingCompression:
			out.compression, err = parseCompression(value)
		case SettingAllowedNetworks:
			var allowed []netip.Prefix
			allowed, err = netguard.ParseNetworks("setting "+key, value)
			out.guard = newGuard(allowed)
		default:
			err = fmt.Errorf("unknown setting %q: the kafka plugin takes %s", key, strings.Join(settingNames, ", "))
		}
		errs = append(errs, err)
	}
	if ca := strings.TrimSpace(s[SettingTLSCAFile]); ca != "" {
		if out.tls == nil {
			errs = append(errs, fmt.Errorf("setting %s is given but %s is not true; set %s: true to use it", SettingTLSCAFile, SettingTLS, SettingTLS))
		} else {
			var err error
			out.tls.RootCAs, err = pluginkit.CertPool(SettingTLSCAFile, ca)
			errs = append(errs, err)
		}
	}
	var err error
	out.sasl, err = parseSASL(s[SettingSASLMechanism], s[SettingSASLUsername], s[SettingSASLPassword])
	out.password = s[SettingSASLPassword]
	errs = append(errs, err)
	return out, errors.Join(errs...)
}

func parseSASL(mechanism, user, pass string) (sasl.Mechanism, error) {
	mechanism = strings.ToUpper(strings.TrimSpace(mechanism))
	if mechanism == "" {
		if user != "" || pass != "" {
			return nil, fmt.Errorf("setting %s or %s is given without %s; set it to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", SettingSASLUsername, SettingSASLPassword, SettingSASLMechanism)
		}
		return nil, nil
	}
	if user == "" || pass == "" {
		return nil, fmt.Errorf("setting %s is %s but %s or %s is empty; give both", SettingSASLMechanism, mechanism, SettingSASLUsername, SettingSASLPassword)
	}
	switch mechanism {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("setting %s: %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", SettingSASLMechanism, mechanism)
}

const brokersExample = "give a comma-separated host:port list such as kafka-1.internal:9092,kafka-2.internal:9092"

// parseBrokers reads a comma-separated host:port list.
func parseBrokers(value string) ([]string, error) {
	var out []string
	for part := range strings.SplitSeq(value, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if strings.Contains(part, "@") || strings.Contains(part, "://") {
			return nil, fmt.Errorf("broker %q is not a bare host:port (no scheme, no credentials; those are the plugin's %s and %s settings); %s", pluginkit.Clip(part), SettingTLS, SettingSASLPassword, brokersExample)
		}
		host, port, err := net.SplitHostPort(part)
		if err != nil {
			return nil, fmt.Errorf("broker %q is not host:port; %s", pluginkit.Clip(part), brokersExample)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("broker %q has port %q, not a number from 1 to 65535; %s", pluginkit.Clip(part), port, brokersExample)
		}
		if host == "" {
			return nil, fmt.Errorf("broker %q has no host; %s", pluginkit.Clip(part), brokersExample)
		}
		out = append(out, part)
	}
	if len(out) == 0 {
		return nil, errors.New("no broker; " + brokersExample)
	}
	return out, nil
}

// target is where one endpoint produces.
type target struct {
	topic   string
	brokers []string
}

// key names the broker list, for the client cache and error text.
func (tgt target) key() string { return strings.Join(tgt.brokers, ",") }

// resolve reads an endpoint's config against the plugin-wide settings.
func (st settings) resolve(e transport.Endpoint) (target, error) {
	if key, ok := pluginkit.UnknownKey(e.Config, ConfigTopic, ConfigBrokers); ok {
		return target{}, fmt.Errorf("unknown endpoint config %q: the kafka transport takes %s and, optionally, %s", key, ConfigTopic, ConfigBrokers)
	}
	if e.URL != "" {
		return target{}, fmt.Errorf("the kafka transport takes no URL; give the topic as %s and the brokers (if not the plugin's) as %s in the endpoint config", ConfigTopic, ConfigBrokers)
	}
	topic, ok := e.Config[ConfigTopic]
	if !ok {
		return target{}, fmt.Errorf("the endpoint config has no %s; give the topic to produce to, such as forms.submissions", ConfigTopic)
	}
	if err := checkTopic(topic); err != nil {
		return target{}, err
	}
	tgt := target{topic: topic}
	if raw := strings.TrimSpace(e.Config[ConfigBrokers]); raw != "" {
		b, err := parseBrokers(raw)
		if err != nil {
			return target{}, fmt.Errorf("endpoint config %s: %w", ConfigBrokers, err)
		}
		tgt.brokers = b
		return tgt, nil
	}
	if st.brokers == nil {
		return target{}, fmt.Errorf("the endpoint config has no %s and the kafka plugin has no %s setting; set the plugin's %s, such as kafka-1.internal:9092,kafka-2.internal:9092", ConfigBrokers, SettingBrokers, SettingBrokers)
	}
	tgt.brokers = st.brokers
	return tgt, nil
}

// ErrInvalidTopic is wrapped by every refusal of a topic name.
var ErrInvalidTopic = errors.New("invalid topic name")

// checkTopic applies Kafka's own rule (Topic.validate in the broker): 1 to
// 249 of [a-zA-Z0-9._-], and not "." or "..".
func checkTopic(topic string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s; give one of at most %d letters, digits, '.', '_' and '-', such as forms.submissions", ErrInvalidTopic, pluginkit.Clip(topic), why, MaxTopicBytes)
	}
	switch {
	case topic == "":
		return bad("it is empty")
	case topic == "." || topic == "..":
		return bad("Kafka reserves it")
	case len(topic) > MaxTopicBytes:
		return bad(fmt.Sprintf("it is %d bytes, more than the %d Kafka allows", len(topic), MaxTopicBytes))
	}
	for _, r := range topic {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return bad(fmt.Sprintf("it contains %q", r))
		}
	}
	return nil
}

// checkBrokers applies the SSRF guard to every seed broker, resolving
// names for at most the dial timeout. It returns the guard's refusal, or
// nil: a name that does not resolve now is checked again when dialled.
func checkBrokers(ctx context.Context, st settings, brokers []string) error {
	return pluginkit.CheckAddrs(ctx, st.guard, nil, st.dialTimeout, brokers...)
}

func tlsClient(conn net.Conn, cfg *tls.Config) *tls.Conn { return tls.Client(conn, cfg) }
