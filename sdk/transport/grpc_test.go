package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hymical/hymical/sdk/transport/transportpb"
)

// recorder is a plugin implementation that records what reached it and
// answers what the test tells it to.
type recorder struct {
	mu          sync.Mutex
	settings    Settings
	endpoint    Endpoint
	msg         Message
	ctxDeadline time.Time
	hasDeadline bool

	configureErr error
	validateErr  error
	outcome      Outcome
	// block makes Send wait for its context to end, report the context's
	// error on ended, and then answer outcome.
	block   bool
	started chan struct{}
	ended   chan error
	// hang, when set, makes Send ignore its context and wait for hang to
	// close, as a stuck plugin would.
	hang chan struct{}
}

func (r *recorder) Configure(_ context.Context, s Settings) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settings = s
	return r.configureErr
}

func (r *recorder) Validate(_ context.Context, e Endpoint) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endpoint = e
	return r.validateErr
}

func (r *recorder) Send(ctx context.Context, msg Message) Outcome {
	r.mu.Lock()
	r.msg = msg
	r.ctxDeadline, r.hasDeadline = ctx.Deadline()
	block, out, hang := r.block, r.outcome, r.hang
	r.mu.Unlock()
	if hang != nil {
		<-hang
	}
	if block {
		close(r.started)
		<-ctx.Done()
		r.ended <- ctx.Err()
	}
	return out
}

func (r *recorder) seen() (Message, time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msg, r.ctxDeadline, r.hasDeadline
}

// connect serves impl over go-plugin's in-memory gRPC test connection and
// returns the host-side client speaking protocol version v, as a host
// would dispense it.
func connect(t testing.TB, impl Transport, v int) (*GRPCClient, *plugin.GRPCServer) {
	t.Helper()
	client, server := plugin.TestPluginGRPCConn(t, false, VersionedPlugins(impl)[v])
	// Closing the client stops the server through go-plugin's controller;
	// stopping it here as well would race with that.
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(PluginName)
	if err != nil {
		t.Fatalf("dispense %q: %v", PluginName, err)
	}
	c, ok := raw.(*GRPCClient)
	if !ok {
		t.Fatalf("dispensed %T, want *GRPCClient", raw)
	}
	if c.Protocol() != v {
		t.Fatalf("the client speaks protocol %d, want %d", c.Protocol(), v)
	}
	return c, server
}

// forEachProtocol runs test as a parallel subtest for every protocol
// version: what a Send does must not depend on which one carries it.
func forEachProtocol(t *testing.T, test func(t *testing.T, v int)) {
	t.Helper()
	for v := 1; v <= ProtocolVersion; v++ {
		t.Run(fmt.Sprintf("protocol %d", v), func(t *testing.T) {
			t.Parallel()
			test(t, v)
		})
	}
}

func TestSendCarriesEveryFieldBothWays(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, testSendCarriesEveryFieldBothWays)
}

