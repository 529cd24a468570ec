package redistransport

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/redis/go-redis/v9"

	"github.com/hymical/hymical/harness/redistest"
	"github.com/hymical/hymical/harness/transporttest"
	"github.com/hymical/hymical/sdk/transport"
)

// These tests run against a real redis-server, started from the installed
// binary.

func admin(t *testing.T, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opts.DisableIdentity = true
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// newTransport is a transport that may reach the loopback brokers the
// tests run.
func newTransport(t *testing.T) *Transport {
	t.Helper()
	return configured(t, transport.Settings{SettingAllowedNetworks: "127.0.0.1"})
}

func configured(t *testing.T, s transport.Settings) *Transport {
	t.Helper()
	tr := New(Options{})
	if err := tr.Configure(context.Background(), s); err != nil {
		t.Fatalf("Configure(%v): %v", s, err)
	}
	t.Cleanup(tr.Close)
	return tr
}

func TestAgainstServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := admin(t, srv.URL())
	tr := newTransport(t)
	ctx := context.Background()

	t.Run("an XADD is delivered with id, timestamp, signature and body in order", func(t *testing.T) {
		out := transporttest.Send(tr, message(srv.URL(), "forms:delivered"), 5*time.Second)
		if out.Kind != transport.OutcomeDelivered || out.Error != "" {
			t.Fatalf("outcome = %+v, want delivered", out)
		}
		// XRANGE through RESP2's flat array keeps the field order.
		raw, err := rdb.Do(ctx, "XRANGE", "forms:delivered", "-", "+").Slice()
		if err != nil || len(raw) != 1 {
			t.Fatalf("XRANGE = %v, %v; want one entry", raw, err)
		}
		fields := fmt.Sprint(raw[0].([]any)[1])
		want := fmt.Sprint([]any{"id", "dlv_1", "timestamp", "1700000000", "signature", secretSignature, "body", secretBody})
		if fields != want {
			t.Fatalf("entry fields = %s, want %s", fields, want)
		}
	})

	t.Run("the entry carries the attempt's trace context after the signed fields", func(t *testing.T) {
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
		})
		msg := message(srv.URL(), "forms:traced")
		msg.Deadline = time.Now().Add(5 * time.Second)
		if out := tr.Send(trace.ContextWithRemoteSpanContext(ctx, sc), msg); out.Kind != transport.OutcomeDelivered {
			t.Fatalf("outcome = %+v, want delivered", out)
		}
		raw, err := rdb.Do(ctx, "XRANGE", "forms:traced", "-", "+").Slice()
		if err != nil || len(raw) != 1 {
			t.Fatalf("XRANGE = %v, %v; want one entry", raw, err)
		}
		fields := fmt.Sprint(raw[0].([]any)[1])
		want := fmt.Sprint([]any{"id", "dlv_1", "timestamp", "1700000000", "signature", secretSignature, "body", secretBody,
			"traceparent", "00-01020300000000000000000000000000-0405060000000000-01"})
		if fields != want {
			t.Fatalf("entry fields = %s, want %s", fields, want)
		}
	})

	t.Run("maxlen trims the stream approximately", func(t *testing.T) {
		msg := message(srv.URL(), "forms:trimmed")
		msg.Endpoint.Config[ConfigMaxLen] = "10"
		const sent = 300
		for i := range sent {
			if out := transporttest.Send(tr, msg, 5*time.Second); out.Kind != transport.OutcomeDelivered {
				t.Fatalf("send %d: outcome = %+v", i+1, out)
			}
		}
		n, err := rdb.XLen(ctx, "forms:trimmed").Result()
		if err != nil {
			t.Fatal(err)
		}
		// Approximate trimming removes whole nodes (100 entries each by
		// default): fewer than sent, never fewer than maxlen.
		if n < 10 || n >= sent {
			t.Fatalf("stream length after %d sends with maxlen ~10 = %d, want at least 10 and fewer than %d", sent, n, sent)
		}
	})

	t.Run("a key that is not a stream is permanent: WRONGTYPE", func(t *testing.T) {
		if err := rdb.Set(ctx, "forms:string", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		out := transporttest.Send(tr, message(srv.URL(), "forms:string"), 5*time.Second)
		assertNoLeak(t, out)
		t.Logf("outcome: %+v", out)
		if out.Kind != transport.OutcomePermanent || !strings.Contains(out.Error, "WRONGTYPE") {
			t.Fatalf("outcome = %+v, want permanent naming WRONGTYPE", out)
		}
	})

	t.Run("a database the server does not have is permanent", func(t *testing.T) {
		out := transporttest.Send(tr, message(fmt.Sprintf("redis://%s/99", srv.Addr()), "forms:x"), 5*time.Second)
		assertNoLeak(t, out)
		t.Logf("outcome: %+v", out)
		if out.Kind != transport.OutcomePermanent || !strings.Contains(out.Error, "database") {
			t.Fatalf("outcome = %+v, want permanent naming the database", out)
		}
	})

	t.Run("an ACL without xadd is permanent: NOPERM", func(t *testing.T) {
		if err := rdb.Do(ctx, "ACL", "SETUSER", "limited", "on", ">"+testPassword, "~*", "+@all", "-xadd").Err(); err != nil {
			t.Fatal(err)
		}
		out := transporttest.Send(tr, message(fmt.Sprintf("redis://limited:%s@%s/0", testPassword, srv.Addr()), "forms:x"), 5*time.Second)
		assertNoLeak(t, out)
		t.Logf("outcome: %+v", out)
		if out.Kind != transport.OutcomePermanent || !strings.Contains(out.Error, "NOPERM") {
			t.Fatalf("outcome = %+v, want permanent naming NOPERM", out)
		}
	})
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{Password: testPassword})
	tr := newTransport(t)
	tests := []struct {
		name   string
		url    string
		want   transport.OutcomeKind
		inText string
	}{
		{"the right password is delivered", fmt.Sprintf("redis://:%s@%s/0", testPassword, srv.Addr()), transport.OutcomeDelivered, ""},
		{"no password is permanent: NOAUTH", srv.URL(), transport.OutcomePermanent, "NOAUTH"},
		{"a wrong password is permanent: WRONGPASS", fmt.Sprintf("redis://:%s-WRONG@%s/0", testPassword, srv.Addr()), transport.OutcomePermanent, "WRONGPASS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := transporttest.Send(tr, message(tt.url, "forms:auth"), 5*time.Second)
			assertNoLeak(t, out)
			t.Logf("outcome: %+v", out)
			if out.Kind != tt.want || !strings.Contains(out.Error, tt.inText) {
				t.Fatalf("outcome = %+v, want %s containing %q", out, tt.want, tt.inText)
			}
		})
	}
}

func TestBrokerAwayAndBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{Password: testPassword})
	url := fmt.Sprintf("redis://:%s@%s/0", testPassword, srv.Addr())
	tr := newTransport(t)
	if out := transporttest.Send(tr, message(url, "forms:away"), 5*time.Second); out.Kind != transport.OutcomeDelivered {
		t.Fatalf("before: outcome = %+v, want delivered", out)
	}

	srv.Stop()
	for i := range 2 {
		start := time.Now()
		out := transporttest.Send(tr, message(url, "forms:away"), 2*time.Second)
		assertNoLeak(t, out)
		t.Logf("outcome: %+v", out)
		if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, srv.Addr()) {
			t.Fatalf("while down, send %d: outcome = %+v, want retryable naming the server", i+1, out)
		}
		if took := time.Since(start); took > 2500*time.Millisecond {
			t.Fatalf("while down, send %d took %s, past its deadline", i+1, took)
		}
	}

	srv.Restart()
	if out := transporttest.Send(tr, message(url, "forms:away"), 5*time.Second); out.Kind != transport.OutcomeDelivered {
		t.Fatalf("after restart: outcome = %+v, want delivered from the same pool", out)
	}
	n, err := admin(t, url).XLen(context.Background(), "forms:away").Result()
	if err != nil || n != 2 {
		t.Fatalf("XLEN after restart = %d, %v; want the entry from before the kill and the one after", n, err)
	}
}

func TestHungServerTimesOutRetryable(t *testing.T) {
	t.Parallel()
	// A server that accepts connections and never answers: the attempt
	// must end at its deadline, retryable.
	addr := transporttest.HungServer(t)
	tr := newTransport(t)
	start := time.Now()
	out := transporttest.Send(tr, message("redis://:"+testPassword+"@"+addr+"/0", "forms"), 500*time.Millisecond)
	assertNoLeak(t, out)
	t.Logf("outcome: %+v", out)
	if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "no reply") {
		t.Fatalf("outcome = %+v, want retryable, no reply", out)
	}
	if took := time.Since(start); took < 400*time.Millisecond || took > 1500*time.Millisecond {
		t.Fatalf("Send took %s, want about the 500ms deadline", took)
	}
}

// pluginClients counts the plugin's connections the server lists.
func pluginClients(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(list, "name="+ClientName+" ")
}

