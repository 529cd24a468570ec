package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/hymical/hymical/plugins/http/httptransport"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/worker"
)

// InProcess is a worker.Sender that runs the http plugin's transport code
// in this process instead of behind the plugin boundary. It exists only so
// the bench can measure what the boundary costs; the server always sends
// through the plugin host.
type InProcess struct {
	t *httptransport.Transport
}

var _ worker.Sender = (*InProcess)(nil)

// NewInProcess configures the transport with settings exactly as the host
// would hand them to the plugin.
func NewInProcess(ctx context.Context, settings map[string]string) (*InProcess, error) {
	t := httptransport.New(httptransport.Options{})
	if err := t.Configure(ctx, settings); err != nil {
		return nil, fmt.Errorf("configure the in-process http transport: %w", err)
	}
	return &InProcess{t: t}, nil
}

// Send does what the plugin host's Send does for a plugin that answers in
// time: the attempt's deadline goes onto the context and the message.
// Only the http transport is in this process, so plugin must be "http".
func (s *InProcess) Send(ctx context.Context, plugin string, msg transport.Message, deadline time.Time) transport.Outcome {
	if plugin != "http" {
		return transport.Permanent(0, fmt.Sprintf("the in-process bench sender runs only the http transport, not %q", plugin))
	}
	if deadline.IsZero() {
		deadline = time.Now().Add(httptransport.DefaultConnectTimeout + httptransport.DefaultReadTimeout)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	msg.Deadline = deadline
	return s.t.Send(ctx, msg)
}
