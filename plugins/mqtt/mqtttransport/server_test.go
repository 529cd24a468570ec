package mqtttransport

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/harness/mosquittotest"
	"github.com/hymical/hymical/harness/transporttest"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
)

// These tests run against a real mosquitto, started from the installed
// binary on a loopback port.

const signingSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func configured(t *testing.T, s transport.Settings) *Transport {
	t.Helper()
	tr := New(Options{})
	if err := tr.Configure(context.Background(), s); err != nil {
		t.Fatalf("Configure(%v): %v", s, err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// newTransport may reach the loopback brokers the tests run.
func newTransport(t *testing.T, s transport.Settings) *Transport {
	t.Helper()
	if s == nil {
		s = transport.Settings{}
	}
	s[SettingAllowedNetworks] = "127.0.0.1"
	s[SettingReconnectWait] = "100ms"
	s[SettingReconnectWaitMax] = "500ms"
	return configured(t, s)
}

// subscribe is the test's own QoS 1 subscriber; it returns the payloads it
// receives.
func subscribe(t *testing.T, srv *mosquittotest.Server, user, password, topic string) <-chan []byte {
	t.Helper()
	got := make(chan []byte, 16)
	opts := mqtt.NewClientOptions().AddBroker(srv.URL("", "")).SetClientID("test-sub-" + strings.ReplaceAll(t.Name(), "/", "-")).
		SetUsername(user).SetPassword(password)
	c := mqtt.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscriber connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	tok := c.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) { got <- m.Payload() })
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	return got
}

// signed is a message signed the way the server signs it.
func signed(t *testing.T, url, topic string) transport.Message {
	t.Helper()
	msg := message(url, topic)
	h, err := webhook.SignHeaders("dlv_1", time.Now(), msg.Body, signingSecret)
	if err != nil {
		t.Fatal(err)
	}
	msg.Headers = nil
	for _, name := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		msg.Headers = append(msg.Headers, transport.Header{Name: name, Value: h.Get(name)})
	}
	return msg
}

func TestPublishIsDeliveredAndVerifies(t *testing.T) {
	t.Parallel()
	srv := mosquittotest.Start(t, mosquittotest.Options{})
	got := subscribe(t, srv, "", "", "forms/submissions")
	tr := newTransport(t, nil)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	msg := signed(t, srv.URL("", ""), "forms/submissions")
	msg.Deadline = time.Now().Add(10 * time.Second)
	out := tr.Send(trace.ContextWithRemoteSpanContext(context.Background(), sc), msg)
	if out.Kind != transport.OutcomeDelivered || out.Error != "" {
		t.Fatalf("outcome = %+v, want delivered", out)
	}
	var payload []byte
	select {
	case payload = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber received nothing")
	}
	// What a consumer does: read the envelope, verify with its headers.
	var env Envelope
	if err := json.Unmarshal(payload, &env); err != nil {
		t.Fatalf("payload %s is not the envelope: %v", payload, err)
	}
	if env.Body != secretBody {
		t.Fatalf("envelope body = %q, want exactly %q", env.Body, secretBody)
	}
	if !strings.HasPrefix(env.Traceparent, "00-01020300000000000000000000000000-") {
		t.Errorf("traceparent = %q, want the attempt's trace", env.Traceparent)
	}
	h := http.Header{}
	h.Set("webhook-id", env.WebhookID)
	h.Set("webhook-timestamp", env.WebhookTimestamp)
	h.Set("webhook-signature", env.WebhookSignature)
	if err := webhook.Verify(h, []byte(env.Body), signingSecret); err != nil {
		t.Fatalf("the envelope does not verify: %v", err)
	}

	// One connection serves every send.
	for range 3 {
		if out := transporttest.Send(tr, msg, 5*time.Second); out.Kind != transport.OutcomeDelivered {
			t.Fatalf("outcome = %+v, want delivered", out)
		}
	}
	s, _ := parseServer(srv.URL("", ""), false)
	c, _, _ := tr.conns.Lookup(s.key)
	if n := c.connections(); n != 1 {
		t.Fatalf("the plugin made %d connections for 4 sends, want 1", n)
	}
	if n := srv.Connections(t, "hymical-"); n != 1 {
		t.Fatalf("the broker let in %d plugin clients for 4 sends, want 1", n)
	}
}

