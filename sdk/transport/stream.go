package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/sdk/transport/transportpb"
)

// Protocol 2 carries every Send of a host over one long-lived gRPC stream
// per plugin process instead of a unary call each. A unary call costs a new
// HTTP/2 stream (headers both ways, trailers, a server goroutine, the gRPC
// instrumentation's per-call work); on the stream an attempt is one message
// each way, so the boundary costs little next to the send itself.

// MaxConcurrentSends bounds the sends one stream runs at once in a plugin
// process. Further requests wait, unread, in flow control until a send
// finishes; one that waits past its deadline plus the host's grace counts
// as a hang, as any send unanswered by then does. The bound is far above
// any worker pool's concurrency, and exists so that a flood of requests
// cannot exhaust the plugin's memory.
const MaxConcurrentSends = 1024

// sendSpanName is the span of one Send on either side of the boundary. It
// is the name OpenTelemetry's gRPC instrumentation gives the unary Send, so
// a trace reads the same whichever protocol carried the attempt.
const sendSpanName = "hymical.transport.v1.Transport/Send"

// sendSpanAttrs are the attributes the gRPC instrumentation gives the
// unary Send's spans. Only a traced send pays for building them.
func sendSpanAttrs() trace.SpanStartEventOption {
	return trace.WithAttributes(
		attribute.String("rpc.system.name", "grpc"),
		attribute.String("rpc.method", sendSpanName),
	)
}

// requestCarrier reads and writes the trace context fields of a
// SendRequest, for the W3C propagator.
type requestCarrier struct{ req *transportpb.SendRequest }

var _ propagation.TextMapCarrier = requestCarrier{}

const (
	headerTraceparent = "traceparent"
	headerTracestate  = "tracestate"
)

func (c requestCarrier) Get(key string) string {
	switch key {
	case headerTraceparent:
		return c.req.GetTraceparent()
	case headerTracestate:
		return c.req.GetTracestate()
	}
	return ""
}

func (c requestCarrier) Set(key, value string) {
	switch key {
	case headerTraceparent:
		c.req.Traceparent = value
	case headerTracestate:
		c.req.Tracestate = value
	}
}

func (requestCarrier) Keys() []string { return []string{headerTraceparent, headerTracestate} }

// sendStream is the host's side of one SendStream: any number of
// goroutines send on it at once, one writer puts their requests on the
// stream, and one reader hands each reply to the call waiting for its id.
type sendStream struct {
	stream transportpb.Transport_SendStreamClient
	// end ends the stream; the plugin then cancels whatever still runs.
	end context.CancelFunc

	// queue holds the requests the writer has yet to send, and wake tells
	// it there are some. Callers never write to the stream themselves: a
	// write blocks while the plugin reads nothing (flow control), and a
	// caller blocked there could not give up at its deadline, so nothing
	// would notice a plugin that stopped reading.
	qmu   sync.Mutex
	queue []*transportpb.SendStreamRequest
	wake  chan struct{}

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan *transportpb.Outcome
	// err is why the stream broke; broken is closed when it is set.
	err    error
	broken chan struct{}
}

// openSendStream opens a stream on rpc and starts its reader and writer.
// The stream lives until it breaks or its client is discarded, not as long
// as any one call, so it gets a context of its own.
func openSendStream(rpc transportpb.TransportClient) (*sendStream, error) {
	ctx, end := context.WithCancel(context.Background())
	st, err := rpc.SendStream(ctx)
	if err != nil {
		end()
		return nil, err
	}
	s := &sendStream{
		stream:  st,
		end:     end,
		wake:    make(chan struct{}, 1),
		pending: make(map[uint64]chan *transportpb.Outcome),
		broken:  make(chan struct{}),
	}
	go s.read()
	go s.write()
	return s, nil
}

// enqueue hands req to the writer.
func (s *sendStream) enqueue(req *transportpb.SendStreamRequest) {
	s.qmu.Lock()
	s.queue = append(s.queue, req)
	s.qmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // the writer has been woken already
	}
}

// write sends the queued requests, in order, until the stream breaks. It
// takes the whole queue each time it wakes, so under load one wake-up
// carries many requests.
func (s *sendStream) write() {
	var batch []*transportpb.SendStreamRequest
	for {
		select {
		case <-s.wake:
		case <-s.broken:
			return
		}
		s.qmu.Lock()
		batch, s.queue = s.queue, batch[:0]
		s.qmu.Unlock()
		for i, req := range batch {
			if err := s.stream.Send(req); err != nil {
				s.fail(err)
				return
			}
			batch[i] = nil // not kept alive until the slot is reused
		}
	}
}

