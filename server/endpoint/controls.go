package endpoint

import (
	"math"
	"strings"
	"time"

	"github.com/hymical/hymical/sdk/boundtext"
	"github.com/hymical/hymical/storage"
)

// Controls are an endpoint's delivery controls as a caller gives them, the
// API's PATCH body or a console form: a nil field leaves the endpoint's
// value as it is.
type Controls struct {
	// RateLimit is the most sends per second; 0 is no limit.
	RateLimit *float64
	// RateBurst is the sends allowed at once after a quiet spell; 0 is the
	// rate, rounded up.
	RateBurst *int
	// MaxInFlight is the most sends under way at once; 0 is no cap.
	MaxInFlight *int
	// Ordered sends one delivery at a time, in order.
	Ordered *bool
	// RetrySchedule is Go durations such as "30s"; empty goes back to the
	// server's schedule.
	RetrySchedule *[]string
}

// Set reports whether c sets any control.
func (c Controls) Set() bool {
	return c.RateLimit != nil || c.RateBurst != nil || c.MaxInFlight != nil || c.Ordered != nil || c.RetrySchedule != nil
}

// RetryBounds checks an endpoint's own retry schedule against the server's
// bounds (retrypolicy.EndpointBounds).
type RetryBounds interface {
	Check(delays []time.Duration) error
}

// ApplyControls writes the controls c gives onto e and checks the result,
// so the API and the console refuse the same things in the same words
// before the store does. A wrong control is a *FieldError whose Field is
// "rate_limit", "rate_burst", "max_in_flight" or "retry_schedule".
func ApplyControls(c Controls, e *storage.Endpoint, retry RetryBounds) error {
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
				return fieldError("retry_schedule", "retry_schedule item %d is %q, not a duration: write delays like \"30s\", \"10m\" or \"2h\"", i+1, boundtext.Bound(s, 64))
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
		return fieldError("rate_limit", "rate_limit must be 0 (no limit) or a number of sends per second up to %d, such as 10 or 0.5", storage.MaxRateLimit)
	case e.RateBurst < 0 || e.RateBurst > storage.MaxRateBurst:
		return fieldError("rate_burst", "rate_burst must be between 0 (the rate, rounded up) and %d", storage.MaxRateBurst)
	case e.RateBurst > 0 && e.RateLimit == 0:
		return fieldError("rate_burst", "rate_burst is set but rate_limit is not: a burst only means something with a rate")
	case e.MaxInFlight < 0 || e.MaxInFlight > storage.MaxInFlightCap:
		return fieldError("max_in_flight", "max_in_flight must be between 0 (no cap) and %d", storage.MaxInFlightCap)
	}
	if retry != nil {
		if err := retry.Check(e.RetrySchedule); err != nil {
			return &FieldError{Field: "retry_schedule", Message: err.Error()}
		}
	}
	return nil
}
