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

// retryFor is the schedule and allowance for a delivery to ep: the
// endpoint's own schedule when it has one, clamped into the bounds should
// they have been tightened since it was set, otherwise the server's.
func (p *Pool) retryFor(ep storage.Endpoint) (RetrySchedule, int) {
	if len(ep.RetrySchedule) == 0 {
		return p.cfg.Retry, p.cfg.MaxCycleAttempts
	}
	s := p.cfg.Retry
	delays, allowance := p.cfg.EndpointRetry.Clamp(ep.RetrySchedule)
	s.Delays = delays
	return s, allowance
}

// EndpointDisabler disables an endpoint for a reason (one of the
// storage.Disabled* reasons). Disabling a disabled endpoint changes nothing.
type EndpointDisabler interface {
	DisableEndpoint(ctx context.Context, endpointID string, reason storage.DisabledReason) error
}
