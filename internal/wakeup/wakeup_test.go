package wakeup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/testwait"
)

// within is how long a test waits for a wake-up that must come: long, since
// only its absence fails the test.
const within = 10 * time.Second

func woken(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatal("no wake-up")
	}
}

func quiet(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal("a wake-up nothing asked for")
	default:
	}
}

func TestSignalWakesEverySubscriberOnceForABurst(t *testing.T) {
	t.Parallel()
	var h Hub
	a, b := h.Subscribe(t.Context()), h.Subscribe(t.Context())
	for range 100 {
		h.Signal()
	}
	for _, ch := range []<-chan struct{}{a, b} {
		woken(t, ch)
		quiet(t, ch) // the burst was one wake-up
	}
	h.Signal()
	woken(t, a)
}

func TestSubscriptionEndsWithItsContext(t *testing.T) {
	t.Parallel()
	var h Hub
	ctx, cancel := context.WithCancel(t.Context())
	ch := h.Subscribe(ctx)
	cancel()
	testwait.For(t, within, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if n := len(h.subs); n != 0 {
			return fmt.Errorf("%d subscriptions outlived their context", n)
		}
		return nil
	})
	h.Signal()
	quiet(t, ch)
}

func TestSignalAfterWakesWhenDueAndNotBefore(t *testing.T) {
	t.Parallel()
	var h Hub
	defer h.Close()
	ch := h.Subscribe(t.Context())
	const d = 150 * time.Millisecond
	start := time.Now()
	h.SignalAfter(3 * d) // a later one does not hold the earlier back
	h.SignalAfter(d)
	woken(t, ch)
	if took := time.Since(start); took < d {
		t.Fatalf("woken after %s, before the %s asked for", took, d)
	}
	woken(t, ch) // the later one too
	if took := time.Since(start); took < 3*d {
		t.Fatalf("second wake-up after %s, before the %s asked for", took, 3*d)
	}
	if n := h.Pending(); n != 0 {
		t.Fatalf("%d timed wake-ups left after both fired", n)
	}
}

func TestSignalAfterNothingIsNow(t *testing.T) {
	t.Parallel()
	var h Hub
	ch := h.Subscribe(t.Context())
	h.SignalAfter(0)
	select {
	case <-ch:
	default:
		t.Fatal("SignalAfter(0) did not wake at once")
	}
}

func TestTimedWakeUpsAreBoundedAndCoalesced(t *testing.T) {
	t.Parallel()
	var h Hub
	defer h.Close()
	for range 10 {
		h.SignalAfter(time.Hour) // one grain: one wake-up
	}
	if n := h.Pending(); n != 1 {
		t.Fatalf("%d timed wake-ups for one instant, want 1", n)
	}
	for i := range 3 * MaxTimed {
		h.SignalAfter(time.Minute + time.Duration(i)*time.Second)
	}
	if n := h.Pending(); n != MaxTimed {
		t.Fatalf("%d timed wake-ups kept, want the bound %d", n, MaxTimed)
	}
	// The earliest are the ones kept: one sooner than all still gets in.
	h.SignalAfter(time.Second)
	if n := h.Pending(); n != MaxTimed {
		t.Fatalf("%d timed wake-ups kept, want the bound %d", n, MaxTimed)
	}
	if soonest := time.Unix(0, h.timed[0]*int64(timedGrain)); time.Until(soonest) > 30*time.Second {
		t.Fatalf("the soonest timed wake-up kept is at %s: the one a second away was dropped for later ones", soonest)
	}
}

// After Close nothing is left that could wake a subscriber: no timed
// wake-up is kept, none is taken, and the timer is stopped. The test reads
// that state rather than waiting a while for a wake-up not to come, which
// proves nothing on a machine slow enough to deliver it later.
func TestCloseDropsTimedWakeUps(t *testing.T) {
	t.Parallel()
	var h Hub
	h.SignalAfter(time.Hour)
	h.Close()
	if n := h.Pending(); n != 0 {
		t.Fatalf("%d timed wake-ups kept after Close", n)
	}
	h.SignalAfter(time.Minute)
	if n := h.Pending(); n != 0 {
		t.Fatalf("%d timed wake-ups kept from a SignalAfter after Close", n)
	}
	// Stop says whether the timer was still running, neither stopped by
	// Close nor due: it is not due for an hour.
	if h.timer.Stop() {
		t.Fatal("the timer still runs after Close")
	}
}
