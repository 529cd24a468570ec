package redistransport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

func message(url, stream string) transport.Message {
	return transport.Message{
		DeliveryID: "dlv_1",
		Attempt:    1,
		Endpoint:   transport.Endpoint{Config: map[string]string{ConfigURL: url, ConfigStream: stream}},
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
		{"every setting", transport.Settings{SettingURL: "redis://127.0.0.1:6379/0", SettingConnectTimeout: "2s", SettingPoolSize: "20", SettingAllowedNetworks: "127.0.0.1,10.0.0.0/8", SettingAllowUnixSockets: "false"}, ""},
		{"a bad allow-list", transport.Settings{SettingAllowedNetworks: "localhost"}, `setting allowed_networks: "localhost" is not a CIDR`},
		{"allow_unix_sockets not a boolean", transport.Settings{SettingAllowUnixSockets: "yes please"}, `setting allow_unix_sockets: "yes please" is not true or false`},
		{"an unknown setting", transport.Settings{"maxlen": "5"}, `unknown setting "maxlen"`},
		{"a bad duration", transport.Settings{SettingConnectTimeout: "soon"}, "connect_timeout"},
		{"a zero pool", transport.Settings{SettingPoolSize: "0"}, "pool_size"},
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
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	if err := tr.Configure(context.Background(), transport.Settings{
		SettingAllowedNetworks: "127.0.0.1, 10.0.0.0/8", SettingAllowUnixSockets: "true",
	}); err != nil {
		t.Fatal(err)
	}
	cfg := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	const u = "redis://127.0.0.1:6379/0"
	tests := []struct {
		name    string
		e       transport.Endpoint
		wantErr string // "" means valid
	}{
		{"a stream and a url", transport.Endpoint{Config: cfg("stream", "forms:submissions", "url", u)}, ""},
		{"a password in the url", transport.Endpoint{Config: cfg("stream", "s", "url", "redis://:"+testPassword+"@10.0.0.1:6379/2")}, ""},
		{"a user and a password", transport.Endpoint{Config: cfg("stream", "s", "url", "rediss://hymical:"+testPassword+"@redis.internal:6380/0")}, ""},
		{"a unix socket", transport.Endpoint{Config: cfg("stream", "s", "url", "unix:///run/redis.sock?db=1")}, ""},
		{"the url in the endpoint's URL", transport.Endpoint{URL: u, Config: cfg("stream", "s")}, ""},
		{"a maxlen", transport.Endpoint{Config: cfg("stream", "s", "url", u, "maxlen", "10000")}, ""},
		{"no stream", transport.Endpoint{Config: cfg("url", u)}, "no stream"},
		{"a stream with a space", transport.Endpoint{Config: cfg("stream", "forms submissions", "url", u)}, "white space"},
		{"a stream with a newline", transport.Endpoint{Config: cfg("stream", "forms\n", "url", u)}, "white space"},
		{"a stream of invalid UTF-8", transport.Endpoint{Config: cfg("stream", "s\xff", "url", u)}, "UTF-8"},
		{"an overlong stream", transport.Endpoint{Config: cfg("stream", strings.Repeat("s", MaxStreamBytes+1), "url", u)}, "bytes"},
		{"no url", transport.Endpoint{Config: cfg("stream", "s")}, "no url"},
		{"a url without a scheme", transport.Endpoint{Config: cfg("stream", "s", "url", "127.0.0.1:6379")}, "no scheme"},
		{"an http url", transport.Endpoint{Config: cfg("stream", "s", "url", "http://127.0.0.1:6379")}, `scheme "http"`},
		{"a url without a host", transport.Endpoint{Config: cfg("stream", "s", "url", "redis:///0")}, "no host"},
		{"a url that does not parse", transport.Endpoint{Config: cfg("stream", "s", "url", "redis://:"+testPassword+"@[::1")}, "does not parse"},
		{"a database that is not a number", transport.Endpoint{Config: cfg("stream", "s", "url", "redis://:"+testPassword+"@127.0.0.1:6379/zero")}, "database"},
		{"a unix url without a path", transport.Endpoint{Config: cfg("stream", "s", "url", "unix://")}, "socket path"},
		{"maxlen zero", transport.Endpoint{Config: cfg("stream", "s", "url", u, "maxlen", "0")}, "maxlen"},
		{"maxlen negative", transport.Endpoint{Config: cfg("stream", "s", "url", u, "maxlen", "-5")}, "maxlen"},
		{"maxlen not a number", transport.Endpoint{Config: cfg("stream", "s", "url", u, "maxlen", "~1000")}, "maxlen"},
		{"maxlen too large", transport.Endpoint{Config: cfg("stream", "s", "url", u, "maxlen", "99999999999999999")}, "maxlen"},
		{"two different urls", transport.Endpoint{URL: "redis://a:6379/0", Config: cfg("stream", "s", "url", u)}, "both"},
		{"an unknown key", transport.Endpoint{Config: cfg("stream", "s", "url", u, "subject", "x")}, `unknown endpoint config "subject"`},
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
			msg := message("", "")
			msg.Endpoint = tt.e
			if out := tr.Send(context.Background(), msg); out.Kind != transport.OutcomePermanent || !out.NoRequest {
				t.Fatalf("Send of an endpoint Validate refuses: outcome %+v, want permanent, no request", out)
			}
		})
	}
}