func testSendCarriesEveryFieldBothWays(t *testing.T, v int) {
	deadline := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
	msg := Message{
		DeliveryID: "dlv_0123456789abcdef0123456789abcdef",
		Attempt:    7,
		Endpoint: Endpoint{
			URL:    "https://receiver.example/hooks?x=1",
			Config: map[string]string{"region": "eu", "empty": ""},
		},
		Headers: []Header{
			{Name: "webhook-id", Value: "dlv_1"},
			{Name: "webhook-signature", Value: "v1,abc v1,def"},
			{Name: "X-Repeat", Value: "one"},
			{Name: "X-Repeat", Value: "two"},
			{Name: "X-Empty", Value: ""},
		},
		Body:     []byte("{\"a\":1}\x00\xff binary tail"),
		Deadline: deadline,
	}
	tests := []struct {
		name string
		out  Outcome
	}{
		{"delivered", Outcome{Kind: OutcomeDelivered, StatusCode: 204}},
		{"retryable with hint", Outcome{Kind: OutcomeRetryable, StatusCode: 503, Error: "receiver answered HTTP 503", RetryAfter: 1500 * time.Millisecond}},
		{"permanent without status", Outcome{Kind: OutcomePermanent, Error: "refused: loopback address"}},
		{"refused before any request", Refused("refused to connect to 127.0.0.1:80: it is a loopback address")},
		{"deferred, no request", Deferred("the plugin is shutting down")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{outcome: tt.out}
			c, _ := connect(t, rec, v)

			got, err := c.SendRPC(context.Background(), msg)
			if err != nil {
				t.Fatalf("SendRPC: %v", err)
			}
			if got != tt.out {
				t.Errorf("host got outcome %+v, plugin returned %+v", got, tt.out)
			}

			seen, ctxDeadline, ok := rec.seen()
			if seen.DeliveryID != msg.DeliveryID || seen.Attempt != msg.Attempt {
				t.Errorf("plugin got id %q attempt %d, want %q %d", seen.DeliveryID, seen.Attempt, msg.DeliveryID, msg.Attempt)
			}
			if seen.Endpoint.URL != msg.Endpoint.URL || fmt.Sprint(seen.Endpoint.Config) != fmt.Sprint(msg.Endpoint.Config) {
				t.Errorf("plugin got endpoint %+v, want %+v", seen.Endpoint, msg.Endpoint)
			}
			if fmt.Sprint(seen.Headers) != fmt.Sprint(msg.Headers) {
				t.Errorf("plugin got headers %v, want %v", seen.Headers, msg.Headers)
			}
			if string(seen.Body) != string(msg.Body) {
				t.Errorf("plugin got body %q, want %q", seen.Body, msg.Body)
			}
			if !seen.Deadline.Equal(deadline) {
				t.Errorf("plugin got Message.Deadline %v, want %v", seen.Deadline, deadline)
			}
			if !ok || !ctxDeadline.Equal(deadline) {
				t.Errorf("plugin's context deadline = %v (set %v), want %v", ctxDeadline, ok, deadline)
			}
		})
	}
}

func TestSendWithoutMessageDeadlineSendsTheContextDeadline(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, testSendWithoutMessageDeadlineSendsTheContextDeadline)
}

func testSendWithoutMessageDeadlineSendsTheContextDeadline(t *testing.T, v int) {
	rec := &recorder{outcome: Delivered(200)}
	c, _ := connect(t, rec, v)
	want := time.Now().Add(10 * time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), want)
	defer cancel()

	if _, err := c.SendRPC(ctx, Message{DeliveryID: "d"}); err != nil {
		t.Fatalf("SendRPC: %v", err)
	}
	seen, ctxDeadline, ok := rec.seen()
	// gRPC re-derives the deadline from a timeout on arrival, so the
	// plugin's context may be off by the call's latency.
	if !ok || ctxDeadline.Sub(want).Abs() > time.Second {
		t.Errorf("plugin's context deadline = %v (set %v), want about %v", ctxDeadline, ok, want)
	}
	if seen.Deadline.Sub(want).Abs() > time.Second {
		t.Errorf("plugin's Message.Deadline = %v, want about %v", seen.Deadline, want)
	}
}

func TestMessageDeadlineEndsThePluginContext(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, testMessageDeadlineEndsThePluginContext)
}

func testMessageDeadlineEndsThePluginContext(t *testing.T, v int) {
	rec := &recorder{
		block:   true,
		started: make(chan struct{}),
		ended:   make(chan error, 1),
		outcome: Retryable(0, "no answer before the deadline"),
	}
	c, _ := connect(t, rec, v)

	// The host's own context has no deadline: only the message's can end
	// the plugin's context.
	out, err := c.SendRPC(context.Background(), Message{DeliveryID: "d", Deadline: time.Now().Add(100 * time.Millisecond)})
	if err != nil {
		t.Fatalf("SendRPC: %v", err)
	}
	if got := <-rec.ended; !errors.Is(got, context.DeadlineExceeded) {
		t.Errorf("plugin's context ended with %v, want deadline exceeded", got)
	}
	if out.Kind != OutcomeRetryable || out.Error != "no answer before the deadline" {
		t.Errorf("outcome = %+v, want the plugin's retryable answer", out)
	}
}

