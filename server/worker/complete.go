package worker

import (
	"context"
	"sync"
	"time"

	"github.com/hymical/hymical/storage"
)

// recorder records outcomes off the senders' path: a sender hands its
// outcome over and takes its next claim while the completer writes. slots
// bounds the outcomes waiting to be written, so a slow database slows the
// senders down instead of piling claims up in memory.
type recorder struct {
	done  chan completion
	slots chan struct{}
	wg    sync.WaitGroup
}

// record runs fn, which records one attempt, in its own goroutine once a
// slot is free.
func (r *recorder) record(fn func()) {
	r.slots <- struct{}{}
	r.wg.Go(func() {
		defer func() { <-r.slots }()
		fn()
	})
}

// completion is one owner's outcome on its way to the completer, with
// where to send the store's answer.
type completion struct {
	params storage.DeliveryCompleteParams
	reply  chan<- storage.DeliveryCompleteResult
}

// completeLoop records outcomes as they arrive: it gathers a batch (see
// gather) and writes it in one transaction. It returns when done is
// closed. ctx is Run's recording context, which outlives shutdown by a
// lease.
func (p *Pool) completeLoop(ctx context.Context, done <-chan completion) {
	limit := min(storage.MaxCompleteBatch, max(p.cfg.Concurrency, p.cfg.BatchSize))
	batch := make([]completion, 0, limit)
	params := make([]storage.DeliveryCompleteParams, 0, limit)
	for first := range done {
		batch = gather(append(batch[:0], first), done, limit, completeGatherGap, completeGatherMax)
		params = params[:0]
		for _, c := range batch {
			params = append(params, c.params)
		}
		res, err := p.store.DeliveryCompleteBatch(ctx, params)
		// A batch that failed for want of space is retried by each of its
		// senders (see finish), like any outage; one that wrote shows
		// there is room again.
		p.observe(err)
		for i, c := range batch {
			if err != nil {
				c.reply <- storage.DeliveryCompleteResult{Err: err}
				continue
			}
			c.reply <- res[i]
		}
	}
}

// completeGatherGap and completeGatherMax bound how long the completer
// waits for more outcomes before it writes. Part of what a completion
// costs the database is per statement (three a batch, and a transaction),
// so under load a batch written a moment later is cheaper by the outcomes
// that joined it: draining on PostgreSQL with 16 senders, batches went
// from 11 outcomes to 22 and the completion's statements from 88 to 64-73
// µs of database time a delivery. Nobody waits on the write to send: a
// sender hands its outcome over and goes on (see recorder), so the wait delays
// only when the attempt shows up in the history and when a retry or an
// ordered endpoint's next delivery is let go.
const (
	completeGatherGap = time.Millisecond
	completeGatherMax = 3 * time.Millisecond
)

// gather adds outcomes from done to batch while they arrive no more than
// gap apart, until batch holds limit, most has passed since the call, or
// done is closed. A lone outcome is written after one gap; a stream of
// them, after most.
func gather(batch []completion, done <-chan completion, limit int, gap, most time.Duration) []completion {
	if len(batch) >= limit {
		return batch
	}
	end := time.Now().Add(most)
	wait := time.NewTimer(min(gap, most))
	defer wait.Stop()
	for len(batch) < limit {
		select {
		case c, ok := <-done:
			if !ok {
				return batch
			}
			batch = append(batch, c)
			left := time.Until(end)
			if left <= 0 {
				return batch
			}
			wait.Reset(min(gap, left))
		case <-wait.C:
			return batch
		}
	}
	return batch
}

// complete hands one outcome to the completer and waits for the store's
// answer.
func complete(done chan<- completion, params storage.DeliveryCompleteParams) (storage.Delivery, storage.Attempt, error) {
	reply := make(chan storage.DeliveryCompleteResult, 1)
	done <- completion{params: params, reply: reply}
	r := <-reply
	return r.Delivery, r.Attempt, r.Err
}