func TestCredentials(t *testing.T) {
	t.Parallel()
	srv := mosquittotest.Start(t, mosquittotest.Options{Users: map[string]string{"hymical": testPassword}})
	got := subscribe(t, srv, "hymical", testPassword, "forms")
	tests := []struct {
		name     string
		settings transport.Settings
		want     transport.OutcomeKind
		text     string
	}{
		{"the right password", transport.Settings{SettingURL: srv.URL("", ""), SettingUsername: "hymical", SettingPassword: testPassword}, transport.OutcomeDelivered, ""},
		{"the password in the url", transport.Settings{SettingURL: srv.URL("hymical", testPassword)}, transport.OutcomeDelivered, ""},
		{"a wrong password", transport.Settings{SettingURL: srv.URL("", ""), SettingUsername: "hymical", SettingPassword: "wrong-" + testPassword}, transport.OutcomePermanent, "CONNACK 5"},
		{"no credentials", transport.Settings{SettingURL: srv.URL("", "")}, transport.OutcomePermanent, "CONNACK 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTransport(t, tt.settings)
			msg := signed(t, "", "forms")
			delete(msg.Endpoint.Config, ConfigURL)
			out := transporttest.Send(tr, msg, 5*time.Second)
			assertNoLeak(t, out)
			if strings.Contains(out.Error, "wrong-") {
				t.Errorf("outcome %q names the password", out.Error)
			}
			if out.Kind != tt.want || !strings.Contains(out.Error, tt.text) {
				t.Fatalf("outcome = %+v, want %s containing %q", out, tt.want, tt.text)
			}
			if tt.want == transport.OutcomeDelivered {
				select {
				case <-got:
				case <-time.After(10 * time.Second):
					t.Fatal("the subscriber received nothing")
				}
			}
		})
	}
}

func TestBrokerAwayAndBack(t *testing.T) {
	t.Parallel()
	srv := mosquittotest.Start(t, mosquittotest.Options{})
	url := srv.URL("", "")
	tr := newTransport(t, nil)
	if out := transporttest.Send(tr, signed(t, url, "away"), 10*time.Second); out.Kind != transport.OutcomeDelivered {
		t.Fatalf("before: outcome = %+v, want delivered", out)
	}

	srv.Stop()
	for i := range 5 {
		start := time.Now()
		out := transporttest.Send(tr, signed(t, url, "away"), 2*time.Second)
		assertNoLeak(t, out)
		if out.Kind != transport.OutcomeRetryable || out.NoRequest || !strings.Contains(out.Error, srv.Addr()) {
			t.Fatalf("while down, send %d: outcome = %+v, want retryable naming the broker", i+1, out)
		}
		if took := time.Since(start); took > 2500*time.Millisecond {
			t.Fatalf("while down, send %d took %s, past its deadline", i+1, took)
		}
	}

	srv.Restart()
	got := subscribe(t, srv, "", "", "away")
	deadline := time.Now().Add(30 * time.Second)
	retries := 0
	for {
		out := transporttest.Send(tr, signed(t, url, "away"), 5*time.Second)
		if out.Kind == transport.OutcomeDelivered {
			break
		}
		retries++
		if out.Kind != transport.OutcomeRetryable || time.Now().After(deadline) {
			t.Fatalf("after restart: outcome = %+v, want retryable until the plugin has reconnected, then delivered", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("delivered after the restart, %d retryable sends while the plugin reconnected", retries)
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber received nothing after the restart")
	}
	s, _ := parseServer(url, false)
	c, _, _ := tr.conns.Lookup(s.key)
	if n := c.connections(); n != 2 {
		t.Fatalf("the plugin made %d connections, want 2: the first, and one after the restart", n)
	}
}

// The loopback broker is refused without allowed_networks, and nothing
// reaches it.
func TestSSRFRefusalAgainstARealBroker(t *testing.T) {
	t.Parallel()
	srv := mosquittotest.Start(t, mosquittotest.Options{})
	got := subscribe(t, srv, "", "", "forms")
	tr := configured(t, transport.Settings{})
	out := transporttest.Send(tr, signed(t, srv.URL("", ""), "forms"), 5*time.Second)
	if out.Kind != transport.OutcomePermanent || !out.NoRequest || !strings.Contains(out.Error, "allowed_networks") {
		t.Fatalf("outcome = %+v, want a permanent refusal with no request pointing at allowed_networks", out)
	}
	select {
	case p := <-got:
		t.Fatalf("the broker received %s though the guard refused it", p)
	case <-time.After(500 * time.Millisecond):
	}
}
