package kafkatransport

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

func TestConfigure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		s       transport.Settings
		wantErr string
	}{
		{"no settings", nil, ""},
		{"every setting", transport.Settings{SettingBrokers: "kafka-1.internal:9092, kafka-2.internal:9092", SettingDialTimeout: "2s",
			SettingProduceTimeout: "3s", SettingSASLMechanism: "SCRAM-SHA-512", SettingSASLUsername: "u", SettingSASLPassword: "PASSWORD-MUST-NOT-LEAK",
			SettingTLS: "true", SettingCompression: "gzip", SettingAllowedNetworks: "10.0.0.0/8"}, ""},
		{"an unknown setting", transport.Settings{"topic": "x"}, `unknown setting "topic"`},
		{"a broker with a scheme", transport.Settings{SettingBrokers: "kafka://k:9092"}, "not a bare host:port"},
		{"a broker without a port", transport.Settings{SettingBrokers: "kafka"}, "not host:port"},
		{"a bad port", transport.Settings{SettingBrokers: "kafka:0"}, "from 1 to 65535"},
		{"a bad duration", transport.Settings{SettingProduceTimeout: "soon"}, "produce_timeout"},
		{"an unknown mechanism", transport.Settings{SettingSASLMechanism: "GSSAPI", SettingSASLUsername: "u", SettingSASLPassword: "p"}, "GSSAPI"},
		{"a mechanism without a password", transport.Settings{SettingSASLMechanism: "PLAIN", SettingSASLUsername: "u"}, "sasl_password"},
		{"a password without a mechanism", transport.Settings{SettingSASLPassword: "PASSWORD-MUST-NOT-LEAK"}, "sasl_mechanism"},
		{"a CA file without tls", transport.Settings{SettingTLSCAFile: "/etc/ca.pem"}, "tls is not true"},
		{"a bad tls", transport.Settings{SettingTLS: "yes"}, "neither true nor false"},
		{"a bad allow-list", transport.Settings{SettingAllowedNetworks: "localhost"}, "allowed_networks"},
		{"each codec by name", transport.Settings{SettingCompression: "ZSTD"}, ""},
		{"an unknown codec", transport.Settings{SettingCompression: "brotli"}, `setting compression: "brotli" is not none, gzip, snappy, lz4 or zstd`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := New(Options{}).Configure(context.Background(), tt.s)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Configure: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Configure error = %v, want one containing %q", err, tt.wantErr)
			case err != nil && strings.Contains(err.Error(), "PASSWORD-MUST-NOT-LEAK"):
				t.Fatalf("Configure error leaks the password: %v", err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	if err := tr.Configure(context.Background(), transport.Settings{SettingBrokers: "203.0.113.9:9092",
		SettingAllowedNetworks: "203.0.113.0/24,198.51.100.0/24"}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", MaxTopicBytes)
	tests := []struct {
		name    string
		e       transport.Endpoint
		wantErr string
	}{
		{"a topic", transport.Endpoint{Config: map[string]string{ConfigTopic: "forms.sub_missions-1"}}, ""},
		{"the longest topic", transport.Endpoint{Config: map[string]string{ConfigTopic: long}}, ""},
		{"own brokers", transport.Endpoint{Config: map[string]string{ConfigTopic: "t", ConfigBrokers: "198.51.100.1:9092"}}, ""},
		{"no topic", transport.Endpoint{Config: map[string]string{}}, "no topic"},
		{"an empty topic", transport.Endpoint{Config: map[string]string{ConfigTopic: ""}}, "empty"},
		{"a topic too long", transport.Endpoint{Config: map[string]string{ConfigTopic: long + "a"}}, "250 bytes"},
		{"a dot", transport.Endpoint{Config: map[string]string{ConfigTopic: "."}}, "reserves"},
		{"two dots", transport.Endpoint{Config: map[string]string{ConfigTopic: ".."}}, "reserves"},
		{"a slash", transport.Endpoint{Config: map[string]string{ConfigTopic: "a/b"}}, `'/'`},
		{"a space", transport.Endpoint{Config: map[string]string{ConfigTopic: "a b"}}, `' '`},
		{"a non-ASCII letter", transport.Endpoint{Config: map[string]string{ConfigTopic: "formulär"}}, `'ä'`},
		{"an unknown key", transport.Endpoint{Config: map[string]string{ConfigTopic: "t", "url": "x"}}, `unknown endpoint config "url"`},
		{"a URL", transport.Endpoint{URL: "kafka://x", Config: map[string]string{ConfigTopic: "t"}}, "takes no URL"},
		{"credentials in brokers", transport.Endpoint{Config: map[string]string{ConfigTopic: "t", ConfigBrokers: "u:p@k:9092"}}, "no credentials"},
		{"a loopback broker", transport.Endpoint{Config: map[string]string{ConfigTopic: "t", ConfigBrokers: "127.0.0.1:9092"}}, "allowed_networks"},
		{"a private broker", transport.Endpoint{Config: map[string]string{ConfigTopic: "t", ConfigBrokers: "10.1.2.3:9092"}}, "allowed_networks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tr.Validate(context.Background(), tt.e)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	if err := New(Options{}).Validate(context.Background(), transport.Endpoint{Config: map[string]string{ConfigTopic: "t"}}); err == nil || !strings.Contains(err.Error(), SettingBrokers) {
		t.Errorf("Validate without any brokers = %v, want an error naming %s", err, SettingBrokers)
	}
}

// TestClassify is the table of what each error means, without a cluster.
func TestClassify(t *testing.T) {
	t.Parallel()
	refused := &netguard.RefusedError{Addr: "127.0.0.1:9092", Reason: "loopback"}
	tests := []struct {
		name string
		err  error
		f    failure
		want transport.OutcomeKind
		// noRequest: a refusal, nothing left the process.
		noRequest bool
	}{
		{"unknown topic", kerr.UnknownTopicOrPartition, failure{}, transport.OutcomePermanent, false},
		{"topic authorization", kerr.TopicAuthorizationFailed, failure{}, transport.OutcomePermanent, false},
		{"cluster authorization", kerr.ClusterAuthorizationFailed, failure{}, transport.OutcomePermanent, false},
		{"sasl", kerr.SaslAuthenticationFailed, failure{}, transport.OutcomePermanent, false},
		{"message too large", kerr.MessageTooLarge, failure{}, transport.OutcomePermanent, false},
		{"record list too large", kerr.RecordListTooLarge, failure{}, transport.OutcomePermanent, false},
		{"invalid topic", kerr.InvalidTopicException, failure{}, transport.OutcomePermanent, false},
		{"not enough replicas", kerr.NotEnoughReplicas, failure{}, transport.OutcomeRetryable, false},
		{"request timed out", kerr.RequestTimedOut, failure{}, transport.OutcomeRetryable, false},
		{"leader not available", kerr.LeaderNotAvailable, failure{}, transport.OutcomeRetryable, false},
		{"not leader", kerr.NotLeaderForPartition, failure{}, transport.OutcomeRetryable, false},
		{"an unlisted code", kerr.CorruptMessage, failure{}, transport.OutcomeRetryable, false},
		{"wrapped", errors.Join(errors.New("x"), kerr.MessageTooLarge), failure{}, transport.OutcomePermanent, false},
		{"client deadline", context.DeadlineExceeded, failure{}, transport.OutcomeRetryable, false},
		{"record timeout", kgo.ErrRecordTimeout, failure{}, transport.OutcomeRetryable, false},
		{"cancelled", context.Canceled, failure{}, transport.OutcomeRetryable, false},
		{"guard", refused, failure{}, transport.OutcomePermanent, true},
		{"deadline after refused dials", context.DeadlineExceeded, failure{connErr: refused}, transport.OutcomePermanent, true},
		{"closing", kgo.ErrClientClosed, failure{}, transport.OutcomeRetryable, true},
		{"deadline after refused credentials", context.DeadlineExceeded, failure{connErr: kerr.SaslAuthenticationFailed}, transport.OutcomePermanent, false},
		{"deadline after a refused connection", context.DeadlineExceeded, failure{connErr: errors.New("connect: connection refused")}, transport.OutcomeRetryable, false},
		{"anything else", errors.New("boom"), failure{}, transport.OutcomeRetryable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.f.topic, tt.f.brokers, tt.f.waited = "forms", "k:9092", time.Second
			out := classify(tt.err, tt.f)
			if out.Kind != tt.want || out.NoRequest != tt.noRequest {
				t.Fatalf("classify(%v) = %+v, want %s (no request: %v)", tt.err, out, tt.want, tt.noRequest)
			}
			if !strings.Contains(out.Error, "forms") && !tt.noRequest {
				t.Errorf("outcome %q does not name the topic", out.Error)
			}
		})
	}
}

func TestSendAfterCloseMakesNoRequest(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	if err := tr.Configure(context.Background(), transport.Settings{SettingBrokers: "203.0.113.9:9092"}); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	out := tr.Send(context.Background(), signed(t, "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", `{}`))
	if !out.NoRequest || out.Kind != transport.OutcomeRetryable {
		t.Fatalf("Send after Close = %+v, want deferred", out)
	}
}