// read hands replies to their calls until the stream breaks, and then
// fails every call still waiting, at once: a plugin that crashed answers
// none of them.
func (s *sendStream) read() {
	for {
		reply, err := s.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the plugin ended the stream")
			}
			s.fail(err)
			return
		}
		s.mu.Lock()
		ch, ok := s.pending[reply.GetId()]
		delete(s.pending, reply.GetId())
		s.mu.Unlock()
		if ok {
			// Buffered, and the only send on it: never blocks.
			ch <- reply.GetOutcome()
		}
		// A reply nobody waits for answers a call that gave up.
	}
}

// fail marks the stream broken by err, once, and ends it.
func (s *sendStream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
		close(s.broken)
	}
	s.mu.Unlock()
	s.end()
}

// isBroken reports whether the stream can carry no more calls.
func (s *sendStream) isBroken() bool {
	select {
	case <-s.broken:
		return true
	default:
		return false
	}
}

// call sends req and waits for its reply, for ctx to end, or for the stream
// to break. The error is as SendRPC's.
func (s *sendStream) call(ctx context.Context, req *transportpb.SendRequest) (Outcome, error) {
	ch := make(chan *transportpb.Outcome, 1)
	s.mu.Lock()
	if s.err != nil {
		// Broken before this send was queued: it never left.
		err := s.err
		s.mu.Unlock()
		return Outcome{}, notSent(callError(ctx, "Send", err))
	}
	s.nextID++
	id := s.nextID
	s.pending[id] = ch
	s.mu.Unlock()

	s.enqueue(&transportpb.SendStreamRequest{Id: id, Send: req})
	select {
	case out := <-ch:
		return outcomeFromProto(out), nil
	case <-s.broken:
		// The reply may have come just before the break.
		select {
		case out := <-ch:
			return outcomeFromProto(out), nil
		default:
		}
		return Outcome{}, callError(ctx, "Send", s.err)
	case <-ctx.Done():
		if !s.forget(id) {
			// The reader took the reply off the table just now: the
			// plugin did answer, so that answer stands.
			select {
			case out := <-ch:
				return outcomeFromProto(out), nil
			default:
			}
		} else {
			// Tell the plugin, so the caller's cancellation reaches the
			// send's context as it would end a unary call's. A stream
			// that breaks first has canceled it already.
			s.enqueue(&transportpb.SendStreamRequest{Id: id, Cancel: true})
		}
		return Outcome{}, callError(ctx, "Send", ctx.Err())
	}
}

// notSent marks a failed call's error as one whose request never left the
// host.
func notSent(err error) error { return fmt.Errorf("%w (%w)", err, ErrNotSent) }

// forget stops waiting for id and reports whether it was still pending.
func (s *sendStream) forget(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pending[id]
	delete(s.pending, id)
	return ok
}

// sendOnStream is SendRPC over protocol 2: the call's span is made here
// and its trace context goes into the request, because a stream's metadata
// is the stream's, not the attempt's.
func (c *GRPCClient) sendOnStream(ctx context.Context, req *transportpb.SendRequest) (Outcome, error) {
	var span trace.Span
	if c.tracer != nil {
		ctx, span = c.tracer.Start(ctx, sendSpanName, trace.WithSpanKind(trace.SpanKindClient), sendSpanAttrs())
		defer span.End()
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagation.TraceContext{}.Inject(ctx, requestCarrier{req})
	}
	s, err := c.sendStream(ctx)
	var out Outcome
	if err == nil {
		out, err = s.call(ctx, req)
	} else {
		// No stream to carry it: the request never left.
		err = notSent(callError(ctx, "Send", err))
	}
	if err != nil && span != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return out, err
}

// sendStream returns the client's stream, opening a new one when there is
// none yet or the last one broke. Opening waits for the connection, which
// may be reconnecting; a caller waits for that no longer than ctx allows,
// and an open it gave up on still serves the next caller.
func (c *GRPCClient) sendStream(ctx context.Context) (*sendStream, error) {
	c.streamMu.Lock()
	if c.stream != nil && !c.stream.isBroken() {
		s := c.stream
		c.streamMu.Unlock()
		return s, nil
	}
	op := c.opening
	if op == nil {
		op = &streamOpen{done: make(chan struct{})}
		c.opening = op
		go func() {
			s, err := openSendStream(c.rpc)
			c.streamMu.Lock()
			op.s, op.err = s, err
			if err == nil {
				c.stream = s
			}
			c.opening = nil
			c.streamMu.Unlock()
			close(op.done)
		}()
	}
	c.streamMu.Unlock()
	select {
	case <-op.done:
		if op.err != nil {
			return nil, fmt.Errorf("opening the send stream: %w", op.err)
		}
		return op.s, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("opening the send stream: %w", ctx.Err())
	}
}

