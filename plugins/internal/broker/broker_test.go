package broker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/transport"
)

func TestCommonParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key, value string
		common     bool
		wantErr    string // "" means none
		check      func(Common) bool
	}{
		{SettingConnectTimeout, "2s", true, "", func(c Common) bool { return c.ConnectTimeout == 2*time.Second }},
		{SettingReconnectWait, "100ms", true, "", func(c Common) bool { return c.ReconnectWait == 100*time.Millisecond }},
		{SettingReconnectWaitMax, "1m", true, "", func(c Common) bool { return c.ReconnectWaitMax == time.Minute }},
		{SettingConnectTimeout, "-1s", true, "setting connect_timeout", nil},
		{SettingAllowedNetworks, "10.0.0.0/8", true, "", nil},
		{SettingAllowedNetworks, "not a network", true, "setting allowed_networks", nil},
		{"url", "amqp://h", false, "", func(c Common) bool {
			return c.ConnectTimeout == DefaultConnectTimeout && c.ReconnectWait == DefaultReconnectWait && c.ReconnectWaitMax == DefaultReconnectWaitMax
		}},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			t.Parallel()
			c := Defaults("test", "test broker")
			common, err := c.Parse(tt.key, tt.value)
			if common != tt.common {
				t.Fatalf("Parse(%q) says common %v, want %v", tt.key, common, tt.common)
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Parse(%q, %q) error = %v, want one containing %q", tt.key, tt.value, err, tt.wantErr)
			}
			if tt.check != nil && !tt.check(c) {
				t.Fatalf("Parse(%q, %q) left %+v", tt.key, tt.value, c)
			}
		})
	}
}

// An allow-list changes the guard, which keeps naming the plugin.
func TestCommonGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := Defaults("test", "test broker")
	err := check(ctx, c, "10.0.0.1:5672")
	if err == nil || !strings.Contains(err.Error(), "the test plugin's allowed_networks setting") {
		t.Fatalf("the default guard on a private address: %v, want a refusal naming the plugin's setting", err)
	}
	if _, err := c.Parse(SettingAllowedNetworks, "10.0.0.0/8"); err != nil {
		t.Fatal(err)
	}
	if err := check(ctx, c, "10.0.0.1:5672"); err != nil {
		t.Fatalf("with 10.0.0.0/8 allowed: %v, want nil", err)
	}
	if err := check(ctx, c, "127.0.0.1:5672"); err == nil {
		t.Fatal("with 10.0.0.0/8 allowed, loopback passed the guard")
	}
}

func TestCommonCheck(t *testing.T) {
	t.Parallel()
	c := Defaults("test", "test broker")
	if err := c.Check(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	c.ReconnectWait, c.ReconnectWaitMax = 2*time.Second, time.Second
	if err := c.Check(); err == nil || !strings.Contains(err.Error(), "reconnect_wait_max (1s) is shorter than reconnect_wait (2s)") {
		t.Fatalf("a max wait under the first: %v", err)
	}
}

// testSettings, testTarget and testConn stand in for a transport's own.
type testSettings struct {
	Common
	name string
}

type testTarget struct{ key, addr string }

func (tgt testTarget) Broker() (string, string) { return tgt.key, tgt.addr }

type testConn struct {
	key    string
	st     testSettings
	ready  chan struct{}
	closed chan struct{}
}

func (c *testConn) Ready() <-chan struct{} { return c.ready }
func (c *testConn) Close()                 { close(c.closed) }

var errTestClosed = errors.New("the test transport is shutting down")

// newTestTransport resolves an endpoint's URL as "key@host:port"; its
// connections are ready at once unless the key is "slow".
func newTestTransport() *Transport[testSettings, testTarget, *testConn] {
	return New(nil, Hooks[testSettings, testTarget, *testConn]{
		Defaults: testSettings{Common: Defaults("test", "test broker"), name: "defaults"},
		Parse: func(s transport.Settings) (testSettings, error) {
			if s["name"] == "" {
				return testSettings{}, errors.New("no name")
			}
			return testSettings{Common: Defaults("test", "test broker"), name: s["name"]}, nil
		},
		Resolve: func(_ testSettings, e transport.Endpoint) (testTarget, error) {
			key, addr, ok := strings.Cut(e.URL, "@")
			if !ok {
				return testTarget{}, errors.New("no broker")
			}
			return testTarget{key, addr}, nil
		},
		Open: func(tgt testTarget, st testSettings, _ *slog.Logger) *testConn {
			c := &testConn{key: tgt.key, st: st, ready: make(chan struct{}), closed: make(chan struct{})}
			if tgt.key != "slow" {
				close(c.ready)
			}
			return c
		},
		ErrClosed: errTestClosed,
	})
}

func TestTransportValidate(t *testing.T) {
	t.Parallel()
	tr := newTestTransport()
	tests := []struct {
		url, wantErr string // wantErr "" means none
	}{
		{"a@93.184.216.34:5672", ""},
		{"no broker", "no broker"},
		{"a@127.0.0.1:5672", "127.0.0.0/8, loopback"},
	}
	for _, tt := range tests {
		err := tr.Validate(context.Background(), transport.Endpoint{URL: tt.url})
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("Validate(%q) = %v, want %q", tt.url, err, tt.wantErr)
		}
	}
	if _, ok := tr.Lookup("a"); ok {
		t.Error("Validate made a connection")
	}
}

