package pluginkit

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

var errTestClosed = errors.New("the test transport is shutting down")

// testConn is a connection the tests can tell apart.
type testConn struct{ key string }

func TestConnsGet(t *testing.T) {
	t.Parallel()
	errRefused := errors.New("the guard refused it")
	tests := []struct {
		name string
		// before prepares the Conns; made is the connection it holds
		// for "broker-a", if any.
		before   func(p *Conns[string, *testConn]) (made *testConn)
		checkErr error
		wantErr  error
		// wantCheck and wantOpen are whether check and open are asked.
		wantCheck, wantOpen bool
		wantSame            bool // the connection made before is returned
	}{
		{
			name:      "first use: checked, then made",
			before:    func(*Conns[string, *testConn]) *testConn { return nil },
			wantCheck: true, wantOpen: true,
		},
		{
			name:      "a refusal: nothing is made",
			before:    func(*Conns[string, *testConn]) *testConn { return nil },
			checkErr:  errRefused,
			wantErr:   errRefused,
			wantCheck: true,
		},
		{
			name: "made before: neither checked nor made again",
			before: func(p *Conns[string, *testConn]) *testConn {
				c, _ := p.Get("broker-a", nil, func() *testConn { return &testConn{"broker-a"} })
				return c
			},
			wantSame: true,
		},
		{
			name: "another key's connection is not this one's",
			before: func(p *Conns[string, *testConn]) *testConn {
				_, _ = p.Get("broker-b", nil, func() *testConn { return &testConn{"broker-b"} })
				return nil
			},
			wantCheck: true, wantOpen: true,
		},
		{
			name: "after Close: the transport's own error",
			before: func(p *Conns[string, *testConn]) *testConn {
				_, _ = p.Get("broker-a", nil, func() *testConn { return &testConn{"broker-a"} })
				p.Close()
				return nil
			},
			wantErr: errTestClosed,
		},
		{
			name: "after Configure: made again",
			before: func(p *Conns[string, *testConn]) *testConn {
				_, _ = p.Get("broker-a", nil, func() *testConn { return &testConn{"broker-a"} })
				p.Configure("next")
				return nil
			},
			wantCheck: true, wantOpen: true,
		},
		{
			name: "after Forget: made again",
			before: func(p *Conns[string, *testConn]) *testConn {
				c, _ := p.Get("broker-a", nil, func() *testConn { return &testConn{"broker-a"} })
				p.Forget("broker-a", c)
				return nil
			},
			wantCheck: true, wantOpen: true,
		},
		{
			name: "Forget of another connection keeps this one",
			before: func(p *Conns[string, *testConn]) *testConn {
				c, _ := p.Get("broker-a", nil, func() *testConn { return &testConn{"broker-a"} })
				p.Forget("broker-a", &testConn{"broker-a"})
				return c
			},
			wantSame: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := NewConns[string, *testConn]("first", errTestClosed)
			made := tt.before(p)
			checked, opened := false, false
			fresh := &testConn{"broker-a"}
			c, err := p.Get("broker-a",
				func() error { checked = true; return tt.checkErr },
				func() *testConn { opened = true; return fresh })
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Get error = %v, want %v", err, tt.wantErr)
			}
			if checked != tt.wantCheck || opened != tt.wantOpen {
				t.Fatalf("check asked %v, open asked %v; want %v, %v", checked, opened, tt.wantCheck, tt.wantOpen)
			}
			switch {
			case err != nil:
				if c != nil {
					t.Fatalf("Get returned %v with its error, want nil", c)
				}
			case tt.wantSame && c != made:
				t.Fatalf("Get returned %p, want the connection made before, %p", c, made)
			case !tt.wantSame && c != fresh:
				t.Fatalf("Get returned %p, want the one open made, %p", c, fresh)
			}
			if err == nil {
				if got, ok, lerr := p.Lookup("broker-a"); got != c || !ok || lerr != nil {
					t.Fatalf("Lookup after Get = %v, %v, %v; want what Get returned", got, ok, lerr)
				}
			}
		})
	}
}

func TestConnsConfigureAndClose(t *testing.T) {
	t.Parallel()
	p := NewConns[string, *testConn]("defaults", errTestClosed)
	if got := p.Settings(); got != "defaults" {
		t.Fatalf("Settings = %q, want the initial ones", got)
	}
	for _, key := range []string{"a", "b"} {
		if _, err := p.Get(key, nil, func() *testConn { return &testConn{key} }); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(cs []*testConn) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.key)
		}
		slices.Sort(out)
		return out
	}
	if old := p.Configure("next"); !slices.Equal(keys(old), []string{"a", "b"}) {
		t.Fatalf("Configure handed back %v, want both connections to close", keys(old))
	}
	if got, n := p.Settings(), p.Len(); got != "next" || n != 0 {
		t.Fatalf("after Configure: settings %q and %d connections, want the new settings and none", got, n)
	}
	if _, err := p.Get("c", nil, func() *testConn { return &testConn{"c"} }); err != nil {
		t.Fatal(err)
	}
	if old := p.Close(); !slices.Equal(keys(old), []string{"c"}) {
		t.Fatalf("Close handed back %v, want the one connection to close", keys(old))
	}
	if _, _, err := p.Lookup("c"); !errors.Is(err, errTestClosed) {
		t.Fatalf("Lookup after Close: %v, want %v", err, errTestClosed)
	}
	if old := p.Close(); len(old) != 0 {
		t.Fatalf("a second Close handed back %v, want nothing", old)
	}
}

// Many sends to one broker at once make one connection.
func TestConnsGetConcurrent(t *testing.T) {
	t.Parallel()
	p := NewConns[string, *testConn]("", errTestClosed)
	var opened atomic.Int32
	var wg sync.WaitGroup
	got := make([]*testConn, 32)
	for i := range got {
		wg.Go(func() {
			c, err := p.Get("broker", func() error { return nil }, func() *testConn {
				opened.Add(1)
				return &testConn{"broker"}
			})
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		})
	}
	wg.Wait()
	if n := opened.Load(); n != 1 {
		t.Fatalf("open was asked %d times, want once", n)
	}
	for _, c := range got {
		if c != got[0] {
			t.Fatal("two sends got different connections")
		}
	}
}
