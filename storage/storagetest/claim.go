package storagetest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func testClaim(t *testing.T, b Backend) {
	t.Run("a pending due delivery is claimed with a lease and a token, counters untouched", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)

		if c.Token == "" {
			t.Fatal("claim has no token")
		}
		if !f.tokenIs(d.ID, c.Token) {
			t.Fatal("the row does not carry the token the claim returned")
		}
		wantState(t, c.Delivery, storage.StateProcessing, 0, 0)
		if c.Delivery.ClaimExpiresAt == nil || !c.Delivery.ClaimExpiresAt.Equal(f.now.Add(lease)) {
			t.Fatalf("claim_expires_at = %v, want now + lease = %s", c.Delivery.ClaimExpiresAt, f.now.Add(lease))
		}
		got := f.get(d.ID)
		if !sameDelivery(got, c.Delivery) {
			t.Fatalf("stored row differs from the claim:\nstored %+v\nclaim  %+v", got, c.Delivery)
		}
		if n := len(f.attempts(d.ID)); n != 0 {
			t.Fatalf("claiming recorded %d attempts, want 0", n)
		}
	})

	t.Run("the claim carries the event with its payload byte for byte", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		// Odd spacing and key order: a JSON column type would normalise these.
		payload := []byte("{\"z\":1,   \"a\":[2, 3],\n\"s\":\"\u00e9\"}")
		res, err := f.store.EventCreate(f.ctx, storage.Event{Type: "custom.thing", Payload: payload})
		if err != nil {
			t.Fatal(err)
		}
		c := f.claimOne(f.store, f.now, res.Deliveries[0].ID)
		if c.Event.ID != res.Event.ID || c.Event.Type != "custom.thing" {
			t.Fatalf("claim event = %s/%s, want %s/custom.thing", c.Event.ID, c.Event.Type, res.Event.ID)
		}
		if !bytes.Equal(c.Event.Payload, payload) {
			t.Fatalf("payload changed in storage:\ngot  %q\nwant %q", c.Event.Payload, payload)
		}
	})

	t.Run("a delivery that is not due is not claimed and nothing is recorded", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		f.complete(f.store, c, storage.OutcomeRetryable, f.now, 0) // due again at now+10s
		before := f.get(d.ID)

		if claims := f.claim(f.store, f.at(9*time.Second), 10); len(claims) != 0 {
			t.Fatalf("claimed %v before it was due", claimIDs(claims))
		}
		wantUnchanged(t, before, f.get(d.ID), "inspecting a row that is not due")
		if !f.tokenIs(d.ID, "") {
			t.Fatal("inspecting a row that is not due wrote a claim token")
		}
		if n := len(f.attempts(d.ID)); n != 1 {
			t.Fatalf("attempts recorded = %d, want the 1 real request", n)
		}
		// Due exactly at next_attempt_at: pending and next_attempt_at <= now.
		f.claimOne(f.store, before.NextAttemptAt, d.ID)
	})

	t.Run("a processing delivery is not claimed while its lease holds", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		// The lease holds up to and including claim_expires_at.
		for _, at := range []time.Time{f.at(time.Second), f.at(lease - time.Millisecond), f.at(lease)} {
			if claims := f.claim(f.store, at, 10); len(claims) != 0 {
				t.Fatalf("claimed %v at %s inside the lease ending %s", claimIDs(claims), at, f.at(lease))
			}
		}
		if !f.tokenIs(d.ID, c.Token) {
			t.Fatal("a refused claim replaced the owner's token")
		}
	})

	t.Run("a processing delivery whose lease expired is claimed again with a fresh token", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		first := f.claimOne(f.store, f.now, d.ID)
		later := f.at(lease + time.Millisecond)
		second := f.claimOne(f.store, later, d.ID)

		if second.Token == first.Token {
			t.Fatal("reclaim reused the expired claim's token")
		}
		if !f.tokenIs(d.ID, second.Token) {
			t.Fatal("the row does not carry the new token")
		}
		if !second.Delivery.ClaimExpiresAt.Equal(later.Add(lease)) {
			t.Fatalf("new lease ends %v, want %s", second.Delivery.ClaimExpiresAt, later.Add(lease))
		}
		wantState(t, second.Delivery, storage.StateProcessing, 0, 0)
	})

	t.Run("delivered and failed deliveries are never claimed", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		delivered := f.event("form_1").Deliveries[0]
		failed := f.event("form_1").Deliveries[0]
		for _, c := range f.claim(f.store, f.now, 10) {
			outcome := storage.OutcomeDelivered
			if c.Delivery.ID == failed.ID {
				outcome = storage.OutcomePermanent
			}
			f.complete(f.store, c, outcome, f.now, 0)
		}
		for _, at := range []time.Time{f.at(time.Hour), f.at(1000 * time.Hour)} {
			if claims := f.claim(f.store, at, 10); len(claims) != 0 {
				t.Fatalf("claimed terminal deliveries %v", claimIDs(claims))
			}
		}
		wantState(t, f.get(delivered.ID), storage.StateDelivered, 1, 1)
		wantState(t, f.get(failed.ID), storage.StateFailed, 1, 1)
	})

	t.Run("a batch claims at most the limit, oldest due first, each with its own token", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		var ids []string
		for range 5 {
			ids = append(ids, f.event("form_1").Deliveries[0].ID)
			time.Sleep(2 * time.Millisecond) // distinct creation times and id prefixes
		}
		// Push the first one back: due at now+10s, so it sorts last.
		c := f.claim(f.store, f.now, 1)[0]
		if c.Delivery.ID != ids[0] {
			t.Fatalf("claimed %s first, want the oldest %s", c.Delivery.ID, ids[0])
		}
		f.complete(f.store, c, storage.OutcomeRetryable, f.now, 0)

		batch := f.claim(f.store, f.at(time.Hour), 3)
		if len(batch) != 3 {
			t.Fatalf("claimed %d, want the limit 3", len(batch))
		}
		tokens := map[string]bool{}
		for i, c := range batch {
			if c.Delivery.ID != ids[i+1] {
				t.Fatalf("batch order = %v, want oldest due first %v", claimIDs(batch), ids[1:4])
			}
			if tokens[c.Token] {
				t.Fatal("two claims in one batch share a token")
			}
			tokens[c.Token] = true
		}
		rest := f.claim(f.store, f.at(time.Hour), 10)
		if len(rest) != 2 || rest[0].Delivery.ID != ids[4] || rest[1].Delivery.ID != ids[0] {
			t.Fatalf("second batch = %v, want [%s %s]", claimIDs(rest), ids[4], ids[0])
		}
	})

	t.Run("bad claim parameters are refused", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		for _, p := range []storage.DeliveryClaimParams{{Limit: 0, Lease: lease}, {Limit: 1, Lease: 0}} {
			_, err := f.store.DeliveryClaim(f.ctx, p)
			wantErr(t, err, storage.ErrInvalid, "claim with bad parameters")
		}
	})
}

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
