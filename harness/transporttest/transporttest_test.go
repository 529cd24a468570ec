package transporttest

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/transport"
)

// recorder is a transport that says what Send was given.
type recorder struct {
	deadline    time.Time
	ctxDeadline time.Time
}

func (*recorder) Configure(context.Context, transport.Settings) error { return nil }
func (*recorder) Validate(context.Context, transport.Endpoint) error  { return nil }
func (r *recorder) Send(ctx context.Context, msg transport.Message) transport.Outcome {
	r.deadline = msg.Deadline
	r.ctxDeadline, _ = ctx.Deadline()
	return transport.Delivered(0)
}

func TestSend(t *testing.T) {
	t.Parallel()
	for _, within := range []time.Duration{100 * time.Millisecond, 2 * time.Second} {
		r := &recorder{}
		start := time.Now()
		if out := Send(r, transport.Message{}, within); out.Kind != transport.OutcomeDelivered {
			t.Fatalf("Send = %+v, want what the transport said", out)
		}
		if d := r.deadline.Sub(start.Add(within)); d < 0 || d > time.Second {
			t.Fatalf("within %s: the message's deadline is %s after the start, want %s", within, r.deadline.Sub(start), within)
		}
		if grace := r.ctxDeadline.Sub(r.deadline); grace < 1900*time.Millisecond || grace > 2100*time.Millisecond {
			t.Fatalf("within %s: the context outlasts the deadline by %s, want the host's 2s grace", within, grace)
		}
	}
}

// fakeT records failures instead of failing the real test.
type fakeT struct {
	testing.TB
	errors []string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.errors = append(f.errors, format)
}

func TestAssertNoLeak(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		text    string
		secrets []string
		fails   int
	}{
		{"clean", "connection refused by 127.0.0.1:4222", []string{"PASSWORD"}, 0},
		{"a secret", "auth failed for PASSWORD", []string{"PASSWORD", "BODY"}, 1},
		{"two secrets", "PASSWORD and BODY", []string{"PASSWORD", "BODY"}, 2},
		{"too long", strings.Repeat("x", transport.MaxErrorBytes+1), nil, 1},
		{"at the limit", strings.Repeat("x", transport.MaxErrorBytes), nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeT{TB: t}
			AssertNoLeak(f, transport.Outcome{Error: tt.text}, tt.secrets...)
			if len(f.errors) != tt.fails {
				t.Fatalf("AssertNoLeak reported %d failures (%q), want %d", len(f.errors), f.errors, tt.fails)
			}
		})
	}
}

// HungServer takes connections and never answers: a read waits until its
// deadline.
func TestHungServer(t *testing.T) {
	t.Parallel()
	addr := HungServer(t)
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := c.Read(make([]byte, 16))
		var ne net.Error
		if n != 0 || err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read = %d, %v; want nothing until the deadline", n, err)
		}
	}
}
