package testwait

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the failure and returns,
// so that a test can see how For fails.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestFor(t *testing.T) {
	t.Parallel()
	const max = 150 * time.Millisecond
	tests := []struct {
		name string
		// holdsOn is the call on which the condition first holds; 0 for
		// never.
		holdsOn int
	}{
		{name: "a condition that holds at once is called once", holdsOn: 1},
		{name: "a condition that comes to hold ends the wait", holdsOn: 4},
		{name: "a condition that never holds fails with its last error", holdsOn: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{TB: t}
			calls := 0
			start := time.Now()
			For(r, max, func() error {
				calls++
				if calls == tt.holdsOn {
					return nil
				}
				return fmt.Errorf("not yet on call %d", calls)
			})
			took := time.Since(start)
			if tt.holdsOn != 0 {
				if r.failed != "" {
					t.Fatalf("For failed: %s", r.failed)
				}
				if calls != tt.holdsOn {
					t.Fatalf("cond called %d times, want %d: For went on after it held", calls, tt.holdsOn)
				}
				return
			}
			if r.failed == "" {
				t.Fatal("For returned without failing the test on a condition that never held")
			}
			// The last error, not the first: it says what was still wrong
			// when the wait ended.
			if last := fmt.Sprintf("not yet on call %d", calls); !strings.Contains(r.failed, last) {
				t.Fatalf("For failed with %q, want the last error, %q", r.failed, last)
			}
			if !strings.Contains(r.failed, max.String()) {
				t.Fatalf("For failed with %q, which does not say how long it waited", r.failed)
			}
			if took < max {
				t.Fatalf("For gave up after %s, before the %s it was given", took, max)
			}
			// A pause that grows to 20 ms fits about a dozen calls in
			// 150 ms; a pause that stayed at 1 ms would make over a
			// hundred. A slow machine makes fewer, never more.
			if calls < 2 || calls > 30 {
				t.Fatalf("cond called %d times in %s, want a handful", calls, max)
			}
		})
	}
}
