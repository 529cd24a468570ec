package retrypolicy_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/retrypolicy"
)

func TestEndpointBounds(t *testing.T) {
	t.Parallel()
	b := retrypolicy.EndpointBounds{MinDelay: time.Second, MaxDelay: time.Hour, MaxAttempts: 4}

	t.Run("the defaults are valid bounds", func(t *testing.T) {
		t.Parallel()
		if err := retrypolicy.DefaultEndpointBounds().Validate(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("bounds that mean nothing are refused", func(t *testing.T) {
		t.Parallel()
		for _, bad := range []retrypolicy.EndpointBounds{
			{MinDelay: 0, MaxDelay: time.Hour, MaxAttempts: 4},
			{MinDelay: time.Hour, MaxDelay: time.Second, MaxAttempts: 4},
			{MinDelay: time.Second, MaxDelay: time.Hour, MaxAttempts: 1},
		} {
			if bad.Validate() == nil {
				t.Errorf("%+v validated", bad)
			}
		}
	})
	t.Run("a schedule within the bounds passes and clamps to itself", func(t *testing.T) {
		t.Parallel()
		delays := []time.Duration{time.Second, time.Minute, time.Hour}
		if err := b.Check(delays); err != nil {
			t.Fatal(err)
		}
		got, allowance := b.Clamp(delays)
		if !slices.Equal(got, delays) || allowance != 4 {
			t.Fatalf("Clamp = %v, %d; want the schedule unchanged and 4 attempts", got, allowance)
		}
	})
	t.Run("a schedule outside the bounds is refused, naming what is allowed", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			delays []time.Duration
			want   string
		}{
			{[]time.Duration{time.Second, time.Second, time.Second, time.Second}, "at most 3 delays"},
			{[]time.Duration{time.Millisecond}, "delays from 1s to 1h0m0s"},
			{[]time.Duration{2 * time.Hour}, "delay 1 is 2h0m0s"},
		} {
			err := b.Check(tc.delays)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check(%v) = %v, want it to say %q", tc.delays, err, tc.want)
			}
		}
	})
	t.Run("a schedule set before the bounds were tightened is clamped into them", func(t *testing.T) {
		t.Parallel()
		got, allowance := b.Clamp([]time.Duration{time.Millisecond, 2 * time.Hour, time.Minute, time.Minute, time.Minute})
		if want := []time.Duration{time.Second, time.Hour, time.Minute, time.Minute, time.Minute}; !slices.Equal(got, want) || allowance != 4 {
			t.Fatalf("Clamp = %v, %d; want %v and 4 attempts", got, allowance, want)
		}
	})
}