func TestCancellationReachesThePlugin(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, testCancellationReachesThePlugin)
}

func testCancellationReachesThePlugin(t *testing.T, v int) {
	rec := &recorder{
		block:   true,
		started: make(chan struct{}),
		ended:   make(chan error, 1),
		outcome: Delivered(200),
	}
	c, _ := connect(t, rec, v)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-rec.started
		cancel()
	}()

	_, err := c.SendRPC(ctx, Message{DeliveryID: "d"})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("SendRPC error = %v, want ErrUnavailable wrapping context.Canceled", err)
	}
	select {
	case got := <-rec.ended:
		if !errors.Is(got, context.Canceled) {
			t.Errorf("plugin's context ended with %v, want canceled", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the host's cancellation never reached the plugin's context")
	}
}

// Whichever side's clock ends a call at its deadline, the host sees
// context.DeadlineExceeded and can tell a hang from a crash.
func TestCallPastItsDeadlineIsDeadlineExceeded(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, testCallPastItsDeadlineIsDeadlineExceeded)
}

func testCallPastItsDeadlineIsDeadlineExceeded(t *testing.T, v int) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	c, _ := connect(t, &recorder{hang: hang, outcome: Delivered(200)}, v)
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := c.SendRPC(ctx, Message{DeliveryID: "d"})
		cancel()
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("SendRPC to a stuck plugin: %v, want ErrUnavailable wrapping context.DeadlineExceeded", err)
		}
	}
}

func TestConfigureAndValidate(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 2*MaxErrorBytes)
	tests := []struct {
		name    string
		err     error
		wantErr string // empty: accepted
	}{
		{"accepted", nil, ""},
		{"refused with a reason", errors.New("read_timeout: \"soon\" is not a duration"), "read_timeout: \"soon\" is not a duration"},
		{"refused without text", errors.New(""), "refused without a reason"},
		{"long reason is bounded", errors.New(long), long[:100]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{configureErr: tt.err, validateErr: tt.err}
			c, _ := connect(t, rec, ProtocolVersion)
			settings := Settings{"read_timeout": "3s", "allowed_networks": "127.0.0.0/8"}
			endpoint := Endpoint{URL: "https://r.example/", Config: map[string]string{"k": "v"}}

			for _, call := range []struct {
				name string
				do   func() error
			}{
				{"Configure", func() error { return c.Configure(context.Background(), settings) }},
				{"Validate", func() error { return c.Validate(context.Background(), endpoint) }},
			} {
				err := call.do()
				if tt.wantErr == "" {
					if err != nil {
						t.Errorf("%s: %v, want accepted", call.name, err)
					}
					continue
				}
				if !errors.Is(err, ErrRejected) || errors.Is(err, ErrUnavailable) {
					t.Errorf("%s error = %v, want ErrRejected only", call.name, err)
					continue
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("%s error = %q, want it to contain %q", call.name, err, tt.wantErr)
				}
				if len(err.Error()) > MaxErrorBytes+100 || !utf8.ValidString(err.Error()) {
					t.Errorf("%s error is %d bytes (valid UTF-8: %v), want bounded", call.name, len(err.Error()), utf8.ValidString(err.Error()))
				}
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if fmt.Sprint(rec.settings) != fmt.Sprint(settings) {
				t.Errorf("plugin got settings %v, want %v", rec.settings, settings)
			}
			if rec.endpoint.URL != endpoint.URL || fmt.Sprint(rec.endpoint.Config) != fmt.Sprint(endpoint.Config) {
				t.Errorf("plugin got endpoint %+v, want %+v", rec.endpoint, endpoint)
			}
		})
	}
}