// The brokers the tests run listen on loopback (and here a unix socket),
// which the SSRF guard refuses unless the plugin's settings allow them:
// the endpoint is refused at creation, a send makes no connection, and
// both say which setting to change.
func TestGuardRefusesLoopbackAndSocketsUnlessAllowed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{UnixSocket: true})
	rdb := admin(t, srv.URL())
	ctx := context.Background()
	const loopback = "it is in 127.0.0.0/8, loopback (RFC 1122 §3.2.1.3), which is not globally reachable; if this Redis server is meant to be internal, add a network containing it to the redis plugin's allowed_networks setting"
	const socket = "refused to connect to unix socket " // …the path, then the advice
	const socketAdvice = "set the redis plugin's allow_unix_sockets setting to true"
	socketURL := "unix://" + srv.Socket + "?db=0"

	for _, tt := range []struct {
		name     string
		settings transport.Settings
		url      string
		want     []string
	}{
		{"a loopback server", nil, srv.URL(), []string{loopback}},
		{"a loopback server by name", nil, fmt.Sprintf("redis://localhost:%d/0", srv.Port), []string{"localhost resolves to", "loopback", "redis plugin's allowed_networks"}},
		{"the plugin's own url", transport.Settings{SettingURL: srv.URL()}, "", []string{loopback}},
		{"an allow-list for another network", transport.Settings{SettingAllowedNetworks: "10.0.0.0/8"}, srv.URL(), []string{loopback}},
		{"a unix socket", nil, socketURL, []string{socket + srv.Socket, socketAdvice}},
		{"a unix socket with every network allowed", transport.Settings{SettingAllowedNetworks: "0.0.0.0/0,::/0"}, socketURL, []string{socketAdvice}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := configured(t, tt.settings)
			msg := message(tt.url, "forms:guard")
			if err := tr.Validate(ctx, msg.Endpoint); err == nil || !containsAll(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want a refusal saying %q", err, tt.want)
			}
			out := transporttest.Send(tr, msg, 5*time.Second)
			if out.Kind != transport.OutcomePermanent || !out.NoRequest || !containsAll(out.Error, tt.want) {
				t.Errorf("outcome = %+v, want permanent, no request, saying %q", out, tt.want)
			}
		})
	}
	if n := pluginClients(t, rdb); n != 0 {
		t.Fatalf("the server lists %d connections from the plugin, want none", n)
	}
	if n, err := rdb.XLen(ctx, "forms:guard").Result(); err != nil || n != 0 {
		t.Fatalf("XLEN forms:guard = %d, %v; want 0", n, err)
	}

	for _, tt := range []struct {
		name     string
		settings transport.Settings
		url      string
	}{
		{"an allowed loopback server", transport.Settings{SettingAllowedNetworks: "127.0.0.0/8, ::1"}, fmt.Sprintf("redis://localhost:%d/0", srv.Port)},
		{"an allowed unix socket", transport.Settings{SettingAllowUnixSockets: "true"}, socketURL},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := configured(t, tt.settings)
			msg := message(tt.url, "forms:guard")
			if err := tr.Validate(ctx, msg.Endpoint); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if out := transporttest.Send(tr, msg, 5*time.Second); out.Kind != transport.OutcomeDelivered {
				t.Fatalf("outcome = %+v, want delivered", out)
			}
		})
	}
	if n, err := rdb.XLen(ctx, "forms:guard").Result(); err != nil || n != 2 {
		t.Fatalf("XLEN forms:guard = %d, %v; want 2", n, err)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// The pool's own dialer checks every address it connects to, so a name
// that passed the check and later resolves somewhere refused (DNS
// rebinding) is caught at the dial, and the refusal reads as one.
func TestThePoolsDialerRefusesToo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	tr := New(Options{})
	t.Cleanup(tr.Close)
	s, err := parseServer(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	// The pool, unlike Send, asks no guard first: only its dialer stands
	// between it and the server.
	c, ok := tr.client(s, tr.settings())
	if !ok {
		t.Fatal("no pool")
	}
	err = c.XAdd(context.Background(), &redis.XAddArgs{Stream: "forms:rebound", Values: []any{"k", "v"}}).Err()
	out := classify(err, failure{stream: "forms:rebound", server: s.shown})
	if out.Kind != transport.OutcomePermanent || !out.NoRequest || !strings.Contains(out.Error, "127.0.0.0/8, loopback") {
		t.Fatalf("outcome = %+v (from %v), want the guard's refusal: permanent, no request", out, err)
	}
	if n := pluginClients(t, admin(t, srv.URL())); n != 0 {
		t.Fatalf("the server lists %d connections from the plugin, want none", n)
	}
}
