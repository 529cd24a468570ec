package storagetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func testConcurrency(t *testing.T, b Backend) {
	t.Run("two connections hold two different claims on one row and only the newer one completes", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		first, second := f.db.Open(t), f.db.Open(t)

		old := f.claimOne(first, f.now, d.ID)
		// first's lease runs out mid-request; second reclaims on its own connection.
		cur := f.claimOne(second, f.at(lease+time.Second), d.ID)
		if old.Token == cur.Token {
			t.Fatal("two claims share a token")
		}

		_, _, err := first.DeliveryComplete(f.ctx, completeParams(old, storage.OutcomeDelivered, f.at(lease+2*time.Second), 0))
		wantErr(t, err, storage.ErrClaimLost, "the superseded worker's completion")
		wantUnchanged(t, cur.Delivery, f.get(d.ID), "the superseded worker's completion")

		la, err := first.AttemptRecordLate(f.ctx, lateParams(old, storage.OutcomeDelivered, f.at(lease+2*time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		got, oa := f.complete(second, cur, storage.OutcomeDelivered, f.at(lease+3*time.Second), 0)
		if la.Number == oa.Number {
			t.Fatalf("late and owner attempts share number %d", la.Number)
		}
		wantState(t, got, storage.StateDelivered, 2, 1)
		wantNumbers(t, f.attempts(d.ID), la.Number)
	})

	t.Run("late workers and the owner recording at the same instant get distinct numbers", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		stores := []storage.Store{f.db.Open(t), f.db.Open(t), f.db.Open(t)}
		const perRound, rounds = 20, 3
		for round := range rounds {
			start := f.at(time.Duration(round) * 10 * time.Minute)
			ids := map[string]bool{}
			for range perRound {
				ids[f.event("form_1").Deliveries[0].ID] = true
			}
			// Three generations of claims on every row: two superseded, one current.
			gens := make([][]storage.Claim, len(stores))
			for g, s := range stores {
				gens[g] = f.claim(s, start.Add(time.Duration(g)*(lease+time.Second)), 2*perRound)
				if len(gens[g]) != perRound {
					t.Fatalf("round %d generation %d claimed %d, want %d", round, g, len(gens[g]), perRound)
				}
			}
			now := start.Add(3 * lease)
			begin := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, perRound*len(stores))
			for g, claims := range gens {
				for _, c := range claims {
					wg.Go(func() {
						<-begin
						var err error
						if g == len(stores)-1 {
							_, _, err = stores[g].DeliveryComplete(f.ctx, completeParams(c, storage.OutcomeDelivered, now, 0))
						} else {
							_, err = stores[g].AttemptRecordLate(f.ctx, lateParams(c, storage.OutcomeRetryable, now))
						}
						if err != nil {
							errs <- fmt.Errorf("generation %d on %s: %w", g, c.Delivery.ID, err)
						}
					})
				}
			}
			close(begin)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for id := range ids {
				d := f.get(id)
				wantState(t, d, storage.StateDelivered, 3, 1)
				as := f.attempts(id)
				late := 0
				for i, a := range as {
					if a.Number != i+1 {
						t.Fatalf("%s: attempt numbers %v, want 1..3", id, numbers(as))
					}
					if a.Late {
						late++
					}
				}
				if len(as) != 3 || late != 2 {
					t.Fatalf("%s: %d attempts with %d late, want 3 with 2 late", id, len(as), late)
				}
			}
		}
	})

	t.Run("workers racing on independent connections never claim one row twice inside a lease", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		f.endpoint()
		const events = 150 // two deliveries each
		for range events {
			f.event("form_1")
		}
		const workers, goroutinesPerWorker = 6, 3
		var (
			mu      sync.Mutex
			claimed = map[string]int{}
			owned   = map[storage.Store][]storage.Claim{}
		)
		stores := make([]storage.Store, workers)
		for i := range stores {
			stores[i] = f.db.Open(t)
		}
		begin := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, workers*goroutinesPerWorker)
		for _, s := range stores {
			for range goroutinesPerWorker {
				wg.Go(func() {
					<-begin
					for {
						// Every worker claims at the same instant with an hour's
						// lease: no row may come back twice.
						cs, err := s.DeliveryClaim(f.ctx, storage.DeliveryClaimParams{Limit: 7, Lease: time.Hour, Now: f.now})
						if err != nil {
							errs <- err
							return
						}
						if len(cs) == 0 {
							return
						}
						mu.Lock()
						for _, c := range cs {
							claimed[c.Delivery.ID]++
						}
						owned[s] = append(owned[s], cs...)
						mu.Unlock()
					}
				})
			}
		}
		close(begin)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if len(claimed) != 2*events {
			t.Fatalf("claimed %d distinct deliveries, want %d", len(claimed), 2*events)
		}
		for id, n := range claimed {
			if n != 1 {
				t.Fatalf("delivery %s claimed %d times inside one lease", id, n)
			}
		}

		// Every owner completes concurrently on its own connection.
		errs = make(chan error, 2*events)
		for s, cs := range owned {
			for _, c := range cs {
				wg.Go(func() {
					if _, _, err := s.DeliveryComplete(f.ctx, completeParams(c, storage.OutcomeDelivered, f.now, 0)); err != nil {
						errs <- err
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		st, err := f.store.DeliveryStats(f.ctx, f.now)
		if err != nil {
			t.Fatal(err)
		}
		if st.ByState[storage.StateDelivered] != 2*events {
			t.Fatalf("delivered = %d, want %d (stats %+v)", st.ByState[storage.StateDelivered], 2*events, st)
		}
		if n := f.count("SELECT count(*) FROM webhook_delivery_attempts"); n != 2*events {
			t.Fatalf("attempts recorded = %d, want %d", n, 2*events)
		}
	})
}