func TestOutcomesThePluginGetsWrongAreMadeSafe(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, testOutcomesThePluginGetsWrongAreMadeSafe)
}

func testOutcomesThePluginGetsWrongAreMadeSafe(t *testing.T, v int) {
	tests := []struct {
		name      string
		out       Outcome
		wantKind  OutcomeKind
		wantCode  int
		wantInErr string
	}{
		{"invalid kind becomes retryable", Outcome{Kind: "sent-probably", Error: "hm"}, OutcomeRetryable, 0, "no valid outcome kind"},
		{"empty kind becomes retryable", Outcome{}, OutcomeRetryable, 0, "no valid outcome kind"},
		{"status out of range is dropped", Outcome{Kind: OutcomeDelivered, StatusCode: 42}, OutcomeDelivered, 0, "status 42"},
		{"long error is bounded", Outcome{Kind: OutcomePermanent, Error: strings.Repeat("x", 10*MaxErrorBytes)}, OutcomePermanent, 0, "xxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := connect(t, &recorder{outcome: tt.out}, v)
			got, err := c.SendRPC(context.Background(), Message{DeliveryID: "d"})
			if err != nil {
				t.Fatalf("SendRPC: %v", err)
			}
			if got.Kind != tt.wantKind || got.StatusCode != tt.wantCode || !strings.Contains(got.Error, tt.wantInErr) {
				t.Errorf("outcome = %+v, want kind %s, status %d, error containing %q", got, tt.wantKind, tt.wantCode, tt.wantInErr)
			}
			if len(got.Error) > MaxErrorBytes {
				t.Errorf("error text is %d bytes, want at most %d", len(got.Error), MaxErrorBytes)
			}
		})
	}
}

// A plugin not written against this SDK may send anything; the host side
// bounds and checks it on its own.
func TestHostSideBoundsWhatAnyPluginSends(t *testing.T) {
	t.Parallel()
	got := outcomeFromProto(&transportpb.Outcome{
		Kind:       transportpb.OutcomeKind_OUTCOME_KIND_RETRYABLE,
		StatusCode: 429,
		Error:      strings.Repeat("é", MaxErrorBytes) + "\x00",
		RetryAfter: durationpb.New(-time.Second),
	})
	if len(got.Error) > MaxErrorBytes || !utf8.ValidString(got.Error) {
		t.Errorf("error is %d bytes, valid UTF-8 %v; want at most %d and valid", len(got.Error), utf8.ValidString(got.Error), MaxErrorBytes)
	}
	if got.RetryAfter != 0 {
		t.Errorf("negative retry_after became %v, want it ignored", got.RetryAfter)
	}
	if got.Kind != OutcomeRetryable || got.StatusCode != 429 {
		t.Errorf("outcome = %+v, want retryable 429", got)
	}
}

func TestLostConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, testLostConnectionIsUnavailable)
}

func testLostConnectionIsUnavailable(t *testing.T, v int) {
	c, server := connect(t, &recorder{outcome: Delivered(200)}, v)
	server.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.SendRPC(ctx, Message{DeliveryID: "d"})
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("SendRPC after the plugin stopped: %v, want ErrUnavailable", err)
	}
	if out := c.Send(ctx, Message{DeliveryID: "d"}); out.Kind != OutcomeRetryable || !strings.Contains(out.Error, "did not answer") {
		t.Errorf("Send after the plugin stopped = %+v, want a retryable outcome saying so", out)
	}
	if err := c.Configure(ctx, nil); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRejected) {
		t.Errorf("Configure after the plugin stopped: %v, want ErrUnavailable only", err)
	}
}

