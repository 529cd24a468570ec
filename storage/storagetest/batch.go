package storagetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// testBatch covers what a claim hands the worker besides the row, and the
// batched completion: each entry fenced on its own, in one transaction.
func testBatch(t *testing.T, b Backend) {
	t.Run("a claim carries the endpoint as it is stored", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		ep := f.endpoint(func(e *storage.Endpoint) {
			e.Config = map[string]string{"header": "x"}
			e.Description = "carried"
		})
		other := f.endpoint()
		res := f.event("form_1")
		if len(res.Deliveries) != 2 {
			t.Fatalf("fanned out to %d endpoints, want 2", len(res.Deliveries))
		}
		claims := f.claim(f.store, f.now, 10)
		if len(claims) != 2 {
			t.Fatalf("claimed %d, want 2", len(claims))
		}
		for _, c := range claims {
			want := ep
			if c.Delivery.EndpointID == other.ID {
				want = other
			}
			stored, err := f.store.EndpointGet(f.ctx, want.ID)
			if err != nil {
				t.Fatal(err)
			}
			got := c.Endpoint
			if got.ID != c.Delivery.EndpointID || got.ID != stored.ID || got.URL != stored.URL || got.Transport != stored.Transport ||
				got.Description != stored.Description || fmt.Sprint(got.Config) != fmt.Sprint(stored.Config) ||
				!got.UpdatedAt.Equal(stored.UpdatedAt) || len(got.Secrets) != 1 || got.Secrets[0].Reveal() != stored.Secrets[0].Reveal() {
				t.Fatalf("claim of %s carries endpoint %+v, want the stored %+v", c.Delivery.ID, got, stored)
			}
		}
	})

	t.Run("a batch ends each claim as DeliveryComplete would", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		for range 4 {
			f.event("form_1")
		}
		claims := f.claim(f.store, f.now, 10)
		if len(claims) != 4 {
			t.Fatalf("claimed %d, want 4", len(claims))
		}
		done := f.at(time.Second)
		outcomes := []storage.OutcomeKind{storage.OutcomeDelivered, storage.OutcomeRetryable, storage.OutcomePermanent, storage.OutcomeRetryable}
		ps := make([]storage.DeliveryCompleteParams, len(claims))
		for i, c := range claims {
			ps[i] = completeParams(c, outcomes[i], done, 0)
		}
		ps[3].MaxCycleAttempts = 1 // this retryable failure spends the whole allowance
		res, err := f.store.DeliveryCompleteBatch(f.ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(ps) {
			t.Fatalf("%d results for %d entries", len(res), len(ps))
		}
		want := []storage.DeliveryState{storage.StateDelivered, storage.StatePending, storage.StateFailed, storage.StateFailed}
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("entry %d: %v", i, r.Err)
			}
			if r.Delivery.ID != claims[i].Delivery.ID || r.Attempt.DeliveryID != claims[i].Delivery.ID {
				t.Fatalf("result %d is for %s/%s, want %s: results must follow the order of the entries",
					i, r.Delivery.ID, r.Attempt.DeliveryID, claims[i].Delivery.ID)
			}
			wantState(t, r.Delivery, want[i], 1, 1)
			stored := f.get(r.Delivery.ID)
			if !sameDelivery(stored, r.Delivery) || !f.tokenIs(r.Delivery.ID, "") {
				t.Fatalf("entry %d: stored %+v, returned %+v", i, stored, r.Delivery)
			}
			as := f.attempts(r.Delivery.ID)
			if len(as) != 1 || as[0].Number != 1 || as[0].Outcome != outcomes[i] || as[0].HTTPStatus != ps[i].HTTPStatus ||
				!as[0].FinishedAt.Equal(done) || r.Attempt.Number != 1 {
				t.Fatalf("entry %d: attempts %+v, returned %+v", i, as, r.Attempt)
			}
		}
		if !res[1].Delivery.NextAttemptAt.Equal(done.Add(10 * time.Second)) {
			t.Fatalf("retryable entry due at %s, want %s", res[1].Delivery.NextAttemptAt, done.Add(10*time.Second))
		}
	})

	t.Run("lost claims, unknown ids, repeats and bad entries fail alone and write nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		f.event("form_1")
		f.event("form_1")
		first := f.claim(f.store, f.now, 10)
		if len(first) != 2 {
			t.Fatalf("claimed %d, want 2", len(first))
		}
		// Both leases run out and another worker claims one row: the older,
		// which is first[0]. first[1]'s token still matches its row.
		stale, own := first[0], first[1]
		later := f.at(lease + time.Second)
		again := f.claim(f.store, later, 1)
		if len(again) != 1 || again[0].Delivery.ID != stale.Delivery.ID {
			t.Fatalf("reclaimed %v, want only %s", claimIDs(again), stale.Delivery.ID)
		}
		retaken := again[0]
		before := f.get(stale.Delivery.ID)
		ps := []storage.DeliveryCompleteParams{
			completeParams(own, storage.OutcomeDelivered, later, 0),
			completeParams(stale, storage.OutcomeDelivered, later, 0),
			{DeliveryID: "dlv_does_not_exist", Token: "t", Outcome: storage.OutcomeDelivered, Now: later},
			completeParams(own, storage.OutcomeRetryable, later, 0),
			{DeliveryID: own.Delivery.ID, Token: "", Outcome: storage.OutcomeDelivered, Now: later},
		}
		res, err := f.store.DeliveryCompleteBatch(f.ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		wantErr := []error{nil, storage.ErrClaimLost, storage.ErrNotFound, storage.ErrInvalid, storage.ErrInvalid}
		for i, r := range res {
			if wantErr[i] == nil && r.Err != nil || wantErr[i] != nil && !errors.Is(r.Err, wantErr[i]) {
				t.Fatalf("entry %d: err = %v, want %v", i, r.Err, wantErr[i])
			}
		}
		wantState(t, f.get(own.Delivery.ID), storage.StateDelivered, 1, 1)
		if n := len(f.attempts(own.Delivery.ID)); n != 1 {
			t.Fatalf("own delivery has %d attempts, want the 1 of its good entry", n)
		}
		wantUnchanged(t, before, f.get(stale.Delivery.ID), "a completion under a superseded token")
		if !f.tokenIs(stale.Delivery.ID, retaken.Token) || len(f.attempts(stale.Delivery.ID)) != 0 {
			t.Fatal("a completion under a superseded token touched the new owner's claim or recorded an attempt")
		}
	})

	t.Run("an empty batch writes nothing and an oversized one is refused", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		res, err := f.store.DeliveryCompleteBatch(f.ctx, nil)
		if err != nil || len(res) != 0 {
			t.Fatalf("empty batch: %v, %v", res, err)
		}
		big := make([]storage.DeliveryCompleteParams, storage.MaxCompleteBatch+1)
		if _, err := f.store.DeliveryCompleteBatch(f.ctx, big); !errors.Is(err, storage.ErrInvalid) {
			t.Fatalf("oversized batch: err = %v, want ErrInvalid", err)
		}
	})

	t.Run("crossing batches of two processes, each with the other's superseded tokens, end each row once", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		one, two := f.store, f.db.Open(t)
		f.endpoint()
		const n = 60
		for range n {
			f.event("form_1")
		}
		// Generation 1: two claims everything. Generation 2: its leases run
		// out and one takes everything. Generation 3: one's leases run out
		// and two takes back the older half. Now each process owns half the
		// rows and holds superseded tokens for the other half.
		t1, t2, t3 := f.now, f.at(lease+time.Second), f.at(2*lease+2*time.Second)
		gen1 := f.claim(two, t1, n)
		gen2 := f.claim(one, t2, n)
		gen3 := f.claim(two, t3, n/2)
		if len(gen1) != n || len(gen2) != n || len(gen3) != n/2 {
			t.Fatalf("claimed %d, %d, %d; want %d, %d, %d", len(gen1), len(gen2), len(gen3), n, n, n/2)
		}
		twoOwns := map[string]bool{}
		for _, c := range gen3 {
			twoOwns[c.Delivery.ID] = true
		}
		done := f.at(2*lease + 3*time.Second)
		var psOne, psTwo []storage.DeliveryCompleteParams
		for _, c := range gen2 { // one's tokens, in id order
			psOne = append(psOne, completeParams(c, storage.OutcomeDelivered, done, 0))
		}
		var twoTokens []storage.Claim // two's tokens: gen3 where it owns, gen1 elsewhere
		for _, c := range gen1 {
			if !twoOwns[c.Delivery.ID] {
				twoTokens = append(twoTokens, c)
			}
		}
		twoTokens = append(twoTokens, gen3...)
		for i := len(twoTokens) - 1; i >= 0; i-- { // reverse order: the locks cross
			psTwo = append(psTwo, completeParams(twoTokens[i], storage.OutcomeDelivered, done, 0))
		}

		ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var resOne, resTwo []storage.DeliveryCompleteResult
		var errOne, errTwo error
		wg.Go(func() { resOne, errOne = one.DeliveryCompleteBatch(ctx, psOne) })
		wg.Go(func() { resTwo, errTwo = two.DeliveryCompleteBatch(ctx, psTwo) })
		wg.Wait()
		if errOne != nil || errTwo != nil {
			t.Fatalf("batches failed: %v; %v", errOne, errTwo)
		}
		check := func(who string, ps []storage.DeliveryCompleteParams, res []storage.DeliveryCompleteResult, owns func(string) bool) {
			for i, r := range res {
				id := ps[i].DeliveryID
				switch {
				case owns(id) && r.Err != nil:
					t.Errorf("%s owns %s but its completion failed: %v", who, id, r.Err)
				case !owns(id) && !errors.Is(r.Err, storage.ErrClaimLost):
					t.Errorf("%s's superseded token for %s: err = %v, want ErrClaimLost", who, id, r.Err)
				}
			}
		}
		check("one", psOne, resOne, func(id string) bool { return !twoOwns[id] })
		check("two", psTwo, resTwo, func(id string) bool { return twoOwns[id] })
		if got := f.count("SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered' AND attempts = 1 AND claim_token IS NULL"); got != n {
			t.Fatalf("%d of %d deliveries delivered once with the claim cleared", got, n)
		}
		if got := f.count("SELECT count(*) FROM webhook_delivery_attempts"); got != n {
			t.Fatalf("%d attempts recorded, want %d: superseded entries must record nothing", got, n)
		}
	})
}
