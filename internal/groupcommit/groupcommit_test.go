package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hymical/hymical/internal/testwait"
)

// gate is a Write that records each batch and, while held, blocks until
// released, so that calls queue behind the batch being written.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	hold    chan struct{}
	entered chan struct{}
}

func newGate() *gate {
	return &gate{hold: make(chan struct{}), entered: make(chan struct{}, 100)}
}

func (g *gate) write(batch []*Call[int, int]) {
	var ins []int
	for _, c := range batch {
		if c.Ctx.Err() != nil {
			c.Err = c.Ctx.Err()
			continue
		}
		ins = append(ins, c.In)
		if c.In < 0 {
			c.Err = errors.New("negative")
			continue
		}
		c.Out = c.In * 10
	}
	g.mu.Lock()
	g.batches = append(g.batches, ins)
	g.mu.Unlock()
	g.entered <- struct{}{}
	<-g.hold
}

func waitStats(t *testing.T, q *Queue[int, int], batches, waiting int) {
	t.Helper()
	testwait.For(t, 10*time.Second, func() error {
		if b, w := q.Stats(); b != batches || w != waiting {
			return fmt.Errorf("queue took %d batches with %d waiting, want %d and %d", b, w, batches, waiting)
		}
		return nil
	})
}

func TestCallsQueuedBehindABatchAreWrittenTogetherEachWithItsAnswer(t *testing.T) {
	g := newGate()
	q := &Queue[int, int]{Max: 4, Write: g.write}
	ctx := context.Background()
	outs := make([]int, 10)
	errs := make([]error, 10)
	var wg sync.WaitGroup
	wg.Go(func() { outs[0], errs[0] = q.Do(ctx, 0) })
	<-g.entered
	for i := 1; i < 10; i++ {
		in := i
		if i == 5 {
			in = -5
		}
		wg.Go(func() { outs[i], errs[i] = q.Do(ctx, in) })
	}
	waitStats(t, q, 1, 9)
	close(g.hold) // every batch from now on runs through
	wg.Wait()
	for i := range 10 {
		if i == 5 {
			if errs[i] == nil {
				t.Fatal("the failing call got no error")
			}
			continue
		}
		if errs[i] != nil || outs[i] != i*10 {
			t.Fatalf("call %d = %d, %v; want %d", i, outs[i], errs[i], i*10)
		}
	}
	// The first alone, then the nine that queued, at most Max at a time.
	if len(g.batches) != 4 || len(g.batches[0]) != 1 || len(g.batches[1]) != 4 || len(g.batches[2]) != 4 || len(g.batches[3]) != 1 {
		t.Fatalf("batches = %v, want sizes 1, 4, 4, 1", g.batches)
	}
	if b, w := q.Stats(); b != 4 || w != 0 {
		t.Fatalf("stats = %d batches, %d waiting", b, w)
	}
}

func TestACallGivenUpWhileQueuedLeavesAndOneTakenIsAnswered(t *testing.T) {
	g := newGate()
	q := &Queue[int, int]{Max: 8, Write: g.write, Wrap: func(err error) error { return fmt.Errorf("queue: %w", err) }}
	ctx := context.Background()
	var wg sync.WaitGroup
	var firstErr error
	firstCtx, cancelFirst := context.WithCancel(ctx)
	wg.Go(func() { _, firstErr = q.Do(firstCtx, 1) })
	<-g.entered
	// The first call is being written: giving up now changes nothing.
	cancelFirst()

	leftCtx, cancelLeft := context.WithCancel(ctx)
	leftDone := make(chan error, 1)
	go func() {
		_, err := q.Do(leftCtx, 2)
		leftDone <- err
	}()
	var stayOut int
	var stayErr error
	wg.Go(func() { stayOut, stayErr = q.Do(ctx, 3) })
	waitStats(t, q, 1, 2)
	cancelLeft()
	if err := <-leftDone; !errors.Is(err, context.Canceled) || err.Error() != "queue: context canceled" {
		t.Fatalf("call given up while queued: %v, want context.Canceled, wrapped by Wrap", err)
	}
	waitStats(t, q, 1, 1)
	close(g.hold)
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("call taken into a batch and then given up: %v, want its answer", firstErr)
	}
	if stayErr != nil || stayOut != 30 {
		t.Fatalf("call that stayed = %d, %v", stayOut, stayErr)
	}
	if len(g.batches) != 2 || len(g.batches[1]) != 1 || g.batches[1][0] != 3 {
		t.Fatalf("batches = %v, want [[1] [3]]: the call that left is not written", g.batches)
	}
}

func TestAPanickingWriteAnswersItsBatchAndTheQueueGoesOn(t *testing.T) {
	// The first batch is the leader's alone; it holds the write until a
	// second caller has queued, whose batch then panics.
	queued := make(chan struct{})
	var calls int
	q := &Queue[int, int]{Max: 8}
	q.Write = func(batch []*Call[int, int]) {
		calls++
		switch calls {
		case 1:
			<-queued
		case 2:
			panic("write failed")
		}
		for _, c := range batch {
			c.Out = c.In
		}
	}
	var wg sync.WaitGroup
	var firstErr error
	wg.Go(func() { _, firstErr = q.Do(context.Background(), 1) })
	waitStats(t, q, 1, 0)

	// The second caller is handed the next batch and panics writing it; a
	// third, queued in the same batch, is answered with ErrAborted.
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_, _ = q.Do(context.Background(), 2)
	}()
	waitStats(t, q, 1, 1)
	thirdErr := make(chan error, 1)
	go func() {
		_, err := q.Do(context.Background(), 3)
		thirdErr <- err
	}()
	waitStats(t, q, 1, 2)
	close(queued)
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("first call: %v", firstErr)
	}
	if p := <-panicked; p == nil {
		t.Fatal("the panic did not reach the caller writing the batch")
	}
	if err := <-thirdErr; !errors.Is(err, ErrAborted) {
		t.Fatalf("call in the batch that panicked: %v, want ErrAborted", err)
	}
	out, err := q.Do(context.Background(), 4)
	if err != nil || out != 4 {
		t.Fatalf("call after a panicked batch = %d, %v; want 4", out, err)
	}
}

// The callers' contexts end the batch's through context.AfterFunc, on
// goroutines of their own. The test runs in a synctest bubble, where
// synctest.Wait returns once those goroutines have done all they will:
// then the batch's context is in the state it keeps, and a test of "not
// ended" proves something without sleeping on it.
func TestABatchContextEndsWhenEveryCallerHasGivenUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx1, cancel1 := context.WithCancel(context.Background())
		ctx2, cancel2 := context.WithCancel(context.Background())
		defer cancel2()
		batch := []*Call[int, int]{{Ctx: ctx1}, {Ctx: ctx2}}
		ctx, stop := BatchContext(batch)
		defer stop()
		cancel1()
		synctest.Wait()
		if ctx.Err() != nil {
			t.Fatal("the batch's context ended while a caller still waits")
		}
		cancel2()
		synctest.Wait()
		if ctx.Err() == nil {
			t.Fatal("the batch's context did not end after every caller gave up")
		}
	})

	// stop ends it too, for a batch written while its callers wait.
	live, stopLive := BatchContext([]*Call[int, int]{{Ctx: context.Background()}})
	stopLive()
	if live.Err() == nil {
		t.Fatal("stop did not end the batch's context")
	}
}
