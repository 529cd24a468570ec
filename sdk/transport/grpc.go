package transport

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hymical/hymical/sdk/transport/transportpb"
)

// Plugin is the go-plugin glue: it registers the gRPC server shim in the
// plugin process and builds the client shim in the host. Only gRPC is
// spoken; net/rpc is refused.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the plugin's implementation; nil on the host side.
	Impl Transport
}

var _ plugin.GRPCPlugin = (*Plugin)(nil)

// GRPCServer registers the server shim for p.Impl.
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("transport: Plugin.Impl is nil; pass the implementation to Serve")
	}
	transportpb.RegisterTransportServer(s, &grpcServer{impl: p.Impl})
	return nil
}

// GRPCClient returns a *GRPCClient speaking over c.
func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewGRPCClient(c), nil
}

// GRPCClient is the host's side of a plugin connection. It implements
// Transport, and adds SendRPC for a caller that must tell a plugin's answer
// from a call that failed.
type GRPCClient struct {
	rpc transportpb.TransportClient
}

var _ Transport = (*GRPCClient)(nil)

// NewGRPCClient speaks the Transport service over conn.
func NewGRPCClient(conn grpc.ClientConnInterface) *GRPCClient {
	return &GRPCClient{rpc: transportpb.NewTransportClient(conn)}
}

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
// call's deadline passed, ctx's error or context.DeadlineExceeded. Otherwise the Outcome is the plugin's, checked and bounded.
//
// When msg.Deadline is zero the plugin is sent ctx's deadline instead.
func (c *GRPCClient) SendRPC(ctx context.Context, msg Message) (Outcome, error) {
	ctxDeadline, _ := ctx.Deadline()
	resp, err := c.rpc.Send(ctx, messageToProto(msg, ctxDeadline))
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
// and metadata reach it.
type grpcServer struct {
	transportpb.UnimplementedTransportServer
	impl Transport
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
	msg := messageFromProto(req)
	if !msg.Deadline.IsZero() {
		// The call's own deadline is later, by the host's grace; the
		// plugin works to the attempt's deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, msg.Deadline)
		defer cancel()
	}
	if d, ok := ctx.Deadline(); ok {
		msg.Deadline = d
	}
	return outcomeToProto(s.impl.Send(ctx, msg)), nil
}

// refusal is err's text, never empty: an empty error field means accepted.
func refusal(err error) string {
	if text := BoundError(err.Error()); text != "" {
		return text
	}
	return "refused without a reason"
}
