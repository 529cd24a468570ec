// Package dedupetest holds the rules every webhook.Deduper keeps, written
// once as a suite that each implementation's test runs with a constructor:
// the SDK runs it on its MemoryDeduper, the server module on the SQLDeduper
// over real SQLite and PostgreSQL (it carries the drivers the SDK does not),
// and a receiver can run it on a Deduper of its own. It imports only the
// SDK and the standard library.
package dedupetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// subID is shaped like the submission ids Hymical sends.
const subID = "sub_48984534f33749c49a88de2d59400dce"

// Run runs the rules as parallel subtests of t. newDeduper returns a fresh,
// empty deduper, and other, a second deduper over the same records (another
// receiver process on the same database); a deduper that keeps its records
// in memory returns itself twice.
func Run(t *testing.T, newDeduper func(t *testing.T) (d, other webhook.Deduper)) {
	ctx := context.Background()

	t.Run("the first delivery runs the work and a repeat does not", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		runs := 0
		work := func(context.Context) error { runs++; return nil }
		for i, wantDup := range []bool{false, true, true} {
			dup, err := d.Process(ctx, subID, work)
			if err != nil {
				t.Fatalf("delivery %d: %v", i+1, err)
			}
			if dup != wantDup {
				t.Fatalf("delivery %d: duplicate = %v, want %v", i+1, dup, wantDup)
			}
		}
		if runs != 1 {
			t.Fatalf("work ran %d times, want 1", runs)
		}
	})

	t.Run("ids are independent", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		for _, id := range []string{"sub_a", "sub_b", "sub_A"} {
			dup, err := d.Process(ctx, id, func(context.Context) error { return nil })
			if err != nil || dup {
				t.Fatalf("Process(%s) = %v, %v; want a first delivery", id, dup, err)
			}
		}
	})

	t.Run("a failing handler leaves the id unrecorded and the redelivery runs it", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		boom := errors.New("the CRM is down")
		dup, err := d.Process(ctx, subID, func(context.Context) error { return fmt.Errorf("saving: %w", boom) })
		if !errors.Is(err, boom) || dup {
			t.Fatalf("Process = %v, %v; want the handler's error, not a duplicate", dup, err)
		}
		ran := false
		dup, err = d.Process(ctx, subID, func(context.Context) error { ran = true; return nil })
		if err != nil || dup || !ran {
			t.Fatalf("redelivery: duplicate %v, err %v, ran %v; want the work to run", dup, err, ran)
		}
		if dup, err := d.Process(ctx, subID, func(context.Context) error { t.Error("ran a third time"); return nil }); !dup || err != nil {
			t.Fatalf("third delivery = %v, %v; want a duplicate", dup, err)
		}
	})

	t.Run("a panicking handler leaves the id unrecorded", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic did not propagate")
				}
			}()
			_, _ = d.Process(ctx, subID, func(context.Context) error { panic("handler bug") })
		}()
		done := make(chan struct{})
		go func() {
			defer close(done)
			dup, err := d.Process(ctx, subID, func(context.Context) error { return nil })
			if err != nil || dup {
				t.Errorf("after a panic: %v, %v; want the work to run", dup, err)
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a delivery after a panicking one is stuck")
		}
	})

	t.Run("many concurrent deliveries of one id run the work exactly once", func(t *testing.T) {
		t.Parallel()
		d, other := newDeduper(t)
		const n = 40
		var runs, dups atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			dd := d
			if i%2 == 1 {
				dd = other // a second receiver process on the same database
			}
			wg.Go(func() {
				<-start
				dup, err := dd.Process(ctx, subID, func(context.Context) error {
					runs.Add(1)
					time.Sleep(20 * time.Millisecond) // hold the id while others arrive
					return nil
				})
				if err != nil {
					t.Errorf("Process: %v", err)
				}
				if dup {
					dups.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if runs.Load() != 1 || dups.Load() != n-1 {
			t.Fatalf("work ran %d times with %d duplicates, want 1 and %d", runs.Load(), dups.Load(), n-1)
		}
	})

	t.Run("when the first of concurrent deliveries fails, exactly one other runs the work", func(t *testing.T) {
		t.Parallel()
		d, other := newDeduper(t)
		const n = 20
		var calls, successes, dups atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			dd := d
			if i%2 == 1 {
				dd = other
			}
			wg.Go(func() {
				<-start
				dup, err := dd.Process(ctx, subID, func(context.Context) error {
					if calls.Add(1) == 1 {
						time.Sleep(20 * time.Millisecond)
						return errors.New("first attempt fails")
					}
					successes.Add(1)
					return nil
				})
				if dup {
					dups.Add(1)
				}
				_ = err // one call fails on purpose
			})
		}
		close(start)
		wg.Wait()
		if calls.Load() != 2 || successes.Load() != 1 || dups.Load() != n-2 {
			t.Fatalf("calls %d, successes %d, duplicates %d; want 2, 1, %d", calls.Load(), successes.Load(), dups.Load(), n-2)
		}
	})

	t.Run("a delivery waiting on one in progress gives up with its context", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		holding, release := make(chan struct{}), make(chan struct{})
		firstDone := make(chan error, 1)
		go func() {
			_, err := d.Process(ctx, subID, func(context.Context) error {
				close(holding)
				<-release
				return nil
			})
			firstDone <- err
		}()
		<-holding
		waitCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := d.Process(waitCtx, subID, func(context.Context) error {
			t.Error("the waiting delivery ran the work while the first held the id")
			return nil
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("waiting delivery = %v, want context.DeadlineExceeded", err)
		}
		close(release)
		if err := <-firstDone; err != nil {
			t.Fatalf("first delivery: %v", err)
		}
	})

	t.Run("an unusable id is refused before any work", func(t *testing.T) {
		t.Parallel()
		d, _ := newDeduper(t)
		for _, id := range []string{"", strings.Repeat("x", webhook.MaxIDBytes+1)} {
			_, err := d.Process(ctx, id, func(context.Context) error { t.Error("work ran"); return nil })
			if !errors.Is(err, webhook.ErrInvalidID) {
				t.Errorf("Process(%d bytes) = %v, want ErrInvalidID", len(id), err)
			}
		}
		if dup, err := d.Process(ctx, strings.Repeat("x", webhook.MaxIDBytes), func(context.Context) error { return nil }); err != nil || dup {
			t.Errorf("an id of exactly %d bytes: %v, %v", webhook.MaxIDBytes, dup, err)
		}
	})
}
