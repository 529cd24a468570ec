package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hymical/hymical/sdk/transport/transportpb"
)

// gate is a plugin whose sends wait until the test lets each one go, by
// delivery id, and answer with their delivery id as the error text, so a
// caller can tell its own answer from another's.
type gate struct {
	arrived chan string
	mu      sync.Mutex
	release map[string]chan struct{}
	// ended gets the context error of a send whose context ended first.
	ended chan error
}

func newGate() *gate {
	return &gate{arrived: make(chan string, 100), release: map[string]chan struct{}{}, ended: make(chan error, 100)}
}

func (*gate) Configure(context.Context, Settings) error { return nil }
func (*gate) Validate(context.Context, Endpoint) error  { return nil }

func (g *gate) Send(ctx context.Context, msg Message) Outcome {
	g.arrived <- msg.DeliveryID
	select {
	case <-g.ch(msg.DeliveryID):
		return Outcome{Kind: OutcomeDelivered, StatusCode: 200, Error: msg.DeliveryID}
	case <-ctx.Done():
		g.ended <- ctx.Err()
		return Retryable(0, ctx.Err().Error())
	}
}

func (g *gate) ch(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.release[id]
	if !ok {
		c = make(chan struct{})
		g.release[id] = c
	}
	return c
}

func (g *gate) let(id string) { close(g.ch(id)) }

// stubborn is a plugin whose sends ignore their context and wait for
// release, as a plugin that answers late does.
type stubborn struct{ release chan struct{} }

func (stubborn) Configure(context.Context, Settings) error { return nil }
func (stubborn) Validate(context.Context, Endpoint) error  { return nil }
func (s stubborn) Send(_ context.Context, msg Message) Outcome {
	if msg.DeliveryID == "late" {
		<-s.release
	}
	return Outcome{Kind: OutcomeDelivered, StatusCode: 200, Error: msg.DeliveryID}
}

// streamServer serves impl on loopback and counts the SendStreams opened.
type streamServer struct {
	srv     *grpc.Server
	streams atomic.Int32
}

func serveStreams(t *testing.T, impl Transport) (*GRPCClient, *streamServer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ss := &streamServer{}
	ss.srv = grpc.NewServer(grpc.StreamInterceptor(func(srv any, stream grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod == transportpb.Transport_SendStream_FullMethodName {
			ss.streams.Add(1)
		}
		return handler(srv, stream)
	}))
	transportpb.RegisterTransportServer(ss.srv, newGRPCServer(impl, nil))
	go func() { _ = ss.srv.Serve(ln) }()
	t.Cleanup(ss.srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return NewGRPCClient(conn), ss
}

type result struct {
	id  string
	out Outcome
	err error
}

// sendAll starts a SendRPC for every id and returns where their results
// arrive.
func sendAll(ctx context.Context, c *GRPCClient, ids []string) <-chan result {
	results := make(chan result, len(ids))
	for _, id := range ids {
		go func() {
			out, err := c.SendRPC(ctx, Message{DeliveryID: id})
			results <- result{id, out, err}
		}()
	}
	return results
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("dlv_%d", i)
	}
	return out
}

// Many sends are in flight on one stream at once, and each caller gets its
// own answer however the plugin orders them.
func TestStreamMultiplexesConcurrentSends(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		order func(arrived []string) []string
	}{
		{"answered in order", func(a []string) []string { return a }},
		{"answered in reverse", func(a []string) []string {
			r := make([]string, len(a))
			for i, id := range a {
				r[len(a)-1-i] = id
			}
			return r
		}},
		{"answered odd ones first", func(a []string) []string {
			var odd, even []string
			for i, id := range a {
				if i%2 == 1 {
					odd = append(odd, id)
				} else {
					even = append(even, id)
				}
			}
			return append(odd, even...)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newGate()
			c, ss := serveStreams(t, g)
			const n = 32
			results := sendAll(t.Context(), c, ids(n))
			// Every send reaches the plugin before any is answered: they are
			// all in flight on the stream at once.
			var arrived []string
			for range n {
				arrived = append(arrived, <-g.arrived)
			}
			for _, id := range tt.order(arrived) {
				g.let(id)
			}
			for range n {
				r := <-results
				if r.err != nil || r.out.Kind != OutcomeDelivered || r.out.Error != r.id {
					t.Errorf("send %s got %+v, %v; want its own delivered answer", r.id, r.out, r.err)
				}
			}
			if got := ss.streams.Load(); got != 1 {
				t.Errorf("%d streams were opened, want 1 for every send", got)
			}
		})
	}
}

