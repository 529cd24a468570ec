package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hymical/hymical/storage"
)

// maxEventBatch bounds how many creates share one transaction, so that a
// flood of submissions cannot make one transaction, and the wait of the
// first caller in it, grow without end.
const maxEventBatch = 64

// eventQueue is group commit for EventCreate. SQLite has one writer, so
// creates arriving together would each wait for the lock and then pay for a
// transaction of their own: its begin, its commit's write of the same few
// pages to the WAL, and the writer's time that claims and completions need.
// Instead, a create that finds a batch being written waits for it to end,
// and then the creates that queued meanwhile are written together, by one
// of their callers. A caller alone writes at once, as before.
type eventQueue struct {
	mu sync.Mutex
	// waiting are the creates not yet taken into a batch, in arrival order.
	waiting []*eventCreate
	// busy is set while some caller is writing a batch or has been chosen
	// to write the next one.
	busy bool
	// batches counts the batches written, which tests read to see creates
	// share transactions.
	batches int
}

// eventCreate is one caller's create on its way through the queue.
type eventCreate struct {
	ctx context.Context
	ev  storage.Event
	// res and err are set before done is closed.
	res  storage.EventCreateResult
	err  error
	done chan struct{}
	// lead tells the caller to write the next batch; chosen is set, under
	// the queue's lock, when it is sent.
	lead   chan struct{}
	chosen bool
}

// create queues ev and returns once the batch holding it is written. A
// caller who gives up before its create is taken into a batch leaves the
// queue and gets ctx's error; once taken, its create is written (or not)
// within the one transaction, and it waits for that answer, so the answer
// always says what happened.
func (q *eventQueue) create(ctx context.Context, s *Store, ev storage.Event) (storage.EventCreateResult, error) {
	c := &eventCreate{ctx: ctx, ev: ev, done: make(chan struct{}), lead: make(chan struct{}, 1)}
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
			return c.res, c.err
		case <-c.lead:
			q.writeBatch(s)
		case <-ctxDone:
			if q.leave(c) {
				return storage.EventCreateResult{}, fmt.Errorf("sqlite: %s: %w", createEventOp, ctx.Err())
			}
			// Taken into a batch, or chosen to write the next one: the
			// answer comes soon either way.
			ctxDone = nil
		}
	}
}

// leave takes c off the queue if no batch has taken it and it has not been
// chosen to write one, and reports whether it did.
func (q *eventQueue) leave(c *eventCreate) bool {
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

// writeBatch writes the creates waiting now, up to maxEventBatch, in one
// transaction, answers each, and hands the writing of the next batch to
// the first caller still waiting.
func (q *eventQueue) writeBatch(s *Store) {
	q.mu.Lock()
	n := min(len(q.waiting), maxEventBatch)
	batch := make([]*eventCreate, n)
	copy(batch, q.waiting)
	q.waiting = append(q.waiting[:0], q.waiting[n:]...)
	q.batches++
	q.mu.Unlock()

	// Every caller in the batch is answered and the next batch handed on
	// even if writing this one panics (net/http recovers a handler's
	// panic, and a queue left busy would stop every create after it).
	written := false
	defer func() {
		for _, c := range batch {
			if !written {
				c.res, c.err = storage.EventCreateResult{}, errBatchAborted
			}
			close(c.done)
		}
		q.handOff()
	}()
	if len(batch) > 0 {
		s.createEvents(batch)
	}
	written = true
}

// errBatchAborted answers the creates of a batch whose writing stopped
// half way; whether the transaction committed is unknown.
var errBatchAborted = errors.New("sqlite: create event: the batch this create was in stopped unexpectedly (see the server's log); whether it was stored is unknown: retry it with the same idempotency key")

// handOff chooses the first caller still waiting to write the next batch,
// or marks the queue idle.
func (q *eventQueue) handOff() {
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
