package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/storage"
)

// HealthStore is what endpoint health needs of the store.
type HealthStore interface {
	endpoint.Store
	EndpointList(ctx context.Context) ([]storage.Endpoint, error)
	EventCreate(ctx context.Context, ev storage.Event) (storage.EventCreateResult, error)
}

// EndpointHealth disables endpoints the server has given up on, when the
// config opts in (both are off by default): one whose receiver answered 410
// Gone to the claim's owner (endpoints.disable_on_gone; the worker reports
// it), and one every attempt to which has failed for DisableAfterFailing
// (endpoints.disable_after_failing; Run looks for them). Each time
// it is this process that disables an endpoint, it tells the operator
// endpoint, if one is set, with a hymical.endpoint.disabled event: signed,
// retried and traced like any other delivery. With several processes on one
// database the optimistic update lets exactly one of them disable an
// endpoint, so the operator hears once.
type EndpointHealth struct {
	Store HealthStore
	// DisableAfterFailing is how long every attempt to an endpoint must
	// have failed before it is disabled; 0 never disables for failing.
	DisableAfterFailing time.Duration
	// Interval is how often Run looks for failing endpoints.
	Interval time.Duration
	// OperatorEndpoint is the endpoint told about disables; "" tells none.
	OperatorEndpoint string
	// Disabled, when set, is called once per endpoint this process
	// disabled, with the reason: the metrics count them.
	Disabled func(ctx context.Context, reason string)
	Log      *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

func (h *EndpointHealth) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// DisableEndpoint disables the endpoint for reason unless it is disabled
// already, and then tells the operator. It satisfies worker.EndpointDisabler.
func (h *EndpointHealth) DisableEndpoint(ctx context.Context, endpointID string, reason storage.DisabledReason) error {
	_, err := h.disable(ctx, endpointID, reason, nil)
	return err
}

// disable disables the endpoint if it is enabled and still says so, and
// reports whether this call did it.
func (h *EndpointHealth) disable(ctx context.Context, endpointID string, reason storage.DisabledReason, still func(storage.Endpoint) bool) (bool, error) {
	e, flipped, err := endpoint.Disable(ctx, h.Store, endpointID, reason, h.now().UTC(), still)
	if err != nil || !flipped {
		return false, err
	}
	h.Log.Warn("endpoint disabled: nothing is sent to it, its deliveries are kept until it is enabled",
		"endpoint_id", e.ID, "reason", reason, "failing_since", e.FailingSince)
	if h.Disabled != nil {
		h.Disabled(ctx, string(reason))
	}
	if err := h.notify(ctx, e); err != nil {
		// The endpoint is disabled either way; the log line above is
		// then the only word of it.
		h.Log.Error("telling the operator endpoint about a disabled endpoint failed", "endpoint_id", e.ID,
			"operator_endpoint", h.OperatorEndpoint, "error", err)
	}
	return true, nil
}

// notify creates the hymical.endpoint.disabled event for the operator
// endpoint.
func (h *EndpointHealth) notify(ctx context.Context, e storage.Endpoint) error {
	if h.OperatorEndpoint == "" {
		return nil
	}
	ev, err := event.EndpointDisabled(e, h.OperatorEndpoint)
	if err != nil {
		return err
	}
	_, err = h.Store.EventCreate(ctx, ev)
	return err
}

// Check disables every enabled endpoint whose run of failures has lasted
// DisableAfterFailing, and returns how many this call disabled.
func (h *EndpointHealth) Check(ctx context.Context) (int, error) {
	if h.DisableAfterFailing <= 0 {
		return 0, nil
	}
	endpoints, err := h.Store.EndpointList(ctx)
	if err != nil {
		return 0, fmt.Errorf("list endpoints: %w", err)
	}
	failingFor := func(e storage.Endpoint) bool {
		return e.FailingSince != nil && h.now().Sub(*e.FailingSince) >= h.DisableAfterFailing
	}
	n := 0
	for _, e := range endpoints {
		if e.DisabledAt != nil || !failingFor(e) {
			continue
		}
		// Checked again on the fresh read inside the update: a delivery
		// may have ended the run since the list was read.
		done, err := h.disable(ctx, e.ID, storage.DisabledFailing, failingFor)
		if err != nil {
			return n, fmt.Errorf("disable failing endpoint %s: %w", e.ID, err)
		}
		if done {
			n++
		}
	}
	return n, nil
}

// Run checks for failing endpoints every Interval until ctx ends. With
// DisableAfterFailing zero it returns at once. A failed check is logged and
// tried again at the next interval.
func (h *EndpointHealth) Run(ctx context.Context) {
	if h.DisableAfterFailing <= 0 {
		return
	}
	t := time.NewTicker(h.Interval)
	defer t.Stop()
	for {
		if _, err := h.Check(ctx); err != nil && ctx.Err() == nil {
			h.Log.Warn("endpoint health: looking for failing endpoints failed; trying again at the next run", "error", err, "next_run_in", h.Interval)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
