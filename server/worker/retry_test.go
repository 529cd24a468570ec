package worker

import (
	"testing"
	"time"
)

func TestRetryScheduleDelay(t *testing.T) {
	s := RetrySchedule{Delays: []time.Duration{10 * time.Second, time.Minute}, Jitter: 0.2, MaxRetryAfter: 5 * time.Minute}
	tests := []struct {
		name       string
		attempt    int
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{"first failure waits the first delay, jittered", 1, 0, 8 * time.Second, 12 * time.Second},
		{"second failure waits the second delay", 2, 0, 48 * time.Second, 72 * time.Second},
		{"the last delay repeats past the end of the list", 7, 0, 48 * time.Second, 72 * time.Second},
		{"a Retry-After longer than the schedule is a floor", 1, 3 * time.Minute, 3 * time.Minute, 3 * time.Minute},
		{"a Retry-After shorter than the schedule does not hurry it", 2, time.Second, 48 * time.Second, 72 * time.Second},
		{"a Retry-After beyond the cap is capped", 1, 24 * time.Hour, 5 * time.Minute, 5 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[time.Duration]bool{}
			for range 200 {
				d := s.Delay(tc.attempt, tc.retryAfter)
				if d < tc.lo || d > tc.hi {
					t.Fatalf("Delay(%d, %s) = %s, want within [%s, %s]", tc.attempt, tc.retryAfter, d, tc.lo, tc.hi)
				}
				seen[d] = true
			}
			if tc.lo != tc.hi && len(seen) < 10 {
				t.Fatalf("200 delays took only %d distinct values: jitter is not spreading them", len(seen))
			}
		})
	}
}

func TestConfigRefusesALeaseThatDoesNotOutlastTheSend(t *testing.T) {
	for _, tc := range []struct {
		lease, send time.Duration
		ok          bool
	}{
		{60 * time.Second, 17 * time.Second, true},
		{17 * time.Second, 17 * time.Second, false},
		{10 * time.Second, 17 * time.Second, false},
	} {
		cfg := Config{Lease: tc.lease, SendTimeout: tc.send}.withDefaults()
		if err := cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("lease %s, send %s: Validate() = %v, want ok=%v", tc.lease, tc.send, err, tc.ok)
		}
	}
	if err := (Config{Retry: RetrySchedule{Delays: []time.Duration{0}}}).withDefaults().Validate(); err == nil {
		t.Error("a zero retry delay was accepted")
	}
}
