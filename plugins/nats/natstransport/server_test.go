package natstransport

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hymical/hymical/harness/brokertest"
	"github.com/hymical/hymical/harness/natstest"
	"github.com/hymical/hymical/harness/transporttest"
	"github.com/hymical/hymical/sdk/transport"
)

// These tests run against a real nats-server with JetStream, started from
// the installed binary.

const testPassword = "PASSWORD-MUST-NOT-LEAK"

// admin connects a plain client for setting up streams and reading back.
func admin(t *testing.T, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func createStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cfg.Storage == 0 {
		cfg.Storage = jetstream.FileStorage
	}
	st, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	return st
}

// configured is a transport with settings s; unless s says otherwise, it
// may reach the loopback brokers the tests run.
func configured(t *testing.T, s transport.Settings) *Transport {
	t.Helper()
	s = maps.Clone(s)
	if s == nil {
		s = transport.Settings{}
	}
	if _, ok := s[SettingAllowedNetworks]; !ok {
		s[SettingAllowedNetworks] = "127.0.0.1"
	}
	tr := New(Options{})
	if err := tr.Configure(context.Background(), s); err != nil {
		t.Fatalf("Configure(%v): %v", s, err)
	}
	t.Cleanup(tr.Close)
	return tr
}

func TestAgainstServer(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.Options{})
	js := admin(t, srv.URL())
	stream := createStream(t, js, jetstream.StreamConfig{Name: "FORMS", Subjects: []string{"forms.>"}, MaxMsgSize: 4096})
	tr := configured(t, transport.Settings{SettingURL: srv.URL()})

	t.Run("a publish is delivered on JetStream's ack, with the body and the headers exactly as handed over", func(t *testing.T) {
		msg := message("forms.delivered")
		out := transporttest.Send(tr, msg, 5*time.Second)
		if out.Kind != transport.OutcomeDelivered || out.Error != "" {
			t.Fatalf("outcome = %+v, want delivered", out)
		}
		got, err := stream.GetLastMsgForSubject(context.Background(), "forms.delivered")
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Data) != secretBody {
			t.Errorf("data = %q, want %q", got.Data, secretBody)
		}
		want := nats.Header{
			"webhook-id":        {msg.DeliveryID},
			"webhook-timestamp": {"1700000000"},
			"webhook-signature": {secretSignature},
			"Nats-Msg-Id":       {msg.DeliveryID},
		}
		if fmt.Sprint(got.Header) != fmt.Sprint(want) {
			t.Errorf("headers = %v, want %v", got.Header, want)
		}
	})

	t.Run("the message carries the attempt's trace context", func(t *testing.T) {
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
		})
		msg := message("forms.traced")
		msg.Deadline = time.Now().Add(5 * time.Second)
		if out := tr.Send(trace.ContextWithRemoteSpanContext(context.Background(), sc), msg); out.Kind != transport.OutcomeDelivered {
			t.Fatalf("outcome = %+v, want delivered", out)
		}
		got, err := stream.GetLastMsgForSubject(context.Background(), "forms.traced")
		if err != nil {
			t.Fatal(err)
		}
		// Tracing is off in this plugin, so the host's span context goes on.
		if tp := got.Header.Get("traceparent"); tp != "00-01020300000000000000000000000000-0405060000000000-01" {
			t.Errorf("traceparent header = %q, want the attempt's", tp)
		}
	})

	t.Run("a repeat of a delivery is delivered and JetStream keeps one copy", func(t *testing.T) {
		msg := message("forms.repeat")
		msg.DeliveryID = "dlv_repeat"
		for i := range 3 {
			if out := transporttest.Send(tr, msg, 5*time.Second); out.Kind != transport.OutcomeDelivered {
				t.Fatalf("send %d: outcome = %+v, want delivered", i+1, out)
			}
		}
		info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter("forms.repeat"))
		if err != nil {
			t.Fatal(err)
		}
		if n := info.State.Subjects["forms.repeat"]; n != 1 {
			t.Fatalf("stream holds %d messages for the delivery, want 1", n)
		}
	})

	t.Run("a subject no stream captures is retryable, saying so", func(t *testing.T) {
		out := transporttest.Send(tr, message("orders.nobody"), 5*time.Second)
		assertNoLeak(t, out)
		t.Logf("outcome: %+v", out)
		if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "no responders") {
			t.Fatalf("outcome = %+v, want retryable naming no responders", out)
		}
	})

	t.Run("no ack by the deadline is retryable, and Send returns by the deadline", func(t *testing.T) {
		// A plain subscriber, not a stream: the publish has a responder
		// that never acknowledges.
		nc, err := nats.Connect(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := nc.Subscribe("silent.x", func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out := transporttest.Send(tr, message("silent.x"), 500*time.Millisecond)
		assertNoLeak(t, out)
		t.Logf("outcome: %+v", out)
		if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "no publish ack") {
			t.Fatalf("outcome = %+v, want retryable, no publish ack", out)
		}
		if took := time.Since(start); took < 400*time.Millisecond || took > 1500*time.Millisecond {
			t.Fatalf("Send took %s, want about the 500ms deadline", took)
		}
	})

	t.Run("an answer that is not a JetStream ack is retryable, never delivered", func(t *testing.T) {
		nc, err := nats.Connect(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := nc.Subscribe("impostor.x", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		out := transporttest.Send(tr, message("impostor.x"), 2*time.Second)
		assertNoLeak(t, out)
		t.Logf("outcome: %+v", out)
		if out.Kind != transport.OutcomeRetryable {
			t.Fatalf("outcome = %+v, want retryable", out)
		}
	})

	t.Run("a body over the stream's max_msg_size is permanent", func(t *testing.T) {
		msg := message("forms.big")
		msg.Body = []byte(`{"pad":"` + strings.Repeat("x", 8000) + `"}`)
		out := transporttest.Send(tr, msg, 5*time.Second)
		assertNoLeak(t, out)
		t.Logf("outcome: %+v", out)
		if out.Kind != transport.OutcomePermanent || !strings.Contains(out.Error, "max_msg_size") {
			t.Fatalf("outcome = %+v, want permanent naming max_msg_size", out)
		}
	})

	t.Run("an endpoint's own url overrides the setting", func(t *testing.T) {
		msg := message("forms.own")
		msg.Endpoint.Config[ConfigURL] = srv.URL()
		if out := transporttest.Send(configured(t, nil), msg, 5*time.Second); out.Kind != transport.OutcomeDelivered {
			t.Fatalf("outcome = %+v, want delivered", out)
		}
	})
}

func TestPermissions(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.Options{Config: `
max_payload: 2048
authorization {
  users = [
    {user: admin, password: admin}
    {user: hymical, password: "` + testPassword + `", permissions: {
      publish: {allow: ["forms.>", "$JS.API.>"], deny: ["forms.secret.>"]}
      subscribe: {allow: ["_INBOX.>"]}
    }}
  ]
}`})
	js := admin(t, srv.URL(), nats.UserInfo("admin", "admin"))
	createStream(t, js, jetstream.StreamConfig{Name: "FORMS", Subjects: []string{"forms.>"}})
	url := fmt.Sprintf("nats://hymical:%s@127.0.0.1:%d", testPassword, srv.Port)
	tr := configured(t, transport.Settings{SettingURL: url})

	t.Run("a permitted subject is delivered", func(t *testing.T) {
		if out := transporttest.Send(tr, message("forms.open"), 5*time.Second); out.Kind != transport.OutcomeDelivered {
			t.Fatalf("outcome = %+v, want delivered", out)
		}
	})

	t.Run("a permissions violation is permanent at once, not a timeout", func(t *testing.T) {
		start := time.Now()
		out := transporttest.Send(tr, message("forms.secret.x"), 5*time.Second)
		assertNoLeak(t, out)
		t.Logf("outcome: %+v", out)
		if out.Kind != transport.OutcomePermanent || !strings.Contains(strings.ToLower(out.Error), "permissions violation") {
			t.Fatalf("outcome = %+v, want permanent naming the permissions violation", out)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("took %s: the violation was not noticed before the ack wait", took)
		}
		// The connection is still good for permitted subjects.
		if out := transporttest.Send(tr, message("forms.open"), 5*time.Second); out.Kind != transport.OutcomeDelivered {
			t.Fatalf("after the violation: outcome = %+v, want delivered", out)
		}
	})

	t.Run("a body over the server's max_payload is permanent", func(t *testing.T) {
		msg := message("forms.big")
		msg.Body = []byte(`{"pad":"` + strings.Repeat("x", 4000) + `"}`)
		out := transporttest.Send(tr, msg, 5*time.Second)
		assertNoLeak(t, out)
		t.Logf("outcome: %+v", out)
		if out.Kind != transport.OutcomePermanent || !strings.Contains(out.Error, "max_payload") {
			t.Fatalf("outcome = %+v, want permanent naming max_payload", out)
		}
	})

	t.Run("a wrong password is retryable, says why, and never shows the password", func(t *testing.T) {
		bad := configured(t, transport.Settings{SettingURL: fmt.Sprintf("nats://hymical:%s-WRONG@127.0.0.1:%d", testPassword, srv.Port)})
		// The reason is known once the first connect has failed; until
		// then the send is retryable without one.
		deadline := time.Now().Add(5 * time.Second)
		for {
			out := transporttest.Send(bad, message("forms.open"), time.Second)
			assertNoLeak(t, out)
			if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "127.0.0.1") {
				t.Fatalf("outcome = %+v, want retryable naming the server", out)
			}
			if strings.Contains(strings.ToLower(out.Error), "authorization violation") {
				t.Logf("outcome: %+v", out)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("outcome = %+v, want it to name the authorization violation", out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func TestBrokerAwayAndBack(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.Options{})
	createStream(t, admin(t, srv.URL()), jetstream.StreamConfig{Name: "FORMS", Subjects: []string{"forms.>"}})
	tr := configured(t, transport.Settings{SettingURL: srv.URL(), SettingReconnectWait: "50ms"})
	if out := transporttest.Send(tr, message("forms.a"), 5*time.Second); out.Kind != transport.OutcomeDelivered {
		t.Fatalf("before: outcome = %+v, want delivered", out)
	}

	srv.Stop()
	start := time.Now()
	out := transporttest.Send(tr, message("forms.a"), 3*time.Second)
	assertNoLeak(t, out)
	t.Logf("outcome: %+v", out)
	if out.Kind != transport.OutcomeRetryable {
		t.Fatalf("while down: outcome = %+v, want retryable", out)
	}
	if took := time.Since(start); took > 3500*time.Millisecond {
		t.Fatalf("while down: took %s, past the attempt's deadline", took)
	}

	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := transporttest.Send(tr, message("forms.a"), 2*time.Second)
		if out.Kind == transport.OutcomeDelivered {
			break
		}
		if out.Kind != transport.OutcomeRetryable || time.Now().After(deadline) {
			t.Fatalf("after restart: outcome = %+v, want delivered once reconnected", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestServerNeverUp(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: the connection keeps retrying and every
	// send is retryable within its deadline.
	srv := natstest.Start(t, natstest.Options{})
	srv.Stop()
	tr := configured(t, transport.Settings{SettingURL: fmt.Sprintf("nats://hymical:%s@127.0.0.1:%d", testPassword, srv.Port)})
	for i := range 2 {
		start := time.Now()
		out := transporttest.Send(tr, message("forms.a"), time.Second)
		assertNoLeak(t, out)
		t.Logf("outcome: %+v", out)
		if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, fmt.Sprint(srv.Port)) {
			t.Fatalf("send %d: outcome = %+v, want retryable naming the server", i+1, out)
		}
		if took := time.Since(start); took > 1500*time.Millisecond {
			t.Fatalf("send %d took %s, past its deadline", i+1, took)
		}
	}
}

// pluginConns counts the plugin's connections the server's monitoring
// endpoint lists.
func pluginConns(t *testing.T, monitor string) int {
	t.Helper()
	resp, err := http.Get(monitor + "/connz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var connz struct {
		Connections []struct {
			Name string `json:"name"`
		} `json:"connections"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&connz); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range connz.Connections {
		if c.Name == ClientName {
			n++
		}
	}
	return n
}

// The brokers the tests run listen on loopback, which the SSRF guard
// refuses unless the plugin's allowed_networks lists it: the endpoint is
// refused at creation, a send makes no connection, and both say which
// setting to change.
func TestGuardRefusesALoopbackServerUnlessAllowed(t *testing.T) {
	t.Parallel()
	monitorPort := brokertest.FreePort(t)
	srv := natstest.Start(t, natstest.Options{Config: fmt.Sprintf("http: \"127.0.0.1:%d\"", monitorPort)})
	monitor := fmt.Sprintf("http://127.0.0.1:%d", monitorPort)
	createStream(t, admin(t, srv.URL()), jetstream.StreamConfig{Name: "GUARD", Subjects: []string{"forms.guard"}})
	ctx := context.Background()
	const want = "it is in 127.0.0.0/8, loopback (RFC 1122 §3.2.1.3), which is not globally reachable; if this NATS server is meant to be internal, add a network containing it to the nats plugin's allowed_networks setting"

	for _, tt := range []struct {
		name     string
		settings transport.Settings
		url      string
	}{
		{"the plugin's url", transport.Settings{SettingURL: srv.URL(), SettingAllowedNetworks: ""}, ""},
		{"the endpoint's url", transport.Settings{SettingAllowedNetworks: ""}, srv.URL()},
		{"the endpoint's url by name", transport.Settings{SettingAllowedNetworks: ""}, fmt.Sprintf("nats://localhost:%d", srv.Port)},
		{"an allow-list for another network", transport.Settings{SettingURL: srv.URL(), SettingAllowedNetworks: "10.0.0.0/8"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := configured(t, tt.settings)
			msg := message("forms.guard")
			if tt.url != "" {
				msg.Endpoint.Config[ConfigURL] = tt.url
			}
			if err := tr.Validate(ctx, msg.Endpoint); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Validate = %v, want a refusal ending %q", err, want)
			}
			out := transporttest.Send(tr, msg, 5*time.Second)
			if out.Kind != transport.OutcomePermanent || !out.NoRequest || !strings.Contains(out.Error, want) {
				t.Errorf("outcome = %+v, want permanent, no request, saying %q", out, want)
			}
		})
	}
	if n := pluginConns(t, monitor); n != 0 {
		t.Fatalf("the server saw %d connections from the plugin, want none", n)
	}

	t.Run("allowed", func(t *testing.T) {
		tr := configured(t, transport.Settings{SettingURL: fmt.Sprintf("nats://localhost:%d", srv.Port), SettingAllowedNetworks: "127.0.0.0/8, ::1"})
		msg := message("forms.guard")
		if err := tr.Validate(ctx, msg.Endpoint); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		if out := transporttest.Send(tr, msg, 5*time.Second); out.Kind != transport.OutcomeDelivered {
			t.Fatalf("outcome = %+v, want delivered", out)
		}
		if n := pluginConns(t, monitor); n != 1 {
			t.Errorf("the server lists %d connections from the plugin, want 1", n)
		}
	})
}

// The connection's own dialer checks every address it connects to, so a
// server that passed the check and later resolves somewhere refused (DNS
// rebinding), or one the cluster announces, is never connected to, and
// the sends that fail meanwhile say why.
func TestTheConnectionsDialerRefusesToo(t *testing.T) {
	t.Parallel()
	monitorPort := brokertest.FreePort(t)
	srv := natstest.Start(t, natstest.Options{Config: fmt.Sprintf("http: \"127.0.0.1:%d\"", monitorPort)})
	st, err := parseSettings(transport.Settings{SettingReconnectWait: "20ms"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseServers(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	// dial, unlike Transport.conn, asks no guard first: only the dialer
	// stands between it and the server.
	c, err := dial(s, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.nc.Close)
	want := "refused to connect to 127.0.0.1:" + strconv.Itoa(srv.Port) + ": it is in 127.0.0.0/8, loopback"
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(c.lastError(), want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.nc.IsConnected() || !strings.Contains(c.lastError(), want) {
		t.Fatalf("connected %v, last error %q; want not connected, the guard's refusal", c.nc.IsConnected(), c.lastError())
	}
	if n := pluginConns(t, fmt.Sprintf("http://127.0.0.1:%d", monitorPort)); n != 0 {
		t.Fatalf("the server saw %d connections from the plugin, want none", n)
	}
}