// When the stream breaks, every send waiting on it fails at once with
// ErrUnavailable, not at its deadline, and the plugin's sends are canceled.
func TestBrokenStreamFailsEveryPendingSend(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		brk   func(c *GRPCClient, ss *streamServer)
		reuse bool // whether the connection survives for another send
	}{
		{"the plugin's server stops", func(_ *GRPCClient, ss *streamServer) { ss.srv.Stop() }, false},
		{"the stream alone breaks", func(c *GRPCClient, _ *streamServer) {
			c.streamMu.Lock()
			s := c.stream
			c.streamMu.Unlock()
			s.fail(errors.New("broken by the test"))
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newGate()
			c, ss := serveStreams(t, g)
			// A deadline far off: a send still waiting for it has not been
			// failed by the break.
			ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
			defer cancel()
			const n = 8
			results := sendAll(ctx, c, ids(n))
			for range n {
				<-g.arrived
			}
			tt.brk(c, ss)
			for range n {
				r := <-results
				if !errors.Is(r.err, ErrUnavailable) || errors.Is(r.err, context.DeadlineExceeded) {
					t.Errorf("send %s: %v, want ErrUnavailable from the break", r.id, r.err)
				}
				// These reached the plugin before the break.
				if errors.Is(r.err, ErrNotSent) {
					t.Errorf("send %s: %v, which the plugin got, says it was not sent", r.id, r.err)
				}
			}
			for range n {
				if err := <-g.ended; !errors.Is(err, context.Canceled) {
					t.Errorf("a plugin send's context ended with %v, want canceled", err)
				}
			}
			if !tt.reuse {
				// With the server gone no stream can be opened: a send now
				// never leaves, and says so.
				sctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				_, err := c.SendRPC(sctx, Message{DeliveryID: "after"})
				if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrNotSent) {
					t.Errorf("send with no stream to carry it: %v, want ErrUnavailable and ErrNotSent", err)
				}
				return
			}
			// A send that meets the broken stream is never queued on it.
			c.streamMu.Lock()
			broken := c.stream
			c.streamMu.Unlock()
			if _, err := broken.call(ctx, &transportpb.SendRequest{DeliveryId: "late"}); !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrNotSent) {
				t.Errorf("a send on the broken stream: %v, want ErrUnavailable and ErrNotSent", err)
			}
			// The next send opens a new stream.
			next := sendAll(ctx, c, []string{"after"})
			<-g.arrived
			g.let("after")
			if r := <-next; r.err != nil || r.out.Kind != OutcomeDelivered {
				t.Errorf("send after the break: %+v, %v", r.out, r.err)
			}
			if got := ss.streams.Load(); got != 2 {
				t.Errorf("%d streams were opened, want 2", got)
			}
		})
	}
}

// Canceling one send's context cancels that send in the plugin and no
// other on the stream.
func TestStreamCancelReachesOnlyThatSend(t *testing.T) {
	t.Parallel()
	g := newGate()
	c, _ := serveStreams(t, g)
	ctx, cancel := context.WithCancel(t.Context())
	canceled := make(chan error, 1)
	go func() {
		_, err := c.SendRPC(ctx, Message{DeliveryID: "canceled"})
		canceled <- err
	}()
	other := sendAll(t.Context(), c, []string{"other"})
	<-g.arrived
	<-g.arrived
	cancel()
	if err := <-canceled; !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("canceled send: %v, want ErrUnavailable wrapping context.Canceled", err)
	}
	if err := <-g.ended; !errors.Is(err, context.Canceled) {
		t.Errorf("the plugin's context ended with %v, want canceled", err)
	}
	g.let("other")
	if r := <-other; r.err != nil || r.out.Kind != OutcomeDelivered || r.out.Error != "other" {
		t.Errorf("the other send got %+v, %v; want delivered", r.out, r.err)
	}
}

// An answer that comes after its caller gave up is dropped, and the stream
// carries on.
func TestLateAnswerOnTheStreamIsDropped(t *testing.T) {
	t.Parallel()
	s := stubborn{release: make(chan struct{})}
	c, ss := serveStreams(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	_, err := c.SendRPC(ctx, Message{DeliveryID: "late"})
	cancel()
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("late send: %v, want ErrUnavailable wrapping context.DeadlineExceeded", err)
	}
	close(s.release) // its answer now comes, for a call nobody waits for
	for i := range 3 {
		id := fmt.Sprintf("next_%d", i)
		out, err := c.SendRPC(t.Context(), Message{DeliveryID: id})
		if err != nil || out.Error != id {
			t.Errorf("send %s after the late one: %+v, %v; want its own answer", id, out, err)
		}
	}
	if got := ss.streams.Load(); got != 1 {
		t.Errorf("%d streams were opened, want the one", got)
	}
}

// deaf serves a SendStream that never reads its requests, as a plugin
// whose process is wedged.
type deaf struct {
	transportpb.UnimplementedTransportServer
}

func (deaf) SendStream(stream transportpb.Transport_SendStreamServer) error {
	<-stream.Context().Done()
	return nil
}

// A plugin that stops reading its stream fills the flow-control window,
// and a write to the stream then blocks; no caller may be stuck behind it
// past its own deadline, or nothing would notice the plugin hung.
func TestPluginThatStopsReadingCannotHoldCallersPastTheirDeadline(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	transportpb.RegisterTransportServer(srv, deaf{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := NewGRPCClient(conn)

	body := make([]byte, 256<<10) // a few of these fill any window
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			_, err := c.SendRPC(ctx, Message{DeliveryID: fmt.Sprintf("dlv_%d", i), Body: body})
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("send %d: %v, want ErrUnavailable wrapping context.DeadlineExceeded", i, err)
			}
		})
	}
	wg.Wait()
}
