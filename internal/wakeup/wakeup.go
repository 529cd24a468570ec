// Package wakeup tells the goroutines waiting for work that some may be
// there now: a store signals its Hub after it commits a write that made a
// delivery due, and every claimer subscribed to the Hub wakes once, however
// many signals arrived while it was busy. It carries no data and promises
// nothing: a wake-up may find nothing to do, and a claimer must still poll
// now and then, because a write made by another process, or one made while
// nobody listened, is only seen by looking.
//
// It also keeps timed wake-ups: a write that makes a delivery due later (a
// retry's backoff, a release with a delay) asks for one at that time, so
// that the claimer does not have to poll to find it.
package wakeup

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// MaxTimed bounds the timed wake-ups a Hub keeps. Beyond it the latest are
// dropped: the claimer's poll finds those deliveries instead, a little
// later than their time.
const MaxTimed = 1024

// timedGrain is how close two timed wake-ups may be and still be kept as
// one: retries that fall due together cost one wake-up, not one each, at
// the price of waking up to this much late.
const timedGrain = 5 * time.Millisecond

// Hub fans wake-ups out to its subscribers. The zero value is ready to
// use; Close stops its timer.
type Hub struct {
	mu     sync.Mutex
	subs   map[chan struct{}]struct{}
	timed  instants
	known  map[int64]struct{}
	timer  *time.Timer
	closed bool
}

// Subscribe returns a channel that receives a value after each Signal,
// coalesced: one value stands for every signal since the subscriber last
// received, so a burst of writes wakes it once. The subscription ends with
// ctx. The channel is never closed.
func (h *Hub) Subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[chan struct{}]struct{}{}
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	})
	return ch
}

// Signal wakes every subscriber now. It never blocks.
func (h *Hub) Signal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.signalLocked()
}

func (h *Hub) signalLocked() {
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already waiting for it: this one is the same
		}
	}
}

// SignalAfter wakes every subscriber once d has passed; d <= 0 wakes them
// now.
func (h *Hub) SignalAfter(d time.Duration) {
	if d <= 0 {
		h.Signal()
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	at := time.Now().Add(d)
	// Rounded up to the grain, so that one due a moment after another
	// shares its wake-up and is not woken for too early.
	slot := (at.UnixNano() + int64(timedGrain) - 1) / int64(timedGrain)
	if _, ok := h.known[slot]; ok {
		return
	}
	if h.timed.Len() >= MaxTimed {
		latest := h.timed.latest()
		if slot >= h.timed[latest] {
			return
		}
		delete(h.known, h.timed[latest])
		heap.Remove(&h.timed, latest)
	}
	if h.known == nil {
		h.known = map[int64]struct{}{}
	}
	h.known[slot] = struct{}{}
	heap.Push(&h.timed, slot)
	h.armLocked()
}

// Close stops the timer and drops the timed wake-ups still to come, so
// that Pending says none are; SignalAfter keeps nothing after it.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	h.timed, h.known = nil, nil
	if h.timer != nil {
		h.timer.Stop()
	}
}

// armLocked sets the one timer to the earliest timed wake-up.
func (h *Hub) armLocked() {
	if h.timed.Len() == 0 || h.closed {
		return
	}
	wait := time.Until(time.Unix(0, h.timed[0]*int64(timedGrain)))
	if h.timer == nil {
		h.timer = time.AfterFunc(wait, h.fire)
		return
	}
	h.timer.Reset(wait)
}

// fire wakes the subscribers for every timed wake-up that is due, and arms
// the timer for the next.
func (h *Hub) fire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	now := time.Now().UnixNano()
	due := false
	for h.timed.Len() > 0 && h.timed[0]*int64(timedGrain) <= now {
		delete(h.known, heap.Pop(&h.timed).(int64))
		due = true
	}
	if due {
		h.signalLocked()
	}
	h.armLocked()
}

// Pending is how many timed wake-ups are still to come.
func (h *Hub) Pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.timed.Len()
}

// instants is a min-heap of grain slots.
type instants []int64

func (s instants) Len() int           { return len(s) }
func (s instants) Less(i, j int) bool { return s[i] < s[j] }
func (s instants) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }
func (s *instants) Push(x any)        { *s = append(*s, x.(int64)) }
func (s *instants) Pop() any {
	old := *s
	x := old[len(old)-1]
	*s = old[:len(old)-1]
	return x
}

// latest is the index of the largest slot: one of the leaves.
func (s instants) latest() int {
	i := len(s) / 2
	for j := i + 1; j < len(s); j++ {
		if s[j] > s[i] {
			i = j
		}
	}
	return i
}
