package worker

import (
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// The completer's batch takes in what arrives while outcomes keep coming,
// and stops at the limit, at the channel's close, or after most. The gaps
// here are far longer than any goroutine hand-over, so the outcomes sent
// back to back always count as one stream.
func TestGatherTakesOutcomesThatKeepArriving(t *testing.T) {
	t.Parallel()
	const gap = 300 * time.Millisecond
	outcome := func(i int) completion {
		return completion{params: storage.DeliveryCompleteParams{DeliveryID: string(rune('a' + i))}}
	}
	for _, tc := range []struct {
		name string
		// send runs in its own goroutine after gather has the first.
		send       func(done chan<- completion)
		limit      int
		most       time.Duration
		want       int
		wantAfter  time.Duration // gather waits at least this long
		wantBefore time.Duration // and returns sooner than this
	}{
		{
			name: "back to back, then quiet: all of them, one gap after the last",
			send: func(done chan<- completion) {
				for i := 1; i < 5; i++ {
					done <- outcome(i)
				}
			},
			limit: 10, most: 10 * time.Second, want: 5, wantAfter: gap, wantBefore: 5 * time.Second,
		},
		{
			name: "more than the limit: the limit, at once",
			send: func(done chan<- completion) {
				for i := 1; i < 10; i++ {
					done <- outcome(i)
				}
				close(done)
			},
			limit: 4, most: 10 * time.Second, want: 4, wantBefore: gap,
		},
		{
			name: "closed: what came, at once",
			send: func(done chan<- completion) {
				done <- outcome(1)
				close(done)
			},
			limit: 10, most: 10 * time.Second, want: 2, wantBefore: gap,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			done := make(chan completion)
			go tc.send(done)
			start := time.Now()
			batch := gather([]completion{outcome(0)}, done, tc.limit, gap, tc.most)
			took := time.Since(start)
			if len(batch) != tc.want {
				t.Errorf("gathered %d outcomes, want %d", len(batch), tc.want)
			}
			if took < tc.wantAfter || took >= tc.wantBefore {
				t.Errorf("gather took %s, want at least %s and less than %s", took, tc.wantAfter, tc.wantBefore)
			}
			if len(batch) == tc.limit {
				// Take what the limit left, so the sender ends.
				for range done {
				}
			}
		})
	}

	t.Run("a steady stream: cut off after most", func(t *testing.T) {
		t.Parallel()
		done := make(chan completion)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for i := 1; ; i++ {
				select {
				case done <- outcome(i % 26):
				case <-stop:
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		batch := gather([]completion{outcome(0)}, done, 1000, gap, 100*time.Millisecond)
		// At one every 10 ms, 100 ms holds about ten; the stream never
		// pauses for a gap, so only most ended the batch.
		if len(batch) < 2 || len(batch) > 50 {
			t.Errorf("gathered %d outcomes from a stream one every 10 ms over 100 ms, want a handful", len(batch))
		}
	})
}
