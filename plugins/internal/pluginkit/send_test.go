package pluginkit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

func TestAttemptContext(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tests := []struct {
		name     string
		deadline time.Time
		limit    time.Duration
		// want is when the context should end, give or take the time the
		// test takes to get there.
		want time.Time
	}{
		{"no attempt deadline: the limit", time.Time{}, 10 * time.Second, now.Add(10 * time.Second)},
		{"an attempt deadline sooner than the limit", now.Add(2 * time.Second), 10 * time.Second, now.Add(2 * time.Second)},
		{"an attempt deadline later than the limit", now.Add(time.Minute), 10 * time.Second, now.Add(10 * time.Second)},
		{"an attempt deadline already past", now.Add(-time.Second), 10 * time.Second, now.Add(-time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := AttemptContext(context.Background(), tt.deadline, tt.limit)
			defer cancel()
			got, ok := ctx.Deadline()
			if !ok {
				t.Fatal("the context has no deadline")
			}
			if d := got.Sub(tt.want); d < -time.Second || d > time.Second {
				t.Fatalf("deadline %s, want about %s", got, tt.want)
			}
		})
	}
	t.Run("the caller's sooner deadline stays", func(t *testing.T) {
		t.Parallel()
		parent, cancelParent := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancelParent()
		ctx, cancel := AttemptContext(parent, time.Time{}, time.Hour)
		defer cancel()
		want, _ := parent.Deadline()
		if got, _ := ctx.Deadline(); !got.Equal(want) {
			t.Fatalf("deadline %s, want the parent's %s", got, want)
		}
	})
}

func TestEndPublish(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		out        transport.Outcome
		wantStatus codes.Code
		wantDesc   string
	}{
		{"delivered", transport.Delivered(0), codes.Unset, ""},
		{"retryable", transport.Retryable(0, "no ack within 2s"), codes.Error, "no ack within 2s"},
		{"permanent", transport.Permanent(0, "no such topic"), codes.Error, "no such topic"},
		{"refused", transport.Refused("the guard refused it"), codes.Error, "the guard refused it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			send := func() (out transport.Outcome) {
				_, span := tp.Tracer("test").Start(context.Background(), "publish")
				defer EndPublish(span, &out)
				// The result is set after the defer, as in a Send.
				return tt.out
			}
			send()
			got := spans.GetSpans()
			if len(got) != 1 {
				t.Fatalf("%d spans ended, want 1", len(got))
			}
			if got[0].Status.Code != tt.wantStatus || got[0].Status.Description != tt.wantDesc {
				t.Fatalf("span status %+v, want %v %q", got[0].Status, tt.wantStatus, tt.wantDesc)
			}
		})
	}
}

func TestCheckAddrs(t *testing.T) {
	t.Parallel()
	strict := netguard.New(netguard.Config{Plugin: "test", Target: "test broker"})
	lenient := netguard.New(netguard.Config{Plugin: "test", Target: "test broker", Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	tests := []struct {
		name    string
		guard   *netguard.Guard
		addrs   []string
		wantErr string // "" means none
	}{
		{"none", strict, nil, ""},
		{"a public address", strict, []string{"93.184.216.34:5672"}, ""},
		{"loopback", strict, []string{"127.0.0.1:5672"}, "127.0.0.0/8, loopback"},
		{"loopback, allowed", lenient, []string{"127.0.0.1:5672"}, ""},
		{"a name leading to loopback", strict, []string{"localhost:4222"}, "localhost resolves to"},
		{"a name that does not resolve is left to the dial", strict, []string{"no-such-host.invalid:9092"}, ""},
		{"the first refusal of a list", strict, []string{"93.184.216.34:9092", "10.0.0.1:9092", "127.0.0.1:9092"}, "10.0.0.1"},
		{"a private address without a port", strict, []string{"10.0.0.1"}, "10.0.0.0/8, private-use"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := CheckAddrs(context.Background(), tt.guard, nil, 5*time.Second, tt.addrs...)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckAddrs(%q) = %v, want nil", tt.addrs, err)
				}
				return
			}
			var refused *netguard.RefusedError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckAddrs(%q) = %v, want a *netguard.RefusedError containing %q", tt.addrs, err, tt.wantErr)
			}
		})
	}
}

