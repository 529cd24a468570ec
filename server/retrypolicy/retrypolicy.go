// Package retrypolicy holds the bounds an operator puts on the retry
// schedules that endpoints set for themselves (storage.Endpoint.RetrySchedule,
// the endpoints.retry_* config keys). Two rooms apply them: the API refuses a
// schedule outside them when an endpoint is written, and the worker clamps a
// stored schedule into them at send time, should they have been tightened
// since it was set.
//
// The bounds are the server's configured policy, not a rule of the store: the
// store holds only the limits that stand whatever the configuration
// (storage.MaxRetrySchedule). They live here, not in the worker, so the API can
// check them without linking the worker. This package imports nothing but the
// standard library and must stay that way.
package retrypolicy

import (
	"fmt"
	"time"
)

// EndpointBounds bound the retry schedule an endpoint may set for itself:
// each delay within [MinDelay, MaxDelay], and at most MaxAttempts requests a
// cycle, so that one endpoint can neither hammer its receiver nor keep
// deliveries open for months.
type EndpointBounds struct {
	MinDelay, MaxDelay time.Duration
	MaxAttempts        int
}

// DefaultEndpointBounds allow delays from 1 s to 24 h and up to 20 requests
// a cycle.
func DefaultEndpointBounds() EndpointBounds {
	return EndpointBounds{MinDelay: time.Second, MaxDelay: 24 * time.Hour, MaxAttempts: 20}
}

// Validate checks the bounds themselves.
func (b EndpointBounds) Validate() error {
	switch {
	case b.MinDelay <= 0:
		return fmt.Errorf("endpoint retry bounds: the shortest delay must be positive, got %s", b.MinDelay)
	case b.MaxDelay < b.MinDelay:
		return fmt.Errorf("endpoint retry bounds: the longest delay %s is shorter than the shortest %s", b.MaxDelay, b.MinDelay)
	case b.MaxAttempts < 2:
		return fmt.Errorf("endpoint retry bounds: at least 2 attempts are needed for a schedule to mean anything, got %d", b.MaxAttempts)
	}
	return nil
}

// Check says whether an endpoint's schedule is within the bounds, and if
// not, what is wrong and what is allowed.
func (b EndpointBounds) Check(delays []time.Duration) error {
	if len(delays)+1 > b.MaxAttempts {
		return fmt.Errorf("retry_schedule has %d delays, which makes %d attempts; this server allows at most %d attempts, so at most %d delays",
			len(delays), len(delays)+1, b.MaxAttempts, b.MaxAttempts-1)
	}
	for i, d := range delays {
		if d < b.MinDelay || d > b.MaxDelay {
			return fmt.Errorf("retry_schedule delay %d is %s; this server allows delays from %s to %s", i+1, d, b.MinDelay, b.MaxDelay)
		}
	}
	return nil
}

// Clamp is a stored schedule brought within the bounds: each delay moved
// into [MinDelay, MaxDelay], and the requests a cycle it allows (its delays
// plus one), capped at MaxAttempts. A schedule that passed Check comes back
// unchanged; one set before the bounds were tightened is held to the new
// ones rather than refused, since its deliveries already exist.
func (b EndpointBounds) Clamp(delays []time.Duration) ([]time.Duration, int) {
	out := make([]time.Duration, len(delays))
	for i, d := range delays {
		out[i] = min(max(d, b.MinDelay), b.MaxDelay)
	}
	return out, min(len(delays)+1, b.MaxAttempts)
}
