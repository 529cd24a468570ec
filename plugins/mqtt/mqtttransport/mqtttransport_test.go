package mqtttransport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/hymical/hymical/harness/transporttest"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

const (
	secretSignature = "v1,SIGNATURE-MUST-NOT-LEAK"
	secretBody      = `{"secret":"BODY-MUST-NOT-LEAK","html":"<a&b>","uni":"é\u2028"}`
	testPassword    = "PASSWORD-MUST-NOT-LEAK"
)

func message(url, topic string) transport.Message {
	return transport.Message{
		DeliveryID: "dlv_1",
		Attempt:    1,
		Endpoint:   transport.Endpoint{Config: map[string]string{ConfigURL: url, ConfigTopic: topic}},
		Headers: []transport.Header{
			{Name: "webhook-id", Value: "dlv_1"},
			{Name: "webhook-timestamp", Value: "1700000000"},
			{Name: "webhook-signature", Value: secretSignature},
		},
		Body: []byte(secretBody),
	}
}

func assertNoLeak(t *testing.T, out transport.Outcome) {
	t.Helper()
	transporttest.AssertNoLeak(t, out, "SIGNATURE-MUST-NOT-LEAK", "BODY-MUST-NOT-LEAK", testPassword)
}

func TestConfigure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		s       transport.Settings
		wantErr string
	}{
		{"no settings", nil, ""},
		{"every setting", transport.Settings{SettingURL: "ssl://mosquitto.internal:8883", SettingUsername: "u", SettingPassword: testPassword,
			SettingConnectTimeout: "2s", SettingPublishTimeout: "3s", SettingReconnectWait: "100ms", SettingReconnectWaitMax: "5s", SettingAllowedNetworks: "10.0.0.0/8"}, ""},
		{"credentials in the url", transport.Settings{SettingURL: "tcp://u:" + testPassword + "@mosquitto.internal"}, ""},
		{"a bad allow-list", transport.Settings{SettingAllowedNetworks: "localhost"}, `setting allowed_networks: "localhost" is not a CIDR`},
		{"an unknown setting", transport.Settings{"topic": "forms"}, `unknown setting "topic"`},
		{"a bad duration", transport.Settings{SettingPublishTimeout: "soon"}, "publish_timeout"},
		{"a negative duration", transport.Settings{SettingConnectTimeout: "-1s"}, "connect_timeout"},
		{"a max wait under the first", transport.Settings{SettingReconnectWait: "2s", SettingReconnectWaitMax: "1s"}, "reconnect_wait_max"},
		{"a bad scheme", transport.Settings{SettingURL: "http://x"}, `scheme "http"`},
		{"a password without a url", transport.Settings{SettingPassword: testPassword}, "setting password is given but setting url is not"},
		{"a password without a user", transport.Settings{SettingURL: "tcp://m.internal", SettingPassword: testPassword}, "without a user name"},
		{"TLS files for tcp", transport.Settings{SettingURL: "tcp://m.internal", SettingCAFile: "/etc/ca.pem"}, "not ssl://"},
		{"a missing CA file", transport.Settings{SettingURL: "ssl://m.internal", SettingCAFile: "/nonexistent/ca.pem"}, "tls_ca_file"},
		{"a cert without its key", transport.Settings{SettingURL: "ssl://m.internal", SettingCertFile: "/etc/c.pem"}, "go together"},
		{"a path in the url", transport.Settings{SettingURL: "tcp://m.internal/forms"}, "path, query or fragment"},
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
			}
			if err != nil && strings.Contains(err.Error(), testPassword) {
				t.Fatalf("Configure error %q contains the password", err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	withURL := New(Options{})
	if err := withURL.Configure(context.Background(), transport.Settings{SettingURL: "tcp://mq.example.com:1883", SettingUsername: "u", SettingPassword: testPassword}); err != nil {
		t.Fatal(err)
	}
	bare := New(Options{})
	tests := []struct {
		name    string
		tr      *Transport
		e       transport.Endpoint
		wantErr string
	}{
		{"topic and the plugin's url", withURL, transport.Endpoint{Config: map[string]string{ConfigTopic: "forms/submissions"}}, ""},
		{"topic and an endpoint url", bare, transport.Endpoint{Config: map[string]string{ConfigTopic: "forms", ConfigURL: "tcp://mq.example.com"}}, ""},
		{"the endpoint's URL field", bare, transport.Endpoint{URL: "ssl://mq.example.com:8883", Config: map[string]string{ConfigTopic: "forms"}}, ""},
		{"no topic", withURL, transport.Endpoint{Config: map[string]string{}}, "has no topic"},
		{"an empty topic", withURL, transport.Endpoint{Config: map[string]string{ConfigTopic: ""}}, "it is empty"},
		{"a + wildcard", withURL, transport.Endpoint{Config: map[string]string{ConfigTopic: "forms/+/x"}}, "wildcard"},
		{"a # wildcard", withURL, transport.Endpoint{Config: map[string]string{ConfigTopic: "forms/#"}}, "wildcard"},
		{"invalid UTF-8", withURL, transport.Endpoint{Config: map[string]string{ConfigTopic: "forms/\xff"}}, "not valid UTF-8"},
		{"a NUL", withURL, transport.Endpoint{Config: map[string]string{ConfigTopic: "forms\x00"}}, "NUL"},
		{"a $SYS topic", withURL, transport.Endpoint{Config: map[string]string{ConfigTopic: "$SYS/x"}}, "broker's own"},
		{"a topic too long", withURL, transport.Endpoint{Config: map[string]string{ConfigTopic: strings.Repeat("a", MaxTopicBytes+1)}}, "more than the 65535"},
		{"an unknown key", withURL, transport.Endpoint{Config: map[string]string{ConfigTopic: "f", "qos": "2"}}, `unknown endpoint config "qos"`},
		{"no broker at all", bare, transport.Endpoint{Config: map[string]string{ConfigTopic: "f"}}, "no url and the mqtt plugin has no url setting"},
		{"credentials in an endpoint url", bare, transport.Endpoint{Config: map[string]string{ConfigTopic: "f", ConfigURL: "tcp://u:" + testPassword + "@mq.example.com"}}, "credentials belong in the mqtt plugin's"},
		{"a bad endpoint scheme", bare, transport.Endpoint{Config: map[string]string{ConfigTopic: "f", ConfigURL: "amqp://mq.example.com"}}, `scheme "amqp"`},
		{"two different brokers", bare, transport.Endpoint{URL: "tcp://mq.example.com", Config: map[string]string{ConfigTopic: "f", ConfigURL: "tcp://mq2.example.com"}}, "give the broker once"},
		{"a loopback broker", bare, transport.Endpoint{Config: map[string]string{ConfigTopic: "f", ConfigURL: "tcp://127.0.0.1:1883"}}, "127.0.0.1"},
		{"a private broker", bare, transport.Endpoint{Config: map[string]string{ConfigTopic: "f", ConfigURL: "tcp://10.1.2.3:1883"}}, "10.1.2.3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.tr.Validate(context.Background(), tt.e)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate error = %v, want one containing %q", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), testPassword) {
				t.Fatalf("Validate error %q contains the password", err)
			}
		})
	}
}

