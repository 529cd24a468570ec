package worker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hymical/hymical/storage"
)

// RetrySchedule says how long a delivery waits after a retryable failure.
//
// After the n-th request of a cycle fails, the delivery waits Delays[n-1]
// (the last entry repeats if the allowance is longer than the list), spread
// by ±Jitter so that deliveries that failed together do not all come back in
// the same instant. A Retry-After from the receiver is honoured as a floor,
// capped at MaxRetryAfter so one receiver cannot park a delivery for a week.
type RetrySchedule struct {
	Delays []time.Duration
	// Jitter is the fraction each delay is spread by, in [0, 1).
	Jitter float64
	// MaxRetryAfter caps how far a receiver's Retry-After can push a retry.
	MaxRetryAfter time.Duration
}

// DefaultRetrySchedule is used when none is configured: with the default
// allowance of 5 requests a delivery is retried after about 30 s, 2 min,
// 10 min and 1 h, and fails for good about 1 h 13 min after its first try.
func DefaultRetrySchedule() RetrySchedule {
	return RetrySchedule{
		Delays:        []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour},
		Jitter:        0.2,
		MaxRetryAfter: time.Hour,
	}
}

// Validate checks the schedule.
func (s RetrySchedule) Validate() error {
	if len(s.Delays) == 0 {
		return fmt.Errorf("retry schedule: needs at least one delay")
	}
	for i, d := range s.Delays {
		if d <= 0 {
			return fmt.Errorf("retry schedule: delay %d is %s, want a positive duration", i+1, d)
		}
	}
	if s.Jitter < 0 || s.Jitter >= 1 {
		return fmt.Errorf("retry schedule: jitter %.2f must be in [0, 1)", s.Jitter)
	}
	if s.MaxRetryAfter < 0 {
		return fmt.Errorf("retry schedule: max Retry-After must not be negative")
	}
	return nil
}

// Delay is the wait after the cycleAttempt-th request of a cycle failed,
// given the receiver's Retry-After (zero when it sent none).
func (s RetrySchedule) Delay(cycleAttempt int, retryAfter time.Duration) time.Duration {
	i := min(max(cycleAttempt, 1), len(s.Delays)) - 1
	d := s.Delays[i]
	if s.Jitter > 0 {
		spread := 1 + s.Jitter*(2*rand.Float64()-1)
		d = time.Duration(float64(d) * spread)
	}
	if retryAfter > 0 {
		d = max(d, min(retryAfter, s.MaxRetryAfter))
	}
	return d
}

// EndpointRetryBounds bound the retry schedule an endpoint may set for
// itself (storage.Endpoint.RetrySchedule): each delay within
// [MinDelay, MaxDelay], and at most MaxAttempts requests a cycle, so that one
// endpoint can neither hammer its receiver nor keep deliveries open for
// months.
type EndpointRetryBounds struct {
	MinDelay, MaxDelay time.Duration
	MaxAttempts        int
}

// DefaultEndpointRetryBounds allow delays from 1 s to 24 h and up to 20
// requests a cycle.
func DefaultEndpointRetryBounds() EndpointRetryBounds {
	return EndpointRetryBounds{MinDelay: time.Second, MaxDelay: 24 * time.Hour, MaxAttempts: 20}
}

// Validate checks the bounds themselves.
func (b EndpointRetryBounds) Validate() error {
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
func (b EndpointRetryBounds) Check(delays []time.Duration) error {
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

// retryFor is the schedule and allowance for a delivery to ep: the
// endpoint's own schedule when it has one, clamped into the bounds should
// they have been tightened since it was set, otherwise the server's.
func (p *Pool) retryFor(ep storage.Endpoint) (RetrySchedule, int) {
	if len(ep.RetrySchedule) == 0 {
		return p.cfg.Retry, p.cfg.MaxCycleAttempts
	}
	b := p.cfg.EndpointRetry
	delays := make([]time.Duration, len(ep.RetrySchedule))
	for i, d := range ep.RetrySchedule {
		delays[i] = min(max(d, b.MinDelay), b.MaxDelay)
	}
	s := p.cfg.Retry
	s.Delays = delays
	return s, min(len(delays)+1, b.MaxAttempts)
}

// EndpointDisabler disables an endpoint for a reason (one of the
// storage.Disabled* reasons). Disabling a disabled endpoint changes nothing.
type EndpointDisabler interface {
	DisableEndpoint(ctx context.Context, endpointID, reason string) error
}