// Without an allow-list, the SSRF guard refuses servers that are not
// globally reachable, and unix sockets, at Validate and at Send, saying
// which setting lets them through.
func TestValidateRefusesWhatTheGuardRefuses(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	cfg := func(url string) transport.Endpoint {
		return transport.Endpoint{Config: map[string]string{"stream": "s", "url": url}}
	}
	tests := []struct {
		name    string
		e       transport.Endpoint
		wantErr string // "" means valid
	}{
		{"a public server", cfg("redis://93.184.216.34:6379/0"), ""},
		{"a public server over TLS", cfg("rediss://[2606:2800:220:1::1]:6380/0"), ""},
		{"loopback", cfg("redis://:" + testPassword + "@127.0.0.1:6379/0"), "127.0.0.0/8, loopback"},
		{"a name resolving to loopback", cfg("redis://localhost:6379/0"), "localhost resolves to"},
		{"a private server", cfg("rediss://10.0.0.1:6380/0"), "10.0.0.0/8, private-use"},
		{"the metadata service", cfg("redis://169.254.169.254:6379/0"), "169.254.0.0/16, link-local"},
		{"NAT64 of a private address", cfg("redis://[64:ff9b::a00:5]:6379/0"), "leads to 10.0.0.5"},
		{"6to4 of a private address", cfg("redis://[2002:a00:5::1]:6379/0"), "leads to 10.0.0.5"},
		{"benchmarking", cfg("redis://198.18.0.1:6379/0"), "198.18.0.0/15, benchmarking (RFC 2544)"},
		{"a unix socket", cfg("unix:///run/redis.sock"), "set the redis plugin's allow_unix_sockets setting to true"},
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
			if tt.e.Config["url"] != "unix:///run/redis.sock" && !strings.Contains(err.Error(), "the redis plugin's allowed_networks setting") {
				t.Errorf("refusal %q does not name the setting that allows it", err)
			}
			msg := message("", "")
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
	if err := tr.Configure(context.Background(), transport.Settings{SettingURL: "redis://127.0.0.1:6379/0", SettingAllowedNetworks: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Validate(context.Background(), transport.Endpoint{Config: map[string]string{ConfigStream: "s"}}); err != nil {
		t.Fatalf("with the url setting, an endpoint naming only its stream: %v", err)
	}
}

func TestEntryNeedsTheSignedHeaders(t *testing.T) {
	t.Parallel()
	for _, drop := range []string{"webhook-timestamp", "webhook-signature"} {
		msg := message("redis://127.0.0.1:1/0", "s")
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

func TestClassify(t *testing.T) {
	t.Parallel()
	f := failure{stream: "forms", server: "redis://127.0.0.1:6379/0", waited: 2 * time.Second}
	redisErr := func(s string) error { return fmt.Errorf("wrapped: %w", fakeRedisError(s)) }
	tests := []struct {
		name   string
		err    error
		want   transport.OutcomeKind
		inText string
	}{
		{"WRONGTYPE", redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"), transport.OutcomePermanent, "not a stream"},
		{"NOAUTH", redisErr("NOAUTH Authentication required."), transport.OutcomePermanent, "requires a password"},
		{"WRONGPASS", redisErr("WRONGPASS invalid username-password pair or user is disabled."), transport.OutcomePermanent, "wrong"},
		{"AUTH without a password set", redisErr("ERR AUTH <password> called without any password configured for the default user."), transport.OutcomePermanent, "does not expect"},
		{"NOPERM", redisErr("NOPERM User limited has no permissions to run the 'xadd' command"), transport.OutcomePermanent, "ACL"},
		{"a missing database", redisErr("ERR DB index is out of range"), transport.OutcomePermanent, "database number"},
		{"no streams", redisErr("ERR unknown command 'XADD', with args beginning with: "), transport.OutcomePermanent, "5.0"},
		{"a cluster", redisErr("MOVED 3999 127.0.0.1:6381"), transport.OutcomePermanent, "Cluster"},
		{"LOADING", redisErr("LOADING Redis is loading the dataset in memory"), transport.OutcomeRetryable, "LOADING"},
		{"BUSY", redisErr("BUSY Redis is busy running a script."), transport.OutcomeRetryable, "BUSY"},
		{"OOM", redisErr("OOM command not allowed when used memory > 'maxmemory'."), transport.OutcomeRetryable, "OOM"},
		{"READONLY", redisErr("READONLY You can't write against a read only replica."), transport.OutcomeRetryable, "READONLY"},
		{"max clients", redisErr("ERR max number of clients reached"), transport.OutcomeRetryable, "max number of clients"},
		{"an unknown answer", redisErr("ERR something new"), transport.OutcomeRetryable, "something new"},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}, transport.OutcomeRetryable, "could not reach"},
		{"a dropped connection", io.EOF, transport.OutcomeRetryable, "could not reach"},
		{"the deadline", context.DeadlineExceeded, transport.OutcomeRetryable, "within 2s"},
		{"a network timeout", &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, transport.OutcomeRetryable, "no reply"},
		{"cancelled", context.Canceled, transport.OutcomeRetryable, "abandoned"},
		{"a busy pool", redis.ErrPoolTimeout, transport.OutcomeRetryable, "pool_size"},
		{"closed", redis.ErrClosed, transport.OutcomeRetryable, "shutting down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := classify(tt.err, f)
			if out.Kind != tt.want || !strings.Contains(out.Error, tt.inText) {
				t.Fatalf("classify(%v) = %+v, want %s containing %q", tt.err, out, tt.want, tt.inText)
			}
			// A failed XADD may have reached the server, or tried to.
			if out.NoRequest {
				t.Fatalf("classify(%v) = %+v, want it counted as an attempt", tt.err, out)
			}
		})
	}
}

// fakeRedisError is an error reply as the client reports one: it has the
// RedisError marker method that redis.Error requires.
type fakeRedisError string

func (e fakeRedisError) Error() string { return string(e) }
func (fakeRedisError) RedisError()     {}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestOutcomeTextIsScrubbed(t *testing.T) {
	t.Parallel()
	srv, err := parseServer("redis://hymical:" + testPassword + "@127.0.0.1:6379/0")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(srv.shown, testPassword) || strings.Contains(srv.shown, "hymical") {
		t.Fatalf("shown server %q carries credentials", srv.shown)
	}
	msg := message(srv.raw, "s")
	quoting := fmt.Errorf("failed: %s %s %s %s", testPassword, secretSignature, secretBody, strings.Repeat("z", 2000))
	out := classify(quoting, failure{stream: "s", server: srv.shown})
	out.Error = scrub(out.Error, srv, msg)
	assertNoLeak(t, out)

	// A password that a URL carries escaped is hidden in either form.
	const special = "p@ss/w rd:" + testPassword
	escaped, err := parseServer("redis://" + url.UserPassword("hymical", special).String() + "@127.0.0.1:6379/0")
	if err != nil {
		t.Fatal(err)
	}
	quoting = fmt.Errorf("failed: %s and %s and %s", special, url.QueryEscape(special), url.PathEscape(special))
	if got := scrub(quoting.Error(), escaped, msg); got != "failed: [redacted] and [redacted] and [redacted]" {
		t.Fatalf("scrubbed text = %q, want every form of the password hidden", got)
	}
}

// A send after Close sends nothing: retryable, and no request went out.
func TestSendAfterCloseMakesNoRequest(t *testing.T) {
	t.Parallel()
	tr := New(Options{})
	tr.Close()
	out := tr.Send(context.Background(), message("redis://127.0.0.1:1/0", "s"))
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
	transporttest.CheckGuardCases(t, transporttest.GuardCases("redis", "6379", "/0"), func(url string) transport.Outcome {
		return tr.Send(context.Background(), message(url, "forms"))
	})
}