// A broker the guard refuses is refused at Send too, with no request, and
// allowed_networks lets it through.
func TestSendRefusesWhatTheGuardRefuses(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	defer tr.Close()
	out := tr.Send(context.Background(), message("tcp://127.0.0.1:1", "forms"))
	if out.Kind != transport.OutcomePermanent || !out.NoRequest || !strings.Contains(out.Error, "127.0.0.1") {
		t.Fatalf("outcome = %+v, want a permanent refusal with no request naming the address", out)
	}
	var refused *netguard.RefusedError
	if err := tr.Validate(context.Background(), message("tcp://127.0.0.1:1", "forms").Endpoint); !errors.As(err, &refused) {
		t.Fatalf("Validate = %v, want a *netguard.RefusedError", err)
	}
	allowed := New(Options{})
	defer allowed.Close()
	if err := allowed.Configure(context.Background(), transport.Settings{SettingAllowedNetworks: "127.0.0.0/8"}); err != nil {
		t.Fatal(err)
	}
	if err := allowed.Validate(context.Background(), message("tcp://127.0.0.1:1", "forms").Endpoint); err != nil {
		t.Fatalf("Validate with loopback allowed = %v, want nil", err)
	}
}

func TestEnvelopeNeedsTheSignedHeadersAndUTF8(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		msg := message("tcp://mq.example.com", "f")
		var kept []transport.Header
		for _, h := range msg.Headers {
			if h.Name != name {
				kept = append(kept, h)
			}
		}
		msg.Headers = kept
		if _, err := envelope(msg); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: err = %v, want one naming it", name, err)
		}
	}
	msg := message("tcp://mq.example.com", "f")
	msg.Body = []byte("{\"x\":\"\xff\"}")
	if _, err := envelope(msg); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("invalid UTF-8 body: err = %v, want a refusal", err)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	f := failure{topic: "forms", server: "tcp://mq.internal:1883"}
	connack := func(code byte) error {
		return &ConnectError{Code: code, text: packets.ConnErrors[code].Error(), err: packets.ConnErrors[code]}
	}
	tests := []struct {
		name string
		err  error
		want transport.OutcomeKind
		text string
	}{
		{"bad protocol version (1)", connack(packets.ErrRefusedBadProtocolVersion), transport.OutcomePermanent, "CONNACK 1"},
		{"identifier rejected (2)", connack(packets.ErrRefusedIDRejected), transport.OutcomePermanent, "client identifier"},
		{"server unavailable (3)", connack(packets.ErrRefusedServerUnavailable), transport.OutcomeRetryable, "unavailable"},
		{"bad user name or password (4)", connack(packets.ErrRefusedBadUsernameOrPassword), transport.OutcomePermanent, "password"},
		{"not authorised (5)", connack(packets.ErrRefusedNotAuthorised), transport.OutcomePermanent, "CONNACK 5"},
		{"not connected after 5", fmt.Errorf("%w: %w", errNotConnected, connack(packets.ErrRefusedNotAuthorised)), transport.OutcomePermanent, "CONNACK 5"},
		{"a failed dial", &ConnectError{Code: packets.ErrNetworkError, text: "network Error : connection refused"}, transport.OutcomeRetryable, "could not connect"},
		{"a lost connection", fmt.Errorf("%w: %w", errNotConnected, &lostError{text: "the connection was lost: EOF"}), transport.OutcomeRetryable, "lost"},
		{"lost under the publish", errors.New("connection lost before Publish completed"), transport.OutcomeRetryable, "reconnects"},
		{"no PUBACK in time", context.DeadlineExceeded, transport.OutcomeRetryable, "no PUBACK"},
		{"cancelled", context.Canceled, transport.OutcomeRetryable, "cancelled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := classify(tt.err, f)
			assertNoLeak(t, out)
			if out.Kind != tt.want || !strings.Contains(out.Error, tt.text) || !strings.Contains(out.Error, f.server) {
				t.Fatalf("classify(%v) = %+v, want %v naming the broker and containing %q", tt.err, out, tt.want, tt.text)
			}
		})
	}
}

func TestSendAfterCloseMakesNoRequest(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	tr.Close()
	out := tr.Send(context.Background(), message("tcp://mq.example.com", "f"))
	if out.Kind != transport.OutcomeRetryable || !out.NoRequest {
		t.Fatalf("outcome = %+v, want retryable with no request", out)
	}
}

// The guard refuses a literal address on every try, so the delivery fails;
// an address a DNS answer gave may pass with the next answer, so the
// delivery is tried again. Neither sends anything.
func TestSendRetriesAGuardRefusalOfADNSAnswer(t *testing.T) {
	t.Parallel()
	tr := New(Options{Resolver: transporttest.LoopbackResolver{}})
	t.Cleanup(tr.Close)
	transporttest.CheckGuardCases(t, transporttest.GuardCases("tcp", "1883", ""), func(url string) transport.Outcome {
		return tr.Send(context.Background(), message(url, "forms"))
	})
}