// answerResolver answers every name with addr, as a resolver's one bad
// answer for a name that usually leads to a public address would.
type answerResolver struct{ addr netip.Addr }

func (r answerResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{r.addr}, nil
}

// A refusal of a literal address is refused on every try, so the delivery
// fails; a refusal of what a name resolved to may pass with the next
// answer, so it is tried again. Nothing was sent in either case.
func TestGuardOutcomeOfARefusal(t *testing.T) {
	t.Parallel()
	strict := netguard.New(netguard.Config{Plugin: "test", Target: "test broker"})
	loopback := answerResolver{netip.MustParseAddr("127.0.0.1")}
	tests := []struct {
		name    string
		addrs   []string
		want    transport.OutcomeKind
		wantErr string
	}{
		{"a literal address", []string{"127.0.0.1:5672"}, transport.OutcomePermanent, "127.0.0.0/8, loopback"},
		{"a literal IPv6 address", []string{"[::1]:5672"}, transport.OutcomePermanent, "loopback"},
		{"localhost, which always leads here", []string{"localhost:5672"}, transport.OutcomePermanent, "localhost resolves to 127.0.0.1"},
		{"a subdomain of localhost", []string{"broker.localhost:5672"}, transport.OutcomePermanent, "loopback"},
		{"a name answered with loopback", []string{"broker.example:5672"}, transport.OutcomeRetryable, "broker.example resolved to an address this plugin will not connect to"},
		{"a name without a port", []string{"broker.example"}, transport.OutcomeRetryable, "a DNS answer can change"},
		{"a name after an allowed address", []string{"93.184.216.34:9092", "broker.example:9092"}, transport.OutcomeRetryable, "broker.example"},
		{"a literal address before a name", []string{"10.0.0.1:9092", "broker.example:9092"}, transport.OutcomePermanent, "10.0.0.0/8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := CheckAddrs(context.Background(), strict, loopback, 5*time.Second, tt.addrs...)
			var refused *netguard.RefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("CheckAddrs(%q) = %v, want a *netguard.RefusedError", tt.addrs, err)
			}
			out, ok := GuardOutcome(err)
			if !ok || out.Kind != tt.want || !out.NoRequest || !strings.Contains(out.Error, tt.wantErr) {
				t.Fatalf("GuardOutcome(%v) = %+v, %v; want %v with no request, containing %q", err, out, ok, tt.want, tt.wantErr)
			}
		})
	}
}

// A dialer hands NameRefusal the address it was asked to dial; only a
// table refusal of a name's answer is marked, never a unix socket path or
// an error that is no refusal.
func TestNameRefusal(t *testing.T) {
	t.Parallel()
	guard := netguard.New(netguard.Config{Plugin: "test"})
	tableRefusal := guard.CheckNetwork("tcp", "127.0.0.1:6379")
	unixRefusal := guard.CheckNetwork("unix", "/run/redis.sock")
	other := errors.New("connection refused")
	tests := []struct {
		name     string
		err      error
		hostport string
		named    bool
	}{
		{"a name's answer", tableRefusal, "redis.example:6379", true},
		{"a name's answer, wrapped", fmt.Errorf("dial: %w", tableRefusal), "redis.example:6379", true},
		{"a literal address", tableRefusal, "127.0.0.1:6379", false},
		{"localhost", tableRefusal, "LOCALHOST.:6379", false},
		{"a unix socket", unixRefusal, "/run/redis.sock", false},
		{"no refusal", other, "redis.example:6379", false},
		{"no error", nil, "redis.example:6379", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := NameRefusal(tt.err, tt.hostport)
			var named *NameRefusedError
			if errors.As(got, &named) != tt.named {
				t.Fatalf("NameRefusal(%v, %q) = %v, want marked as a name's answer: %v", tt.err, tt.hostport, got, tt.named)
			}
			if !tt.named && got != tt.err {
				t.Fatalf("NameRefusal(%v, %q) = %v, want the error unchanged", tt.err, tt.hostport, got)
			}
		})
	}
}
