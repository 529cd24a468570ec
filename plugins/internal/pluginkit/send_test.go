package pluginkit

import (
	"context"
	"errors"
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
			err := CheckAddrs(context.Background(), tt.guard, 5*time.Second, tt.addrs...)
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
