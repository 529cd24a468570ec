package webhook

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Deduper records which submissions a receiver has processed, so that a
// submission delivered twice is acted on once. Hymical delivers at least
// once, and the same submission.id arrives again after a worker died
// between your answer and its record, and after every replay.
//
// Process runs fn for id unless id is already recorded, and records id only
// when fn returns nil. It reports duplicate = true, without calling fn, when
// id was recorded by an earlier call. When fn fails, its error is returned
// and id stays unrecorded, so the redelivery that your error causes runs fn
// again. A call that finds another call for the same id in progress waits
// for it: if that one succeeds this one is a duplicate, if it fails this one
// runs fn itself. fn therefore never runs twice at once for one id, and
// never again once it has succeeded.
//
// Implementations are safe for concurrent use.
type Deduper interface {
	Process(ctx context.Context, id string, fn func(ctx context.Context) error) (duplicate bool, err error)
}

// ErrInvalidID is returned (wrapped) for an id no deduper can key on.
var ErrInvalidID = errors.New("webhook: invalid dedupe id")

// MaxIDBytes bounds a dedupe id. Hymical's submission ids are 36 bytes; the
// bound only keeps a hostile or broken payload from filling a table.
const MaxIDBytes = 255

func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: it is empty; key on the event's submission.id", ErrInvalidID)
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%w: it is %d bytes, more than the %d allowed", ErrInvalidID, len(id), MaxIDBytes)
	}
	return nil
}

// DefaultMemoryMaxIDs is how many ids a MemoryDeduper remembers when
// MemoryOptions.MaxIDs is zero.
const DefaultMemoryMaxIDs = 100_000

// MemoryOptions bound a MemoryDeduper.
type MemoryOptions struct {
	// MaxIDs is the most ids remembered; recording one more forgets the
	// oldest. Zero means DefaultMemoryMaxIDs.
	MaxIDs int
	// TTL forgets an id this long after it was recorded. Zero means ids are
	// forgotten only to make room.
	TTL time.Duration
	// Now replaces the clock, for tests. nil means time.Now.
	Now func() time.Time
}

// MemoryDeduper is a Deduper held in the memory of one process. It is for
// tests and for a receiver that runs as a single process and can afford to
// process a submission again after a restart, or after the id has been
// forgotten to stay within MaxIDs or TTL. A replay can come at any time, so
// anything that must never run twice needs SQLDeduper.
type MemoryDeduper struct {
	maxIDs int
	ttl    time.Duration
	now    func() time.Time

	mu sync.Mutex
	// done holds the recorded ids; order lists them oldest first, so
	// eviction and expiry both work from its front.
	done  map[string]*list.Element
	order *list.List
	// running holds a channel per id whose fn is in progress, closed when
	// it ends, which is what a concurrent call for the same id waits on.
	running map[string]chan struct{}
}

var _ Deduper = (*MemoryDeduper)(nil)

type memoryRecord struct {
	id string
	at time.Time
}

// NewMemoryDeduper returns an empty MemoryDeduper.
func NewMemoryDeduper(opts MemoryOptions) (*MemoryDeduper, error) {
	if opts.MaxIDs < 0 {
		return nil, fmt.Errorf("webhook: memory deduper: MaxIDs is %d; give a positive number, or 0 for %d", opts.MaxIDs, DefaultMemoryMaxIDs)
	}
	if opts.TTL < 0 {
		return nil, fmt.Errorf("webhook: memory deduper: TTL is %s; give a positive duration, or 0 for none", opts.TTL)
	}
	d := &MemoryDeduper{
		maxIDs:  opts.MaxIDs,
		ttl:     opts.TTL,
		now:     opts.Now,
		done:    map[string]*list.Element{},
		order:   list.New(),
		running: map[string]chan struct{}{},
	}
	if d.maxIDs == 0 {
		d.maxIDs = DefaultMemoryMaxIDs
	}
	if d.now == nil {
		d.now = time.Now
	}
	return d, nil
}

// Process implements Deduper.
func (d *MemoryDeduper) Process(ctx context.Context, id string, fn func(ctx context.Context) error) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	for {
		d.mu.Lock()
		d.expire()
		if _, ok := d.done[id]; ok {
			d.mu.Unlock()
			return true, nil
		}
		wait, busy := d.running[id]
		if !busy {
			break // still holding the lock
		}
		d.mu.Unlock()
		select {
		case <-wait:
			// Look again: the other call either recorded id or failed.
		case <-ctx.Done():
			return false, fmt.Errorf("webhook: waiting for another delivery of %s to finish: %w", id, ctx.Err())
		}
	}
	finished := make(chan struct{})
	d.running[id] = finished
	d.mu.Unlock()

	ok := false
	// The deferred cleanup also runs when fn panics, so waiters are never
	// stranded and the id is left unrecorded.
	defer func() {
		d.mu.Lock()
		delete(d.running, id)
		if ok {
			d.record(id)
		}
		close(finished)
		d.mu.Unlock()
	}()
	if err := fn(ctx); err != nil {
		return false, err
	}
	ok = true
	return false, nil
}

// Len reports how many ids are remembered.
func (d *MemoryDeduper) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expire()
	return len(d.done)
}

// record remembers id, forgetting the oldest ids beyond maxIDs. d.mu is held.
func (d *MemoryDeduper) record(id string) {
	d.done[id] = d.order.PushBack(memoryRecord{id: id, at: d.now()})
	for d.order.Len() > d.maxIDs {
		d.forget(d.order.Front())
	}
}

// expire forgets ids older than the TTL. d.mu is held.
func (d *MemoryDeduper) expire() {
	if d.ttl <= 0 {
		return
	}
	cutoff := d.now().Add(-d.ttl)
	for e := d.order.Front(); e != nil && !e.Value.(memoryRecord).at.After(cutoff); e = d.order.Front() {
		d.forget(e)
	}
}

func (d *MemoryDeduper) forget(e *list.Element) {
	delete(d.done, e.Value.(memoryRecord).id)
	d.order.Remove(e)
}
