// Package groupcommit lets concurrent callers share one database
// transaction. A caller that finds a batch being written waits for it to
// end; the callers that queued meanwhile are then written together, by one
// of them. A caller alone is written at once. The store decides what a
// batch's transaction does; this package only forms the batches and hands
// each caller its own answer.
package groupcommit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Call is one caller's request on its way through a Queue. A Queue's write
// function reads Ctx and In and sets Out and Err.
type Call[In, Out any] struct {
	// Ctx is the caller's context. The batch's transaction serves every
	// caller in it, so it must not end with any one Ctx (BatchContext ends
	// it when all have); a write function skips a call whose Ctx has ended
	// before its turn.
	Ctx context.Context
	In  In
	Out Out
	Err error

	done chan struct{}
	// lead tells the caller to write the next batch; chosen is set, under
	// the queue's lock, when it is sent.
	lead   chan struct{}
	chosen bool
}

// Inputs are the In of every call of batch, in order.
func Inputs[In, Out any](batch []*Call[In, Out]) []In {
	ins := make([]In, len(batch))
	for i, c := range batch {
		ins[i] = c.In
	}
	return ins
}

// BatchContext is the context for writing batch: it carries the first
// call's values, and ends once every call's Ctx has ended, when nobody is
// left to answer, but not before, since the transaction serves them all.
// stop releases it; call it when the batch is written.
func BatchContext[In, Out any](batch []*Call[In, Out]) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].Ctx))
	var left atomic.Int64
	left.Store(int64(len(batch)))
	gaveUp := func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
	stops := make([]func() bool, len(batch))
	for i, c := range batch {
		stops[i] = context.AfterFunc(c.Ctx, gaveUp)
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// Queue forms batches of calls for one writer. Its zero value is not
// usable: set Max and Write.
type Queue[In, Out any] struct {
	// Max bounds the calls in one batch, so that a flood cannot make one
	// transaction, and the wait of the first caller in it, grow without
	// end.
	Max int
	// Write writes a batch and sets every call's Out or Err. It runs on
	// one caller's goroutine, one batch at a time.
	Write func(batch []*Call[In, Out])
	// Wrap, when set, says where an error of the queue's own came from:
	// the caller's context ending while its call waited, or ErrAborted.
	// Errors Write sets are returned as they are.
	Wrap func(error) error

	mu sync.Mutex
	// waiting are the calls not yet taken into a batch, in arrival order.
	waiting []*Call[In, Out]
	// busy is set while some caller is writing a batch or has been chosen
	// to write the next one.
	busy bool
	// batches counts the batches taken, for tests.
	batches int
}

// ErrAborted answers the calls of a batch whose Write panicked: whether
// their transaction committed is unknown.
var ErrAborted = errors.New("the batch this call was in stopped unexpectedly (see the server's log); whether it was stored is unknown")

// Do queues in and returns once the batch holding it is written. A caller
// who gives up before its call is taken into a batch leaves the queue and
// gets ctx's error; once taken, the call is written (or not) within the
// batch's one transaction, and Do waits for that answer, so the answer
// always says what happened.
func (q *Queue[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	c := &Call[In, Out]{Ctx: ctx, In: in, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	q.mu.Lock()
	q.waiting = append(q.waiting, c)
	if !q.busy {
		q.busy = true
		c.chosen = true
		c.lead <- struct{}{}
	}
	q.mu.Unlock()

	ctxDone := ctx.Done()
	for {
		select {
		case <-c.done:
			return c.Out, c.Err
		case <-c.lead:
			q.writeBatch()
		case <-ctxDone:
			if q.leave(c) {
				var zero Out
				return zero, q.wrap(ctx.Err())
			}
			// Taken into a batch, or chosen to write the next one: the
			// answer comes soon either way.
			ctxDone = nil
		}
	}
}

// leave takes c off the queue if no batch has taken it and it has not been
// chosen to write one, and reports whether it did.
func (q *Queue[In, Out]) leave(c *Call[In, Out]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if c.chosen {
		return false
	}
	for i, w := range q.waiting {
		if w == c {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// writeBatch writes the calls waiting now, up to Max, answers each, and
// hands the writing of the next batch to the first caller still waiting.
func (q *Queue[In, Out]) writeBatch() {
	q.mu.Lock()
	n := min(len(q.waiting), max(q.Max, 1))
	batch := make([]*Call[In, Out], n)
	copy(batch, q.waiting)
	q.waiting = append(q.waiting[:0], q.waiting[n:]...)
	q.batches++
	q.mu.Unlock()

	// Every caller in the batch is answered and the next batch handed on
	// even if Write panics: net/http recovers a handler's panic, and a
	// queue left busy would stop every call after it.
	written := false
	defer func() {
		for _, c := range batch {
			if !written {
				var zero Out
				c.Out, c.Err = zero, q.wrap(ErrAborted)
			}
			close(c.done)
		}
		q.handOff()
	}()
	if n > 0 {
		q.Write(batch)
	}
	written = true
}

func (q *Queue[In, Out]) wrap(err error) error {
	if q.Wrap == nil {
		return err
	}
	return q.Wrap(err)
}

// handOff chooses the first caller still waiting to write the next batch,
// or marks the queue idle.
func (q *Queue[In, Out]) handOff() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.busy = false
		return
	}
	next := q.waiting[0]
	next.chosen = true
	next.lead <- struct{}{}
}

// Stats reports how many batches the queue has taken and how many calls
// wait for one.
func (q *Queue[In, Out]) Stats() (batches, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.batches, len(q.waiting)
}