func TestVersionedPluginsServesTheCurrentProtocolUnderPluginName(t *testing.T) {
	t.Parallel()
	set, ok := VersionedPlugins(nil)[int(Handshake().ProtocolVersion)]
	if !ok {
		t.Fatalf("VersionedPlugins has no set for protocol %d", Handshake().ProtocolVersion)
	}
	if _, ok := set[PluginName].(plugin.GRPCPlugin); !ok {
		t.Errorf("set[%q] = %T, want a plugin.GRPCPlugin", PluginName, set[PluginName])
	}
	if err := (&Plugin{}).GRPCServer(nil, nil); err == nil {
		t.Error("GRPCServer with a nil Impl succeeded, want an error")
	}
}

func TestBoundError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want func(string) bool
	}{
		{"short text is kept", "connection refused", func(s string) bool { return s == "connection refused" }},
		{"NUL bytes are removed", "a\x00b", func(s string) bool { return s == "ab" }},
		{"invalid UTF-8 is replaced", "a\xffb", func(s string) bool { return s == "a\uFFFDb" }},
		{"long text is cut on a rune boundary", strings.Repeat("€", 1000), func(s string) bool {
			return len(s) <= MaxErrorBytes && utf8.ValidString(s) && strings.HasSuffix(s, "…")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := BoundError(tt.in); !tt.want(got) {
				t.Errorf("BoundError(%.40q…) = %.60q…", tt.in, got)
			}
		})
	}
}

// NoRequest is believed only where it can hold: on a failure the plugin
// reported with a kind the host knows. A delivered message went out, and a
// kind the host does not know is read as an attempt that may have.
func TestNoRequestIsReadOnlyOnAFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   *transportpb.Outcome
		want bool
	}{
		{"permanent", &transportpb.Outcome{Kind: transportpb.OutcomeKind_OUTCOME_KIND_PERMANENT, NoRequest: true}, true},
		{"retryable", &transportpb.Outcome{Kind: transportpb.OutcomeKind_OUTCOME_KIND_RETRYABLE, NoRequest: true}, true},
		{"delivered", &transportpb.Outcome{Kind: transportpb.OutcomeKind_OUTCOME_KIND_DELIVERED, StatusCode: 200, NoRequest: true}, false},
		{"unknown kind", &transportpb.Outcome{Kind: 42, NoRequest: true}, false},
		{"unset", &transportpb.Outcome{Kind: transportpb.OutcomeKind_OUTCOME_KIND_PERMANENT}, false},
	}
	for _, tt := range tests {
		if got := outcomeFromProto(tt.in); got.NoRequest != tt.want {
			t.Errorf("%s: NoRequest = %v, want %v (outcome %+v)", tt.name, got.NoRequest, tt.want, got)
		}
	}
	if p := outcomeToProto(Outcome{Kind: OutcomeDelivered, NoRequest: true}); p.GetNoRequest() {
		t.Error("a delivered outcome was sent with no_request set")
	}
}

// oldPlugin is a plugin built before Outcome had no_request: it serves the
// generated service directly, as a plugin in another language would, and
// never sets the field.
type oldPlugin struct {
	transportpb.UnimplementedTransportServer
}

func (oldPlugin) Send(context.Context, *transportpb.SendRequest) (*transportpb.Outcome, error) {
	return &transportpb.Outcome{Kind: transportpb.OutcomeKind_OUTCOME_KIND_PERMANENT, Error: "refused to connect: loopback"}, nil
}

// A protocol 1 plugin that never sets no_request: its refusal is read as an
// attempt that may have gone out, so the host records it (over-counting is
// allowed, under-counting is not).
func TestPluginThatNeverSetsNoRequestMayHaveSent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	transportpb.RegisterTransportServer(srv, oldPlugin{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	out, err := NewGRPCClient(conn, WithProtocol(1)).SendRPC(context.Background(), Message{DeliveryID: "d"})
	if err != nil {
		t.Fatalf("SendRPC: %v", err)
	}
	if out.Kind != OutcomePermanent || out.NoRequest {
		t.Fatalf("outcome = %+v, want permanent with NoRequest false", out)
	}
}
