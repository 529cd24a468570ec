package api

import (
	"math"
	"strings"
	"time"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/storage"
)

// controlsSet reports whether c sets any control.
func controlsSet(c apiwire.EndpointControls) bool {
	return c.RateLimit != nil || c.RateBurst != nil || c.MaxInFlight != nil || c.Ordered != nil || c.RetrySchedule != nil
}

// applyControls writes the controls given onto e and checks the result, so
// an answer names what is wrong and what is allowed before the store does.
func applyControls(c apiwire.EndpointControls, e *storage.Endpoint, retry RetryBounds) error {
	if c.RateLimit != nil {
		e.RateLimit = *c.RateLimit
	}
	if c.RateBurst != nil {
		e.RateBurst = *c.RateBurst
	}
	if c.MaxInFlight != nil {
		e.MaxInFlight = *c.MaxInFlight
	}
	if c.Ordered != nil {
		e.Ordered = *c.Ordered
	}
	if c.RetrySchedule != nil {
		delays := make([]time.Duration, 0, len(*c.RetrySchedule))
		for i, s := range *c.RetrySchedule {
			d, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				return refuse(apiwire.CodeInvalidRetrySchedule, "retry_schedule item %d is %q, not a duration: write delays like \"30s\", \"10m\" or \"2h\"", i+1, clip(s))
			}
			delays = append(delays, d)
		}
		e.RetrySchedule = delays
		if len(delays) == 0 {
			e.RetrySchedule = nil
		}
	}
	switch {
	case math.IsNaN(e.RateLimit) || e.RateLimit < 0 || e.RateLimit > storage.MaxRateLimit:
		return refuse(apiwire.CodeInvalidRateLimit, "rate_limit must be 0 (no limit) or a number of sends per second up to %d, such as 10 or 0.5", storage.MaxRateLimit)
	case e.RateBurst < 0 || e.RateBurst > storage.MaxRateBurst:
		return refuse(apiwire.CodeInvalidRateLimit, "rate_burst must be between 0 (the rate, rounded up) and %d", storage.MaxRateBurst)
	case e.RateBurst > 0 && e.RateLimit == 0:
		return refuse(apiwire.CodeInvalidRateLimit, "rate_burst is set but rate_limit is not: a burst only means something with a rate")
	case e.MaxInFlight < 0 || e.MaxInFlight > storage.MaxInFlightCap:
		return refuse(apiwire.CodeInvalidMaxInFlight, "max_in_flight must be between 0 (no cap) and %d", storage.MaxInFlightCap)
	}
	if err := retry.Check(e.RetrySchedule); err != nil {
		return refuse(apiwire.CodeInvalidRetrySchedule, "%s", err.Error())
	}
	return nil
}

// RetryBounds checks an endpoint's own retry schedule against the server's
// bounds (retrypolicy.EndpointBounds).
type RetryBounds interface {
	Check(delays []time.Duration) error
}

// durations writes a retry schedule the way the API reads it.
func durations(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}