// streamOpen is an open of a send stream in progress; done is closed when
// s or err is set.
type streamOpen struct {
	done chan struct{}
	s    *sendStream
	err  error
}

// SendStream is the plugin's side of protocol 2: it reads requests and
// hands each send to a worker goroutine, at most MaxConcurrentSends at
// once, which writes the reply when its send finishes. Every send's context
// ends with the stream.
//
// Workers live as long as the stream and take one send after another,
// rather than a goroutine being started per send: a send (the http
// plugin's, through net/http) needs a deep stack, and a new goroutine
// grows its stack anew every time, which costs more CPU than the rest of
// the boundary.
func (s *grpcServer) SendStream(stream transportpb.Transport_SendStreamServer) error {
	ss := &serverStream{
		srv:     s,
		stream:  stream,
		running: make(map[uint64]context.CancelFunc),
		work:    make(chan streamJob),
	}
	defer func() {
		ss.writeMu.Lock()
		ss.closed = true
		ss.writeMu.Unlock()
	}()
	ctx := stream.Context()
	workers := 0
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		id := req.GetId()
		if req.GetCancel() {
			ss.mu.Lock()
			if cancel, ok := ss.running[id]; ok {
				cancel()
			}
			ss.mu.Unlock()
			continue
		}
		// The send's context carries the attempt's deadline from the start,
		// so send need not wrap it again.
		var (
			sendCtx context.Context
			cancel  context.CancelFunc
		)
		if d := req.GetSend().GetDeadline(); d != nil {
			sendCtx, cancel = context.WithDeadline(ctx, d.AsTime())
		} else {
			sendCtx, cancel = context.WithCancel(ctx)
		}
		ss.mu.Lock()
		ss.running[id] = cancel
		ss.mu.Unlock()
		job := streamJob{ctx: sendCtx, id: id, req: req.GetSend()}
		select {
		case ss.work <- job: // an idle worker took it
			continue
		default:
		}
		if workers < MaxConcurrentSends {
			workers++
			go ss.worker(ctx, job)
			continue
		}
		// Every worker is busy: the next one to finish takes it, and until
		// then requests wait in the host, in flow control.
		select {
		case ss.work <- job:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// serverStream is the plugin's state for one SendStream.
type serverStream struct {
	srv    *grpcServer
	stream transportpb.Transport_SendStreamServer
	work   chan streamJob

	// writeMu serializes replies (a gRPC stream's SendMsg is not safe for
	// concurrent use), and closed, under it, stops replies once the
	// handler has returned, after which gRPC forbids writes.
	writeMu sync.Mutex
	closed  bool

	// mu guards running: the cancel function of every send in progress,
	// by request id.
	mu      sync.Mutex
	running map[uint64]context.CancelFunc
}

type streamJob struct {
	ctx context.Context
	id  uint64
	req *transportpb.SendRequest
}

// worker runs job, then whatever the stream hands it next, until the
// stream ends.
func (ss *serverStream) worker(ctx context.Context, job streamJob) {
	for {
		ss.run(job)
		select {
		case job = <-ss.work:
		case <-ctx.Done():
			return
		}
	}
}

func (ss *serverStream) run(job streamJob) {
	out := ss.srv.sendOne(job.ctx, job.req)
	ss.mu.Lock()
	cancel := ss.running[job.id]
	delete(ss.running, job.id)
	ss.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	ss.writeMu.Lock()
	defer ss.writeMu.Unlock()
	if !ss.closed {
		// A failed write means the stream is gone, and with it the host's
		// interest in this reply.
		_ = ss.stream.Send(&transportpb.SendStreamReply{Id: job.id, Outcome: out})
	}
}

// sendOne runs one send from the stream: the attempt's trace context comes
// from the request, and the send gets a server span of the plugin's own
// under it, as a unary Send gets from the gRPC instrumentation.
func (s *grpcServer) sendOne(ctx context.Context, req *transportpb.SendRequest) *transportpb.Outcome {
	if req.GetTraceparent() != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, requestCarrier{req})
	}
	if s.tracer != nil {
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, sendSpanName, trace.WithSpanKind(trace.SpanKindServer), sendSpanAttrs())
		defer span.End()
	}
	return s.send(ctx, req)
}