func TestTransportConn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := newTestTransport()
	conn := func(url string) (*testConn, error) {
		st, tgt, err := tr.Resolve(transport.Endpoint{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Conn(ctx, st, tgt)
	}
	first, err := conn("a@93.184.216.34:5672")
	if err != nil || first.st.name != "defaults" {
		t.Fatalf("first Conn = %+v, %v; want one made under the defaults", first, err)
	}
	if again, err := conn("a@93.184.216.34:5672"); again != first || err != nil {
		t.Fatalf("second Conn = %p, %v; want the first, %p", again, err, first)
	}
	if _, err := conn("b@127.0.0.1:5672"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("Conn to a refused broker: %v, want the guard's refusal", err)
	}
	if _, ok := tr.Lookup("b"); ok {
		t.Fatal("a refused broker got a connection")
	}

	// A connection still dialling: the wait ends with the caller's context.
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	st, tgt, _ := tr.Resolve(transport.Endpoint{URL: "slow@93.184.216.34:5672"})
	if _, err := tr.Conn(short, st, tgt); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Conn to a broker not ready: %v, want the context's deadline", err)
	}
	slow, _ := tr.Lookup("slow")

	// Configure closes what was made under the old settings.
	if err := tr.Configure(ctx, transport.Settings{}); err == nil {
		t.Fatal("Configure with settings Parse refuses succeeded")
	}
	if err := tr.Configure(ctx, transport.Settings{"name": "next"}); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, first, slow)
	next, err := conn("a@93.184.216.34:5672")
	if err != nil || next == first || next.st.name != "next" {
		t.Fatalf("Conn after Configure = %+v, %v; want a new one under the new settings", next, err)
	}

	tr.Close()
	waitClosed(t, next)
	if _, err := conn("a@93.184.216.34:5672"); !errors.Is(err, errTestClosed) {
		t.Fatalf("Conn after Close: %v, want %v", err, errTestClosed)
	}
}

func waitClosed(t *testing.T, conns ...*testConn) {
	t.Helper()
	for _, c := range conns {
		select {
		case <-c.closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("connection %s was not closed", c.key)
		}
	}
}

// Run dials until a dial succeeds, dials again when the connection is
// lost, and stops on Close, even while it waits to dial again.
func TestLoop(t *testing.T) {
	t.Parallel()
	c := Defaults("test", "test broker")
	c.ReconnectWait, c.ReconnectWaitMax = time.Millisecond, 4*time.Millisecond
	l := NewLoop(slog.New(slog.DiscardHandler), "test")
	var dials atomic.Int32
	lost := make(chan bool)
	stopped := make(chan struct{})
	go l.Run(c, func() (func() bool, error) {
		// Dials 1 and 2 fail; 3 and 4 connect, and 3's connection is lost.
		switch dials.Add(1) {
		case 1, 2:
			return nil, errors.New("refused")
		case 3:
			return func() bool { return <-lost }, nil
		default:
			return func() bool { <-l.Stopping(); close(stopped); return false }, nil
		}
	})
	select {
	case <-l.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("Ready is not closed after the first dial failed")
	}
	lost <- true
	deadline := time.Now().Add(5 * time.Second)
	for dials.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("Close did not return; %d dials", dials.Load())
	}
	if n := dials.Load(); n != 4 {
		t.Fatalf("%d dials, want 4: two failed, one lost, one live", n)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Close returned before the live connection's watch ended")
	}

	// A loop that only fails stops in its wait.
	l = NewLoop(slog.New(slog.DiscardHandler), "test")
	c.ReconnectWait, c.ReconnectWaitMax = time.Hour, time.Hour
	go l.Run(c, func() (func() bool, error) { return nil, errors.New("refused") })
	<-l.Ready()
	done := make(chan struct{})
	go func() { l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the wait to dial again")
	}
}
