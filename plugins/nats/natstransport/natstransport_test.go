package natstransport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hymical/hymical/harness/transporttest"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// Values the tests hand over; no error text may ever contain them.
const (
	secretSignature = "v1,SIGNATURE-MUST-NOT-LEAK"
	secretBody      = `{"secret":"BODY-MUST-NOT-LEAK"}`
)

// message is a delivery to subject; its id is derived from the subject, so
// tests that send to different subjects do not meet in JetStream's
// duplicate window.
func message(subject string) transport.Message {
	id := "dlv_" + strings.NewReplacer(".", "_", "*", "_", ">", "_").Replace(subject)
	return transport.Message{
		DeliveryID: id,
		Attempt:    1,
		Endpoint:   transport.Endpoint{Config: map[string]string{ConfigSubject: subject}},
		Headers: []transport.Header{
			{Name: "webhook-id", Value: id},
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
		{"every setting", transport.Settings{SettingURL: "nats://a:4222,nats://b:4222", SettingConnectTimeout: "2s", SettingReconnectWait: "100ms", SettingAckTimeout: "3s", SettingAllowedNetworks: "10.0.0.0/8, fd00::/8"}, ""},
		{"a bad allow-list", transport.Settings{SettingAllowedNetworks: "10.0.0.0/33"}, `setting allowed_networks: "10.0.0.0/33" is not a CIDR`},
		{"an unknown setting", transport.Settings{"servers": "nats://a"}, `unknown setting "servers"`},
		{"a bad duration", transport.Settings{SettingAckTimeout: "soon"}, "ack_timeout"},
		{"a negative duration", transport.Settings{SettingConnectTimeout: "-1s"}, "connect_timeout"},
		{"a url without a scheme", transport.Settings{SettingURL: "127.0.0.1:4222"}, "no scheme"},
		{"a url with an http scheme", transport.Settings{SettingURL: "http://127.0.0.1:4222"}, `scheme "http"`},
		{"a list with an empty entry", transport.Settings{SettingURL: "nats://a:4222,,nats://b:4222"}, "empty"},
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
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	configure := func(s transport.Settings) *Transport {
		tr := New(Options{})
		if err := tr.Configure(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	withDefault := configure(transport.Settings{SettingURL: "nats://127.0.0.1:4222", SettingAllowedNetworks: "127.0.0.1"})
	noDefault := configure(transport.Settings{SettingAllowedNetworks: "10.0.0.0/8"})
	// Without an allow-list, the SSRF guard refuses servers that are not
	// globally reachable, whether named by the endpoint or the plugin.
	guarded := New(Options{})
	guardedDefault := configure(transport.Settings{SettingURL: "nats://127.0.0.1:4222"})
	cfg := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		tr      *Transport
		e       transport.Endpoint
		wantErr string // "" means valid
	}{
		{"a subject and the plugin's url", withDefault, transport.Endpoint{Config: cfg("subject", "forms.submissions")}, ""},
		{"a subject and its own url", noDefault, transport.Endpoint{Config: cfg("subject", "forms.x", "url", "nats://user:pw@10.0.0.1:4222")}, ""},
		{"its own url in the endpoint's URL", noDefault, transport.Endpoint{URL: "tls://nats.internal:4222", Config: cfg("subject", "forms.x")}, ""},
		{"a cluster list", noDefault, transport.Endpoint{Config: cfg("subject", "a.b.c", "url", "nats://n1:4222, nats://n2:4222")}, ""},
		{"no subject", withDefault, transport.Endpoint{}, "no subject"},
		{"an empty subject", withDefault, transport.Endpoint{Config: cfg("subject", "")}, "no subject"},
		{"a wildcard *", withDefault, transport.Endpoint{Config: cfg("subject", "forms.*")}, "wildcards"},
		{"a wildcard >", withDefault, transport.Endpoint{Config: cfg("subject", "forms.>")}, "wildcards"},
		{"a space", withDefault, transport.Endpoint{Config: cfg("subject", "forms submissions")}, "white space"},
		{"a tab", withDefault, transport.Endpoint{Config: cfg("subject", "forms\tx")}, "white space"},
		{"a leading dot", withDefault, transport.Endpoint{Config: cfg("subject", ".forms")}, "empty token"},
		{"a doubled dot", withDefault, transport.Endpoint{Config: cfg("subject", "forms..x")}, "empty token"},
		{"a trailing dot", withDefault, transport.Endpoint{Config: cfg("subject", "forms.")}, "empty token"},
		{"the JetStream API", withDefault, transport.Endpoint{Config: cfg("subject", "$JS.API.STREAM.DELETE.X")}, "belong to the server"},
		{"an inbox", withDefault, transport.Endpoint{Config: cfg("subject", "_INBOX.abc")}, "replies"},
		{"an overlong subject", withDefault, transport.Endpoint{Config: cfg("subject", strings.Repeat("a", MaxSubjectBytes+1))}, "bytes"},
		{"invalid UTF-8", withDefault, transport.Endpoint{Config: cfg("subject", "forms.\xff")}, "UTF-8"},
		{"no server anywhere", noDefault, transport.Endpoint{Config: cfg("subject", "forms.x")}, "names no server"},
		{"an http url", noDefault, transport.Endpoint{Config: cfg("subject", "forms.x", "url", "https://example.com")}, `scheme "https"`},
		{"a url without a host", noDefault, transport.Endpoint{Config: cfg("subject", "forms.x", "url", "nats://")}, "no host"},
		{"a url that does not parse", noDefault, transport.Endpoint{Config: cfg("subject", "forms.x", "url", "nats://u:"+testPassword+"@[::1")}, "does not parse"},
		{"two different urls", noDefault, transport.Endpoint{URL: "nats://a:4222", Config: cfg("subject", "forms.x", "url", "nats://b:4222")}, "both"},
		{"a public server", guarded, transport.Endpoint{Config: cfg("subject", "forms.x", "url", "nats://93.184.216.34:4222")}, ""},
		{"a loopback server", guarded, transport.Endpoint{Config: cfg("subject", "forms.x", "url", "nats://127.0.0.1:4222")}, "refused to connect to 127.0.0.1:4222: it is in 127.0.0.0/8, loopback"},
		{"the plugin's loopback url", guardedDefault, transport.Endpoint{Config: cfg("subject", "forms.x")}, "127.0.0.0/8, loopback"},
		{"a private server outside the allow-list", noDefault, transport.Endpoint{Config: cfg("subject", "forms.x", "url", "nats://u:"+testPassword+"@192.168.1.5:4222")}, "192.168.0.0/16, private-use"},
		{"a name resolving to loopback", guarded, transport.Endpoint{Config: cfg("subject", "forms.x", "url", "nats://localhost:4222")}, "localhost resolves to"},
		{"a cluster with one metadata address", guarded, transport.Endpoint{Config: cfg("subject", "forms.x", "url", "nats://93.184.216.34:4222,nats://169.254.169.254:4222")}, "169.254.0.0/16, link-local"},
		{"NAT64 of a private address", guarded, transport.Endpoint{Config: cfg("subject", "forms.x", "url", "nats://[64:ff9b::a00:5]:4222")}, "leads to 10.0.0.5"},
		{"a websocket to a unique-local address", guarded, transport.Endpoint{URL: "wss://[fd00::1]/nats", Config: cfg("subject", "forms.x")}, "fc00::/7"},
		{"an unknown key", withDefault, transport.Endpoint{Config: cfg("subject", "forms.x", "stream", "FORMS")}, `unknown endpoint config "stream"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.tr.Validate(context.Background(), tt.e)
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
			var refused *netguard.RefusedError
			if errors.As(err, &refused) && !strings.Contains(err.Error(), "the nats plugin's allowed_networks setting") {
				t.Errorf("refusal %q does not name the setting that allows it", err)
			}
			// What Validate refuses, Send refuses permanently, without
			// trying the network.
			msg := message("")
			msg.Endpoint = tt.e
			if out := tt.tr.Send(context.Background(), msg); out.Kind != transport.OutcomePermanent || !out.NoRequest {
				t.Fatalf("Send of an endpoint Validate refuses: outcome %+v, want permanent, no request", out)
			}
		})
	}
}

func TestSendRefusesHeadersNATSCannotCarry(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	for _, h := range []transport.Header{
		{Name: "", Value: "x"},
		{Name: "bad name", Value: "x"},
		{Name: "bad:name", Value: "x"},
		{Name: "webhook-signature", Value: secretSignature + "\r\nNats-Msg-Id: forged"},
	} {
		msg := message("forms.x")
		msg.Endpoint.Config[ConfigURL] = "nats://127.0.0.1:1"
		msg.Headers = append(msg.Headers, h)
		out := tr.Send(context.Background(), msg)
		assertNoLeak(t, out)
		if out.Kind != transport.OutcomePermanent || !out.NoRequest || !strings.Contains(out.Error, ErrInvalidHeader.Error()) {
			t.Errorf("header %q: outcome = %+v, want permanent, no request", h.Name, out)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	f := failure{subject: "forms.x", servers: "nats://127.0.0.1:4222", waited: 2 * time.Second, connected: true}
	perm := &PermissionError{Subject: "forms.x", Detail: `Permissions Violation for Publish to "forms.x"`}
	tests := []struct {
		name   string
		err    error
		cause  error
		want   transport.OutcomeKind
		inText string
	}{
		{"a permissions violation seen by the watcher", context.Canceled, perm, transport.OutcomePermanent, "refused the publish"},
		{"a permissions violation in the error", fmt.Errorf("x: %w", nats.ErrPermissionViolation), nil, transport.OutcomePermanent, "permission"},
		{"a bad subject", nats.ErrBadSubject, nil, transport.OutcomePermanent, "invalid NATS subject"},
		{"over max_payload", nats.ErrMaxPayload, nil, transport.OutcomePermanent, "max_payload"},
		{"a connected server without headers support", nats.ErrHeadersNotSupported, nil, transport.OutcomePermanent, "headers"},
		{"over max_msg_size", fmt.Errorf("nats: %w", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamMessageExceedsMaximum, Description: "message size exceeds maximum allowed"}), nil, transport.OutcomePermanent, "max_msg_size"},
		{"storage full", fmt.Errorf("nats: %w", &jetstream.APIError{Code: 503, ErrorCode: 10047, Description: "insufficient storage resources available"}), nil, transport.OutcomeRetryable, "10047"},
		{"no stream", jetstream.ErrNoStreamResponse, nil, transport.OutcomeRetryable, "no responders"},
		{"no responders", nats.ErrNoResponders, nil, transport.OutcomeRetryable, "no responders"},
		{"not connected", errNotConnected, nil, transport.OutcomeRetryable, "not connected"},
		{"reconnecting", nats.ErrReconnectBufExceeded, nil, transport.OutcomeRetryable, "not connected"},
		{"closed", nats.ErrConnectionClosed, nil, transport.OutcomeRetryable, "not connected"},
		{"no servers", nats.ErrNoServers, nil, transport.OutcomeRetryable, "not connected"},
		{"draining", nats.ErrConnectionDraining, nil, transport.OutcomeRetryable, "not connected"},
		{"no ack by the deadline", context.DeadlineExceeded, context.DeadlineExceeded, transport.OutcomeRetryable, "no publish ack"},
		{"a client timeout", nats.ErrTimeout, nil, transport.OutcomeRetryable, "within 2s"},
		{"cancelled", context.Canceled, context.Canceled, transport.OutcomeRetryable, "abandoned"},
		{"the plugin closing", errClosed, nil, transport.OutcomeRetryable, "shutting down"},
		{"anything else", errors.New("something odd"), nil, transport.OutcomeRetryable, "something odd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := classify(tt.err, tt.cause, f)
			if out.Kind != tt.want || !strings.Contains(out.Error, tt.inText) {
				t.Fatalf("classify(%v) = %+v, want %s containing %q", tt.err, out, tt.want, tt.inText)
			}
			// Only the plugin's own closing comes before any publish; every
			// other failure may have sent the message, or tried to.
			if want := errors.Is(tt.err, errClosed); out.NoRequest != want {
				t.Fatalf("classify(%v) = %+v, want NoRequest %v", tt.err, out, want)
			}
		})
	}
}

func TestOutcomeTextIsScrubbed(t *testing.T) {
	t.Parallel()
	srv, err := parseServers("nats://hymical:" + testPassword + "@127.0.0.1:4222,nats://TOKEN-MUST-NOT-LEAK@127.0.0.2:4222")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(srv.shown, testPassword) || strings.Contains(srv.shown, "TOKEN") {
		t.Fatalf("shown servers %q carry a credential", srv.shown)
	}
	msg := message("forms.x")
	// A client error that quoted everything it was given.
	quoting := fmt.Errorf("failed: %s %s %s TOKEN-MUST-NOT-LEAK %s", testPassword, secretSignature, secretBody, strings.Repeat("z", 2000))
	out := outcome(target{subject: "forms.x", servers: srv}, msg, quoting, nil, failure{})
	assertNoLeak(t, out)
	if strings.Contains(out.Error, "TOKEN-MUST-NOT-LEAK") {
		t.Fatalf("outcome error %q shows the token", out.Error)
	}
}

func TestClassifyHeadersRefusedBeforeTheServerSaidHelloIsRetryable(t *testing.T) {
	t.Parallel()
	// The client refuses headers until it has the server's INFO, so while
	// the first connect is still failing this error means "not connected".
	out := classify(nats.ErrHeadersNotSupported, nil, failure{subject: "forms.x", servers: "nats://127.0.0.1:4222"})
	if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "not connected") {
		t.Fatalf("outcome = %+v, want retryable, not connected", out)
	}
}

// A send after Close publishes nothing: retryable, and no request went out.
func TestSendAfterCloseMakesNoRequest(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	if err := tr.Configure(context.Background(), transport.Settings{SettingAllowedNetworks: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	msg := message("forms.x")
	msg.Endpoint.Config[ConfigURL] = "nats://127.0.0.1:1"
	out := tr.Send(context.Background(), msg)
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
	cases := append(transporttest.GuardCases("nats", "4222", ""), transporttest.GuardCase{
		Name: "a cluster whose named server is answered with loopback", URL: "nats://93.184.216.34:4222,nats://nats.example:4222",
		Want: transport.OutcomeRetryable, WantErr: "a DNS answer can change",
	})
	transporttest.CheckGuardCases(t, cases, func(url string) transport.Outcome {
		msg := message("forms.x")
		msg.Endpoint.Config[ConfigURL] = url
		return tr.Send(context.Background(), msg)
	})
}
