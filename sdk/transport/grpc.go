package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-plugin"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hymical/hymical/sdk/transport/transportpb"
)

// Plugin is the go-plugin glue: it registers the gRPC server shim in the
// plugin process and builds the client shim in the host. Only gRPC is
// spoken; net/rpc is refused. VersionedPlugins and HostPlugins build one for
// every protocol version.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the plugin's implementation; nil on the host side.
	Impl Transport
	// Protocol is the protocol version the host's client speaks: 1 sends
	// every attempt as its own call, 2 multiplexes them on a stream. Zero
	// means ProtocolVersion. The plugin's side serves every version.
	Protocol int
	// TracerProvider makes the spans of each Send carried on a stream: the
	// client span in the host, the server span in the plugin. nil means
	// none; the trace context crosses either way. Unary calls are traced by
	// the gRPC options instead (TraceDialOption, and Serve's own).
	TracerProvider trace.TracerProvider
}

var _ plugin.GRPCPlugin = (*Plugin)(nil)

// GRPCServer registers the server shim for p.Impl.
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("transport: Plugin.Impl is nil; pass the implementation to Serve")
	}
	transportpb.RegisterTransportServer(s, newGRPCServer(p.Impl, p.TracerProvider))
	return nil
}

// GRPCClient returns a *GRPCClient speaking p.Protocol over c.
func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewGRPCClient(c, WithProtocol(p.Protocol), WithTracerProvider(p.TracerProvider)), nil
}

// GRPCClient is the host's side of a plugin connection. It implements
// Transport, and adds SendRPC for a caller that must tell a plugin's answer
// from a call that failed. Under protocol 2 all its sends share one stream,
// opened at the first and opened again after one breaks.
type GRPCClient struct {
	rpc      transportpb.TransportClient
	protocol int
	// tracer makes the client spans of sends on the stream; nil when the
	// host traces nothing.
	tracer trace.Tracer

	// streamMu guards stream, the stream sends go on, and opening, the
	// open of the next one while it is under way.
	streamMu sync.Mutex
	stream   *sendStream
	opening  *streamOpen
}

var _ Transport = (*GRPCClient)(nil)

// ClientOption configures a GRPCClient.
type ClientOption func(*GRPCClient)

// WithProtocol makes the client speak protocol version v, the version
// go-plugin negotiated with the plugin: 1 sends every attempt as its own
// unary call, 2 (ProtocolVersion) multiplexes them on a stream. Zero means
// ProtocolVersion.
func WithProtocol(v int) ClientOption {
	return func(c *GRPCClient) {
		if v > 0 {
			c.protocol = v
		}
	}
}

// WithTracerProvider gives each Send carried on a stream a client span from
// tp; nil means none, and the caller's trace context still crosses. Unary
// calls get theirs from TraceDialOption.
func WithTracerProvider(tp trace.TracerProvider) ClientOption {
	return func(c *GRPCClient) {
		if tp != nil {
			c.tracer = tp.Tracer(tracerScope)
		}
	}
}

