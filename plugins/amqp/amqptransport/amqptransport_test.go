package amqptransport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hymical/hymical/harness/transporttest"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// Values the tests hand over; no error text may ever contain them.
const (
	secretSignature = "v1,SIGNATURE-MUST-NOT-LEAK"
	secretBody      = `{"secret":"BODY-MUST-NOT-LEAK"}`
	testPassword    = "PASSWORD-MUST-NOT-LEAK"
)

func message(url, exchange, key string) transport.Message {
	return transport.Message{
		DeliveryID: "dlv_1",
		Attempt:    1,
		Endpoint: transport.Endpoint{Config: map[string]string{
			ConfigURL: url, ConfigExchange: exchange, ConfigRoutingKey: key,
		}},
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
		{"every setting", transport.Settings{SettingURL: "amqps://u:" + testPassword + "@rabbitmq.internal:5671/forms?certfile=/etc/hymical/client.pem&keyfile=/etc/hymical/client.key",
			SettingConnectTimeout: "2s", SettingConfirmTimeout: "3s", SettingReconnectWait: "100ms", SettingReconnectWaitMax: "5s", SettingAllowedNetworks: "10.0.0.0/8"}, ""},
		{"a bad allow-list", transport.Settings{SettingAllowedNetworks: "localhost"}, `setting allowed_networks: "localhost" is not a CIDR`},
		{"an unknown setting", transport.Settings{"exchange": "forms"}, `unknown setting "exchange"`},
		{"a bad duration", transport.Settings{SettingConfirmTimeout: "soon"}, "confirm_timeout"},
		{"a negative duration", transport.Settings{SettingConnectTimeout: "-1s"}, "connect_timeout"},
		{"a max wait under the first", transport.Settings{SettingReconnectWait: "2s", SettingReconnectWaitMax: "1s"}, "reconnect_wait_max"},
		{"a bad url", transport.Settings{SettingURL: "http://x"}, `scheme "http"`},
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
				t.Fatalf("Configure error %q shows the password", err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	if err := tr.Configure(context.Background(), transport.Settings{SettingAllowedNetworks: "127.0.0.1, 10.0.0.0/8"}); err != nil {
		t.Fatal(err)
	}
	cfg := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	const u = "amqp://hymical:" + testPassword + "@127.0.0.1:5672/forms"
	tests := []struct {
		name    string
		e       transport.Endpoint
		wantErr string // "" means valid
	}{
		{"an exchange, a routing key and a url", transport.Endpoint{Config: cfg("exchange", "forms", "routing_key", "forms.submissions", "url", u)}, ""},
		{"the default exchange and a queue", transport.Endpoint{Config: cfg("exchange", "", "routing_key", "submissions", "url", u)}, ""},
		{"a fanout exchange without a key", transport.Endpoint{Config: cfg("exchange", "forms.fanout", "routing_key", "", "url", u)}, ""},
		{"TLS to a private broker", transport.Endpoint{Config: cfg("exchange", "x", "routing_key", "k", "url", "amqps://u:p@10.0.0.1:5671/%2F")}, ""},
		{"the url in the endpoint's URL", transport.Endpoint{URL: u, Config: cfg("exchange", "x", "routing_key", "k")}, ""},
		{"no exchange", transport.Endpoint{Config: cfg("routing_key", "k", "url", u)}, "no exchange"},
		{"no routing key", transport.Endpoint{Config: cfg("exchange", "x", "url", u)}, "no routing_key"},
		{"the default exchange without a queue", transport.Endpoint{Config: cfg("exchange", "", "routing_key", "", "url", u)}, "queue's name"},
		{"an exchange with a space", transport.Endpoint{Config: cfg("exchange", "forms x", "routing_key", "k", "url", u)}, "invalid exchange name"},
		{"an exchange with a newline", transport.Endpoint{Config: cfg("exchange", "forms\n", "routing_key", "k", "url", u)}, "white space"},
		{"an exchange of invalid UTF-8", transport.Endpoint{Config: cfg("exchange", "x\xff", "routing_key", "k", "url", u)}, "UTF-8"},
		{"an overlong exchange", transport.Endpoint{Config: cfg("exchange", strings.Repeat("x", 256), "routing_key", "k", "url", u)}, "256 bytes, more than the 255"},
		{"an overlong routing key", transport.Endpoint{Config: cfg("exchange", "x", "routing_key", strings.Repeat("k", 256), "url", u)}, "invalid routing key"},
		{"a routing key with a tab", transport.Endpoint{Config: cfg("exchange", "x", "routing_key", "a\tb", "url", u)}, "invalid routing key"},
		{"no url", transport.Endpoint{Config: cfg("exchange", "x", "routing_key", "k")}, "no url"},
		{"a url without a scheme", transport.Endpoint{Config: cfg("exchange", "x", "routing_key", "k", "url", "127.0.0.1:5672")}, "no scheme"},
		{"an http url", transport.Endpoint{Config: cfg("exchange", "x", "routing_key", "k", "url", "http://127.0.0.1:5672")}, `scheme "http"`},
		{"a url without a host", transport.Endpoint{Config: cfg("exchange", "x", "routing_key", "k", "url", "amqp:///vhost")}, "no host"},
		{"a url that does not parse", transport.Endpoint{Config: cfg("exchange", "x", "routing_key", "k", "url", "amqp://u:"+testPassword+"@[::1")}, "does not parse"},
		{"a port that is not a number", transport.Endpoint{Config: cfg("exchange", "x", "routing_key", "k", "url", "amqp://u:"+testPassword+"@127.0.0.1:amqp/")}, "does not parse"},
		{"a TLS file in an endpoint's url", transport.Endpoint{Config: cfg("exchange", "x", "routing_key", "k", "url", "amqps://10.0.0.1:5671/?cacertfile=/etc/shadow")}, "file on the plugin's host"},
		{"two different urls", transport.Endpoint{URL: "amqp://a:5672/", Config: cfg("exchange", "x", "routing_key", "k", "url", u)}, "both"},
		{"an unknown key", transport.Endpoint{Config: cfg("exchange", "x", "routing_key", "k", "url", u, "subject", "x")}, `unknown endpoint config "subject"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tr.Validate(context.Background(), tt.e)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate error = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), testPassword) {
				t.Fatalf("Validate error %q shows the password", err)
			}
			// What Validate refuses, Send refuses permanently, without
			// trying the network.
			msg := message("", "", "")
			msg.Endpoint = tt.e
			if out := tr.Send(context.Background(), msg); out.Kind != transport.OutcomePermanent || !out.NoRequest {
				t.Fatalf("Send of an endpoint Validate refuses: outcome %+v, want permanent, no request", out)
			}
		})
	}
}

// Without an allow-list, the SSRF guard refuses brokers that are not
// globally reachable, at Validate and at Send, saying which setting lets
// them through.
func TestValidateRefusesWhatTheGuardRefuses(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	cfg := func(url string) transport.Endpoint {
		return transport.Endpoint{Config: map[string]string{"exchange": "x", "routing_key": "k", "url": url}}
	}
	tests := []struct {
		name    string
		e       transport.Endpoint
		wantErr string // "" means valid
	}{
		{"a public broker", cfg("amqp://93.184.216.34:5672/"), ""},
		{"a public broker over TLS", cfg("amqps://[2606:2800:220:1::1]:5671/"), ""},
		{"loopback", cfg("amqp://u:" + testPassword + "@127.0.0.1:5672/"), "127.0.0.0/8, loopback"},
		{"the default port on loopback", cfg("amqp://127.0.0.1/"), "127.0.0.1:5672"},
		{"a name resolving to loopback", cfg("amqp://localhost:5672/"), "localhost resolves to"},
		{"a private broker", cfg("amqps://10.0.0.1:5671/"), "10.0.0.0/8, private-use"},
		{"the metadata service", cfg("amqp://169.254.169.254:5672/"), "169.254.0.0/16, link-local"},
		{"NAT64 of a private address", cfg("amqp://[64:ff9b::a00:5]:5672/"), "leads to 10.0.0.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tr.Validate(context.Background(), tt.e)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate error = %v, want one containing %q", err, tt.wantErr)
			}
			var refused *netguard.RefusedError
			if !errors.As(err, &refused) || strings.Contains(err.Error(), testPassword) {
				t.Fatalf("Validate error = %v, want a *netguard.RefusedError without the password", err)
			}
			if !strings.Contains(err.Error(), "the amqp plugin's allowed_networks setting") {
				t.Errorf("refusal %q does not name the setting that allows it", err)
			}
			msg := message("", "", "")
			msg.Endpoint = tt.e
			if out := tr.Send(context.Background(), msg); out.Kind != transport.OutcomePermanent || !out.NoRequest || out.Error != err.Error() {
				t.Fatalf("Send: outcome %+v, want permanent, no request, with Validate's refusal", out)
			}
		})
	}
}

func TestDefaultURLSetting(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	if err := tr.Configure(context.Background(), transport.Settings{SettingURL: "amqp://u:p@127.0.0.1:5672/", SettingAllowedNetworks: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Validate(context.Background(), transport.Endpoint{Config: map[string]string{ConfigExchange: "x", ConfigRoutingKey: "k"}}); err != nil {
		t.Fatalf("with the url setting, an endpoint naming only its exchange and key: %v", err)
	}
}

func TestPublishingNeedsTheSignedHeaders(t *testing.T) {
	t.Parallel()
	for _, drop := range []string{"webhook-timestamp", "webhook-signature"} {
		msg := message("amqp://93.184.216.34:1/", "x", "k")
		var kept []transport.Header
		for _, h := range msg.Headers {
			if h.Name != drop {
				kept = append(kept, h)
			}
		}
		msg.Headers = kept
		out := New(Options{}).Send(context.Background(), msg)
		assertNoLeak(t, out)
		if out.Kind != transport.OutcomePermanent || !out.NoRequest || !strings.Contains(out.Error, drop) {
			t.Errorf("without %s: outcome = %+v, want permanent, no request, naming it", drop, out)
		}
	}
}

// Every reply code a broker may answer with is classified, as is every
// failure of the client or the connection.
func TestClassify(t *testing.T) {
	t.Parallel()
	f := failure{destination: "forms", routingKey: "forms.submissions", server: "amqp://127.0.0.1:5672/", waited: 2 * time.Second}
	server := func(code int, reason string) error {
		return fmt.Errorf("channel shutdown error: %w", &amqp.Error{Code: code, Reason: reason, Server: true})
	}
	down := func(err error) error { return fmt.Errorf("%w: %w", errNotConnected, err) }
	tests := []struct {
		name   string
		err    error
		want   transport.OutcomeKind
		inText string
	}{
		{"312 NO_ROUTE returned", &ReturnedError{Code: amqp.NoRoute, Text: "NO_ROUTE"}, transport.OutcomeRetryable, "bind a queue"},
		{"311 CONTENT_TOO_LARGE", server(amqp.ContentTooLarge, "CONTENT_TOO_LARGE"), transport.OutcomePermanent, "max_message_size"},
		{"313 NO_CONSUMERS", server(amqp.NoConsumers, "NO_CONSUMERS"), transport.OutcomeRetryable, "313"},
		{"320 CONNECTION_FORCED", server(amqp.ConnectionForced, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"), transport.OutcomeRetryable, "320"},
		{"402 INVALID_PATH", server(amqp.InvalidPath, "INVALID_PATH"), transport.OutcomePermanent, "virtual host"},
		{"403 ACCESS_REFUSED", server(amqp.AccessRefused, "ACCESS_REFUSED - write access to exchange 'forms' in vhost '/' refused for user 'limited'"), transport.OutcomePermanent, "write permission"},
		{"404 NOT_FOUND", server(amqp.NotFound, "NOT_FOUND - no exchange 'forms' in vhost '/'"), transport.OutcomePermanent, "declare it"},
		{"405 RESOURCE_LOCKED", server(amqp.ResourceLocked, "RESOURCE_LOCKED"), transport.OutcomeRetryable, "405"},
		{"406 PRECONDITION_FAILED", server(amqp.PreconditionFailed, "PRECONDITION_FAILED - message size 200 is larger than configured max size 100"), transport.OutcomePermanent, "larger than configured"},
		{"501 FRAME_ERROR", server(amqp.FrameError, "FRAME_ERROR"), transport.OutcomeRetryable, "501"},
		{"502 SYNTAX_ERROR", server(amqp.SyntaxError, "SYNTAX_ERROR"), transport.OutcomePermanent, "could not parse"},
		{"503 COMMAND_INVALID", server(amqp.CommandInvalid, "COMMAND_INVALID"), transport.OutcomeRetryable, "503"},
		{"504 CHANNEL_ERROR", server(amqp.ChannelError, "CHANNEL_ERROR"), transport.OutcomeRetryable, "504"},
		{"505 UNEXPECTED_FRAME", server(amqp.UnexpectedFrame, "UNEXPECTED_FRAME"), transport.OutcomeRetryable, "505"},
		{"506 RESOURCE_ERROR", server(amqp.ResourceError, "RESOURCE_ERROR"), transport.OutcomeRetryable, "short of a resource"},
		{"530 NOT_ALLOWED for a vhost", down(server(amqp.NotAllowed, "NOT_ALLOWED - vhost forms not found")), transport.OutcomePermanent, "virtual host"},
		{"530 NOT_ALLOWED for a connection limit", down(server(amqp.NotAllowed, "NOT_ALLOWED - connection limit (10) is reached")), transport.OutcomeRetryable, "limit"},
		{"540 NOT_IMPLEMENTED", server(amqp.NotImplemented, "NOT_IMPLEMENTED"), transport.OutcomePermanent, "confirms"},
		{"541 INTERNAL_ERROR", server(amqp.InternalError, "INTERNAL_ERROR"), transport.OutcomeRetryable, "541"},
		{"a code no one knows", server(599, "NEW"), transport.OutcomeRetryable, "599"},
		{"refused credentials at the dial", down(&dialError{text: "Exception (403) Reason: \"username or password not allowed\"", err: amqp.ErrCredentials}), transport.OutcomePermanent, "user name or password"},
		{"no shared SASL mechanism", down(&dialError{text: "x", err: amqp.ErrSASL}), transport.OutcomePermanent, "authentication mechanism"},
		{"a vhost closed without a reply", down(&dialError{text: "x", err: amqp.ErrVhost}), transport.OutcomePermanent, "virtual host"},
		{"a socket that broke, as the client reports it", &amqp.Error{Code: amqp.FrameError, Reason: "read tcp: connection reset by peer"}, transport.OutcomeRetryable, "connection failed under the publish"},
		{"a broken socket while down", down(&dialError{text: "x", err: &amqp.Error{Code: amqp.FrameError, Reason: "EOF"}}), transport.OutcomeRetryable, "keeps reconnecting"},
		{"a connection lost", down(&lostError{err: errors.New("the connection was lost: EOF")}), transport.OutcomeRetryable, "keeps reconnecting"},
		{"a broker closing the connection for a restart", down(&lostError{err: errors.New("lost"), cause: &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED", Server: true}}), transport.OutcomeRetryable, "320"},
		{"connection refused at the dial", down(&dialError{text: "dial tcp: connection refused", err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}}), transport.OutcomeRetryable, "connection refused"},
		{"the client's own closed channel", amqp.ErrClosed, transport.OutcomeRetryable, "closed under the publish"},
		{"a nack", errNacked, transport.OutcomeRetryable, "nacked"},
		{"a blocked broker", fmt.Errorf("%w (low on memory)", errBlocked), transport.OutcomeRetryable, "low on memory"},
		{"no confirm by the deadline", context.DeadlineExceeded, transport.OutcomeRetryable, "within 2s"},
		{"cancelled", context.Canceled, transport.OutcomeRetryable, "abandoned"},
		{"an unexpected error", io.ErrUnexpectedEOF, transport.OutcomeRetryable, "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := classify(tt.err, f)
			if out.Kind != tt.want || !strings.Contains(out.Error, tt.inText) {
				t.Fatalf("classify(%v) = %+v, want %s containing %q", tt.err, out, tt.want, tt.inText)
			}
			// A failed publish may have reached the broker, or tried to.
			if out.NoRequest {
				t.Fatalf("classify(%v) = %+v, want it counted as an attempt", tt.err, out)
			}
		})
	}
	// Every code the client names is in the table, so none is classified
	// by accident.
	for _, code := range []int{amqp.ContentTooLarge, amqp.NoRoute, amqp.NoConsumers, amqp.ConnectionForced, amqp.InvalidPath,
		amqp.AccessRefused, amqp.NotFound, amqp.ResourceLocked, amqp.PreconditionFailed, amqp.FrameError, amqp.SyntaxError,
		amqp.CommandInvalid, amqp.ChannelError, amqp.UnexpectedFrame, amqp.ResourceError, amqp.NotAllowed, amqp.NotImplemented, amqp.InternalError} {
		if _, ok := replyCodes[code]; !ok {
			t.Errorf("reply code %d is not in replyCodes", code)
		}
	}
}

func TestOutcomeTextIsScrubbed(t *testing.T) {
	t.Parallel()
	srv, err := parseServer("amqp://hymical:"+testPassword+"@127.0.0.1:5672/forms", false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(srv.shown, testPassword) || strings.Contains(srv.shown, "hymical") {
		t.Fatalf("shown broker %q carries credentials", srv.shown)
	}
	if srv.shown != "amqp://127.0.0.1:5672/forms" {
		t.Fatalf("shown broker = %q", srv.shown)
	}
	msg := message(srv.raw, "x", "k")
	quoting := fmt.Errorf("failed: %s %s %s %s", testPassword, secretSignature, secretBody, strings.Repeat("z", 2000))
	out := classify(quoting, failure{destination: "x", routingKey: "k", server: srv.shown})
	out.Error = scrub(out.Error, srv, msg)
	assertNoLeak(t, out)
}

// A send after Close sends nothing: retryable, and no request went out.
func TestSendAfterCloseMakesNoRequest(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	tr.Close()
	out := tr.Send(context.Background(), message("amqp://93.184.216.34:1/", "x", "k"))
	if out.Kind != transport.OutcomeRetryable || !out.NoRequest || !strings.Contains(out.Error, "shutting down") {
		t.Fatalf("outcome = %+v, want retryable, no request, saying the plugin is shutting down", out)
	}
}

// The guard refuses a literal address on every try, so the delivery fails;
// an address a DNS answer gave may pass with the next answer, so the
// delivery is tried again. Neither sends anything.
func TestSendRetriesAGuardRefusalOfADNSAnswer(t *testing.T) {
	t.Parallel()
	tr := New(Options{Resolver: transporttest.LoopbackResolver{}})
	t.Cleanup(tr.Close)
	transporttest.CheckGuardCases(t, transporttest.GuardCases("amqp", "5672", "/"), func(url string) transport.Outcome {
		return tr.Send(context.Background(), message(url, "forms", "k"))
	})
}
