package endpoint_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/server/retrypolicy"
	"github.com/hymical/hymical/storage"
)

func TestApplyControlsNamesTheControlAndTheFix(t *testing.T) {
	t.Parallel()
	bounds := retrypolicy.EndpointBounds{MinDelay: time.Second, MaxDelay: time.Hour, MaxAttempts: 4}
	f := func(v float64) *float64 { return &v }
	n := func(v int) *int { return &v }
	list := func(v ...string) *[]string { return &v }
	tests := []struct {
		name  string
		c     endpoint.Controls
		field string
		want  string
	}{
		{"a negative rate", endpoint.Controls{RateLimit: f(-1)}, "rate_limit", "rate_limit must be 0"},
		{"a rate that is not a number", endpoint.Controls{RateLimit: f(math.NaN())}, "rate_limit", "rate_limit must be 0"},
		{"a burst without a rate", endpoint.Controls{RateBurst: n(3)}, "rate_burst", "a burst only means something with a rate"},
		{"a burst too large", endpoint.Controls{RateLimit: f(1), RateBurst: n(storage.MaxRateBurst + 1)}, "rate_burst", "rate_burst must be between"},
		{"too many in flight", endpoint.Controls{MaxInFlight: n(storage.MaxInFlightCap + 1)}, "max_in_flight", "max_in_flight must be between"},
		{"a delay that is not a duration", endpoint.Controls{RetrySchedule: list("30s", "soon")}, "retry_schedule", `item 2 is "soon"`},
		{"a delay past the server's bounds", endpoint.Controls{RetrySchedule: list("2h")}, "retry_schedule", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var e storage.Endpoint
			err := endpoint.ApplyControls(tt.c, &e, bounds)
			var fe *endpoint.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(fe.Message, tt.want) {
				t.Fatalf("ApplyControls = %v, want a %s error saying %q", err, tt.field, tt.want)
			}
		})
	}

	t.Run("given controls are written, the others kept, and an empty schedule is the server's", func(t *testing.T) {
		t.Parallel()
		e := storage.Endpoint{MaxInFlight: 7, RetrySchedule: []time.Duration{time.Minute}}
		yes := true
		if err := endpoint.ApplyControls(endpoint.Controls{RateLimit: f(2.5), RateBurst: n(5), Ordered: &yes, RetrySchedule: list()}, &e, bounds); err != nil {
			t.Fatal(err)
		}
		if e.RateLimit != 2.5 || e.RateBurst != 5 || !e.Ordered || e.MaxInFlight != 7 || e.RetrySchedule != nil {
			t.Errorf("after ApplyControls: %+v", e)
		}
		if err := endpoint.ApplyControls(endpoint.Controls{RetrySchedule: list(" 10s", "1m ")}, &e, bounds); err != nil || !slices.Equal(e.RetrySchedule, []time.Duration{10 * time.Second, time.Minute}) {
			t.Errorf("schedule %v, %v", e.RetrySchedule, err)
		}
	})
}