// NewGRPCClient speaks the Transport service over conn, with protocol
// ProtocolVersion unless an option says otherwise.
func NewGRPCClient(conn grpc.ClientConnInterface, opts ...ClientOption) *GRPCClient {
	c := &GRPCClient{rpc: transportpb.NewTransportClient(conn), protocol: ProtocolVersion}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Protocol is the protocol version the client speaks.
func (c *GRPCClient) Protocol() int { return c.protocol }

// Configure sends the plugin-wide settings. A refusal wraps ErrRejected; a
// failed call wraps ErrUnavailable.
func (c *GRPCClient) Configure(ctx context.Context, settings Settings) error {
	resp, err := c.rpc.Configure(ctx, settingsToProto(settings))
	if err != nil {
		return callError(ctx, "Configure", err)
	}
	if reason := resp.GetError(); reason != "" {
		return fmt.Errorf("%w: settings: %s", ErrRejected, BoundError(reason))
	}
	return nil
}

// Validate asks the plugin to check an endpoint. A refusal wraps
// ErrRejected; a failed call wraps ErrUnavailable.
func (c *GRPCClient) Validate(ctx context.Context, endpoint Endpoint) error {
	resp, err := c.rpc.Validate(ctx, &transportpb.ValidateRequest{Endpoint: endpointToProto(endpoint)})
	if err != nil {
		return callError(ctx, "Validate", err)
	}
	if reason := resp.GetError(); reason != "" {
		return fmt.Errorf("%w: endpoint: %s", ErrRejected, BoundError(reason))
	}
	return nil
}

// SendRPC sends one attempt. The error is non-nil only when the call itself
// failed (the plugin crashed, did not answer before ctx ended, or the
// connection was lost); it wraps ErrUnavailable and, when ctx ended or the
// call's deadline passed, ctx's error or context.DeadlineExceeded.
// Otherwise the Outcome is the plugin's, checked and bounded. Under protocol
// 2 a stream that breaks fails every call waiting on it at once, and a call
// whose request never left (the stream was broken already, or could not be
// opened) wraps ErrNotSent too.
//
// When msg.Deadline is zero the plugin is sent ctx's deadline instead.
func (c *GRPCClient) SendRPC(ctx context.Context, msg Message) (Outcome, error) {
	ctxDeadline, _ := ctx.Deadline()
	req := messageToProto(msg, ctxDeadline)
	if c.protocol >= 2 {
		return c.sendOnStream(ctx, req)
	}
	resp, err := c.rpc.Send(ctx, req)
	if err != nil {
		return Outcome{}, callError(ctx, "Send", err)
	}
	return outcomeFromProto(resp), nil
}

// Send is SendRPC with a failed call reported as a retryable outcome.
func (c *GRPCClient) Send(ctx context.Context, msg Message) Outcome {
	out, err := c.SendRPC(ctx, msg)
	if err != nil {
		return Retryable(0, err.Error())
	}
	return out
}

func callError(ctx context.Context, method string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, method, ctxErr)
	}
	st := status.Convert(err)
	if st.Code() == codes.DeadlineExceeded {
		// The plugin's side ended the call at the deadline it was sent,
		// a moment before this side's clock would have.
		return fmt.Errorf("%w: %s: %w (ended by the plugin's side)", ErrUnavailable, method, context.DeadlineExceeded)
	}
	return fmt.Errorf("%w: %s failed (%s): %s", ErrUnavailable, method, st.Code(), BoundError(st.Message()))
}

// grpcServer runs in the plugin process and calls the implementation with
// the context the call arrived with, so the host's deadline, cancellation
// and trace context reach it.
type grpcServer struct {
	transportpb.UnimplementedTransportServer
	impl Transport
	// tracer makes the server spans of sends on a stream; nil when the
	// plugin traces nothing, and the host's trace context is then passed
	// on as it came.
	tracer trace.Tracer
}

func newGRPCServer(impl Transport, tp trace.TracerProvider) *grpcServer {
	s := &grpcServer{impl: impl}
	if _, off := tp.(tracenoop.TracerProvider); tp != nil && !off {
		s.tracer = tp.Tracer(tracerScope)
	}
	return s
}

func (s *grpcServer) Configure(ctx context.Context, req *transportpb.ConfigureRequest) (*transportpb.ConfigureResponse, error) {
	if err := s.impl.Configure(ctx, settingsFromProto(req)); err != nil {
		return &transportpb.ConfigureResponse{Error: refusal(err)}, nil
	}
	return &transportpb.ConfigureResponse{}, nil
}

func (s *grpcServer) Validate(ctx context.Context, req *transportpb.ValidateRequest) (*transportpb.ValidateResponse, error) {
	if err := s.impl.Validate(ctx, endpointFromProto(req.GetEndpoint())); err != nil {
		return &transportpb.ValidateResponse{Error: refusal(err)}, nil
	}
	return &transportpb.ValidateResponse{}, nil
}

func (s *grpcServer) Send(ctx context.Context, req *transportpb.SendRequest) (*transportpb.Outcome, error) {
	return s.send(ctx, req), nil
}

// send runs one attempt, from a unary Send or the stream.
func (s *grpcServer) send(ctx context.Context, req *transportpb.SendRequest) *transportpb.Outcome {
	msg := messageFromProto(req)
	if d, ok := ctx.Deadline(); !msg.Deadline.IsZero() && (!ok || d.After(msg.Deadline)) {
		// A unary call's own deadline is later, by the host's grace; the
		// plugin works to the attempt's deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, msg.Deadline)
		defer cancel()
	}
	if d, ok := ctx.Deadline(); ok {
		msg.Deadline = d
	}
	return outcomeToProto(s.impl.Send(ctx, msg))
}

// refusal is err's text, never empty: an empty error field means accepted.
func refusal(err error) string {
	if text := BoundError(err.Error()); text != "" {
		return text
	}
	return "refused without a reason"
}
