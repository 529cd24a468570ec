package storagetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hymical/hymical/storage"
)

func testComplete(t *testing.T, b Backend) {
	t.Run("success is delivered, both counters rise, the claim is cleared", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		done := f.at(2 * time.Second)
		got, a := f.complete(f.store, c, storage.OutcomeDelivered, done, 0)

		wantState(t, got, storage.StateDelivered, 1, 1)
		if got.ClaimExpiresAt != nil || !f.tokenIs(d.ID, "") {
			t.Fatal("completion left the lease or the token on the row")
		}
		if got.CompletedAt == nil || !got.CompletedAt.Equal(done) {
			t.Fatalf("completed_at = %v, want %s", got.CompletedAt, done)
		}
		if !got.NextAttemptAt.Equal(d.NextAttemptAt) {
			t.Fatalf("success moved next_attempt_at from %s to %s", d.NextAttemptAt, got.NextAttemptAt)
		}
		want := storage.Attempt{DeliveryID: d.ID, Number: 1, Outcome: storage.OutcomeDelivered, HTTPStatus: 200,
			StartedAt: done.Add(-time.Second), FinishedAt: done, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
		stored := f.attempts(d.ID)
		if len(stored) != 1 {
			t.Fatalf("stored %d attempts, want 1", len(stored))
		}
		for _, gotA := range []storage.Attempt{a, stored[0]} {
			if gotA.DeliveryID != want.DeliveryID || gotA.Number != want.Number || gotA.Outcome != want.Outcome ||
				gotA.HTTPStatus != want.HTTPStatus || gotA.Late || gotA.Error != "" || gotA.TraceID != want.TraceID ||
				!gotA.StartedAt.Equal(want.StartedAt) || !gotA.FinishedAt.Equal(want.FinishedAt) {
				t.Fatalf("attempt = %+v, want %+v", gotA, want)
			}
		}
	})

	t.Run("a retryable failure goes back to pending, due after the retry delay", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		got, a := f.complete(f.store, c, storage.OutcomeRetryable, f.now, 0)

		wantState(t, got, storage.StatePending, 1, 1)
		if !got.NextAttemptAt.Equal(f.at(10 * time.Second)) {
			t.Fatalf("next_attempt_at = %s, want now + retry delay = %s", got.NextAttemptAt, f.at(10*time.Second))
		}
		if got.ClaimExpiresAt != nil || got.CompletedAt != nil || !f.tokenIs(d.ID, "") {
			t.Fatal("a retryable failure must clear the claim and leave completed_at empty")
		}
		if a.Outcome != storage.OutcomeRetryable || a.HTTPStatus != 503 || a.Error != "receiver answered retryable" {
			t.Fatalf("attempt = %+v", a)
		}
	})

	t.Run("retryable failures become failed when cycle_attempts reaches the allowance", func(t *testing.T) {
		t.Parallel()
		for _, allowance := range []int{0, 1, 3} {
			f := newFixture(t, b)
			d := f.delivery()
			want := allowance
			if want == 0 {
				want = storage.DefaultMaxCycleAttempts
			}
			now := f.now
			for i := 1; i <= want; i++ {
				c := f.claimOne(f.store, now, d.ID)
				got, a := f.complete(f.store, c, storage.OutcomeRetryable, now, allowance)
				if a.Number != i {
					t.Fatalf("allowance %d: attempt %d numbered %d", allowance, i, a.Number)
				}
				wantStateAt := storage.StatePending
				if i == want {
					wantStateAt = storage.StateFailed
				}
				wantState(t, got, wantStateAt, i, i)
				now = now.Add(time.Minute)
			}
			got := f.get(d.ID)
			if got.CompletedAt == nil {
				t.Fatalf("allowance %d: failed delivery has no completed_at", allowance)
			}
			if claims := f.claim(f.store, now.Add(time.Hour), 10); len(claims) != 0 {
				t.Fatalf("allowance %d: a failed delivery was claimed again", allowance)
			}
		}
	})

	t.Run("a permanent failure is failed at once", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		got, a := f.complete(f.store, c, storage.OutcomePermanent, f.now, 0)
		wantState(t, got, storage.StateFailed, 1, 1)
		if a.Outcome != storage.OutcomePermanent || a.HTTPStatus != 400 {
			t.Fatalf("attempt = %+v", a)
		}
	})

	t.Run("completing twice under one token fails the second time and writes nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		f.complete(f.store, c, storage.OutcomeRetryable, f.now, 0)
		before := f.get(d.ID)
		_, _, err := f.store.DeliveryComplete(f.ctx, completeParams(c, storage.OutcomeDelivered, f.now, 0))
		wantErr(t, err, storage.ErrClaimLost, "second completion")
		wantUnchanged(t, before, f.get(d.ID), "a second completion")
		if n := len(f.attempts(d.ID)); n != 1 {
			t.Fatalf("attempts = %d, want 1", n)
		}
	})

	t.Run("an unknown delivery is not found", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		_, _, err := f.store.DeliveryComplete(f.ctx, completeParams(storage.Claim{Delivery: storage.Delivery{ID: "dlv_missing"}, Token: "x"}, storage.OutcomeDelivered, f.now, 0))
		wantErr(t, err, storage.ErrNotFound, "complete unknown delivery")
	})

	t.Run("bad completion parameters are refused and write nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		good := completeParams(c, storage.OutcomeRetryable, f.now, 0)
		bad := map[string]func(*storage.DeliveryCompleteParams){
			"empty token":        func(p *storage.DeliveryCompleteParams) { p.Token = "" },
			"unknown outcome":    func(p *storage.DeliveryCompleteParams) { p.Outcome = "maybe" },
			"status 42":          func(p *storage.DeliveryCompleteParams) { p.HTTPStatus = 42 },
			"negative delay":     func(p *storage.DeliveryCompleteParams) { p.RetryDelay = -time.Second },
			"negative allowance": func(p *storage.DeliveryCompleteParams) { p.MaxCycleAttempts = -1 },
		}
		for name, mutate := range bad {
			p := good
			mutate(&p)
			_, _, err := f.store.DeliveryComplete(f.ctx, p)
			wantErr(t, err, storage.ErrInvalid, name)
		}
		wantUnchanged(t, c.Delivery, f.get(d.ID), "refused completions")
		if !f.tokenIs(d.ID, c.Token) {
			t.Fatal("refused completions cleared the token")
		}
	})

	t.Run("attempt history bounds error text and stores no status when there was none", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		p := completeParams(c, storage.OutcomeRetryable, f.now, 0)
		p.HTTPStatus = 0
		p.Error = "dial tcp: connection refused \x00 " + strings.Repeat("é", 3000) + "\xff"
		_, a, err := f.store.DeliveryComplete(f.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		stored := f.attempts(d.ID)[0]
		for _, got := range []storage.Attempt{a, stored} {
			if got.HTTPStatus != 0 {
				t.Fatalf("http status = %d, want none", got.HTTPStatus)
			}
			if len(got.Error) > storage.MaxErrorBytes || !utf8.ValidString(got.Error) || strings.ContainsRune(got.Error, 0) {
				t.Fatalf("error text not bounded to valid UTF-8 of at most %d bytes: %d bytes", storage.MaxErrorBytes, len(got.Error))
			}
			if !strings.HasPrefix(got.Error, "dial tcp: connection refused") {
				t.Fatalf("error text lost its start: %.40q", got.Error)
			}
		}
	})
}

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

func testRelease(t *testing.T, b Backend) {
	t.Run("release gives the claim back without spending an attempt", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		got, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{DeliveryID: d.ID, Token: c.Token, Delay: 5 * time.Second, Now: f.now})
		if err != nil {
			t.Fatal(err)
		}
		wantState(t, got, storage.StatePending, 0, 0)
		if !got.NextAttemptAt.Equal(f.at(5*time.Second)) || got.ClaimExpiresAt != nil || !f.tokenIs(d.ID, "") {
			t.Fatalf("released row = %+v", got)
		}
		if n := len(f.attempts(d.ID)); n != 0 {
			t.Fatalf("release recorded %d attempts", n)
		}
		f.claimOne(f.store, f.at(5*time.Second), d.ID)
	})

	t.Run("a superseded worker cannot release the new owner's claim", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		old := f.claimOne(f.store, f.now, d.ID)
		owner := f.claimOne(f.store, f.at(lease+time.Second), d.ID)
		_, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{DeliveryID: d.ID, Token: old.Token, Now: f.at(lease + 2*time.Second)})
		wantErr(t, err, storage.ErrClaimLost, "stale release")
		wantUnchanged(t, owner.Delivery, f.get(d.ID), "a stale release")
		if !f.tokenIs(d.ID, owner.Token) {
			t.Fatal("a stale release replaced the owner's token")
		}
		_, err = f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{DeliveryID: "dlv_missing", Token: "x"})
		wantErr(t, err, storage.ErrNotFound, "release of unknown delivery")
	})
}

// testUnsent holds the rules for a claim that ends without a request (the
// transport plugin is not running, the transport is unknown, the target
// was refused before sending, the message cannot be signed): an attempt is
// a request that went out, so none is written and no counter moves, and
// the reason is kept on the delivery instead.
func testUnsent(t *testing.T, b Backend) {
	const down = `transport plugin "http" is not running: plugin binary not found`
	const unknown = `no such transport plugin "smtp" (loaded: http)`

	t.Run("a release with a reason spends nothing and keeps the reason on the delivery", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		got, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{
			DeliveryID: d.ID, Token: c.Token, Delay: 30 * time.Second, Reason: down, Now: f.now})
		if err != nil {
			t.Fatal(err)
		}
		wantState(t, got, storage.StatePending, 0, 0)
		if got.UnsentReason != down || !got.NextAttemptAt.Equal(f.at(30*time.Second)) || got.ClaimExpiresAt != nil || !f.tokenIs(d.ID, "") {
			t.Fatalf("released row = %+v, want pending, due in 30s, no claim, reason %q", got, down)
		}
		if read := f.get(d.ID); read.UnsentReason != down {
			t.Fatalf("DeliveryGet shows reason %q, want %q", read.UnsentReason, down)
		}
		if n := len(f.attempts(d.ID)); n != 0 {
			t.Fatalf("a release recorded %d attempts", n)
		}
		if claims := f.claim(f.store, f.at(29*time.Second), 10); len(claims) != 0 {
			t.Fatal("a released delivery was claimable before its backoff ran out")
		}
		f.claimOne(f.store, f.at(30*time.Second), d.ID)
	})

	t.Run("a release without a reason keeps the reason the delivery has", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		if _, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{DeliveryID: d.ID, Token: c.Token, Reason: down, Now: f.now}); err != nil {
			t.Fatal(err)
		}
		c = f.claimOne(f.store, f.now, d.ID)
		if c.Delivery.UnsentReason != down {
			t.Fatalf("the claim shows reason %q, want %q", c.Delivery.UnsentReason, down)
		}
		got, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{DeliveryID: d.ID, Token: c.Token, Now: f.now})
		if err != nil {
			t.Fatal(err)
		}
		if got.UnsentReason != down {
			t.Fatalf("a release without a reason left %q, want %q kept", got.UnsentReason, down)
		}
	})

	t.Run("the owner's next attempt clears the reason", func(t *testing.T) {
		t.Parallel()
		for _, outcome := range []storage.OutcomeKind{storage.OutcomeDelivered, storage.OutcomeRetryable, storage.OutcomePermanent} {
			f := newFixture(t, b)
			d := f.delivery()
			c := f.claimOne(f.store, f.now, d.ID)
			if _, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{DeliveryID: d.ID, Token: c.Token, Reason: down, Now: f.now}); err != nil {
				t.Fatal(err)
			}
			c = f.claimOne(f.store, f.now, d.ID)
			got, a := f.complete(f.store, c, outcome, f.at(time.Second), 5)
			if got.UnsentReason != "" || a.Number != 1 {
				t.Fatalf("after a %s attempt: reason %q, attempt %d; want the reason cleared and attempt 1", outcome, got.UnsentReason, a.Number)
			}
		}
	})

	t.Run("a late attempt leaves the owner's reason alone", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		stale := f.claimOne(f.store, f.now, d.ID)
		owner := f.claimOne(f.store, f.at(lease+time.Second), d.ID)
		released, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{
			DeliveryID: d.ID, Token: owner.Token, Delay: time.Minute, Reason: down, Now: f.at(lease + time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.AttemptRecordLate(f.ctx, lateParams(stale, storage.OutcomeDelivered, f.at(lease+2*time.Second))); err != nil {
			t.Fatal(err)
		}
		want := released
		want.Attempts = 1
		wantUnchanged(t, want, f.get(d.ID), "a late attempt (beyond attempts+1)")
	})

	t.Run("failing without a request writes no attempt, keeps the counters and shows the reason", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		// One real attempt first, so the counters are not zero.
		c := f.claimOne(f.store, f.now, d.ID)
		f.complete(f.store, c, storage.OutcomeRetryable, f.now, 5)
		c = f.claimOne(f.store, f.at(time.Minute), d.ID)
		got, err := f.store.DeliveryFail(f.ctx, storage.DeliveryFailParams{DeliveryID: d.ID, Token: c.Token, Reason: unknown, Now: f.at(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		wantState(t, got, storage.StateFailed, 1, 1)
		if got.UnsentReason != unknown || got.CompletedAt == nil || !got.CompletedAt.Equal(f.at(time.Minute)) ||
			got.ClaimExpiresAt != nil || got.Held || !f.tokenIs(d.ID, "") {
			t.Fatalf("failed row = %+v, want failed at +1m, no claim, reason %q", got, unknown)
		}
		if !sameDelivery(got, f.get(d.ID)) {
			t.Fatalf("DeliveryFail returned %+v, the store holds %+v", got, f.get(d.ID))
		}
		wantNumbers(t, f.attempts(d.ID))
		if n := len(f.attempts(d.ID)); n != 1 {
			t.Fatalf("%d attempts after failing without a request, want the 1 real one", n)
		}
		if claims := f.claim(f.store, f.at(time.Hour), 10); len(claims) != 0 {
			t.Fatal("a delivery failed without a request was claimed again")
		}
	})

	t.Run("replay of a delivery failed without a request clears the reason and grants a fresh cycle", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		if _, err := f.store.DeliveryFail(f.ctx, storage.DeliveryFailParams{DeliveryID: d.ID, Token: c.Token, Reason: unknown, Now: f.now}); err != nil {
			t.Fatal(err)
		}
		got, err := f.store.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: "ops", Now: f.at(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		wantState(t, got.Delivery, storage.StatePending, 0, 0)
		if got.UnsentReason != "" {
			t.Fatalf("replay left the reason %q", got.UnsentReason)
		}
		c = f.claimOne(f.store, f.at(time.Second), d.ID)
		_, a := f.complete(f.store, c, storage.OutcomeDelivered, f.at(2*time.Second), 5)
		if a.Number != 1 {
			t.Fatalf("the first request after the replay is attempt %d, want 1", a.Number)
		}

		// Bulk replay clears it too.
		f2 := newFixture(t, b)
		d2 := f2.delivery()
		c2 := f2.claimOne(f2.store, f2.now, d2.ID)
		if _, err := f2.store.DeliveryFail(f2.ctx, storage.DeliveryFailParams{DeliveryID: d2.ID, Token: c2.Token, Reason: unknown, Now: f2.now}); err != nil {
			t.Fatal(err)
		}
		if n, err := f2.store.DeliveryReplayMany(f2.ctx, storage.DeliveryReplayManyParams{
			Filter: storage.DeliveryFilter{State: storage.StateFailed}, Actor: "ops", Now: f2.at(time.Second)}); err != nil || n.Count != 1 {
			t.Fatalf("bulk replay: %d, %v", n.Count, err)
		}
		if got := f2.get(d2.ID); got.State != storage.StatePending || got.UnsentReason != "" {
			t.Fatalf("after bulk replay = %+v, want pending with no reason", got)
		}
	})

	t.Run("a superseded worker's release or failure without a request changes nothing", func(t *testing.T) {
		t.Parallel()
		for _, op := range []string{"release", "fail"} {
			f := newFixture(t, b)
			d := f.delivery()
			// The row carries a reason from an earlier claim, which the
			// stale worker must not overwrite either.
			c := f.claimOne(f.store, f.now, d.ID)
			if _, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{DeliveryID: d.ID, Token: c.Token, Reason: down, Now: f.now}); err != nil {
				t.Fatal(err)
			}
			stale := f.claimOne(f.store, f.now, d.ID)
			owner := f.claimOne(f.store, f.at(lease+time.Second), d.ID)
			var err error
			switch op {
			case "release":
				_, err = f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{
					DeliveryID: d.ID, Token: stale.Token, Delay: time.Hour, Reason: unknown, Now: f.at(lease + 2*time.Second)})
			case "fail":
				_, err = f.store.DeliveryFail(f.ctx, storage.DeliveryFailParams{
					DeliveryID: d.ID, Token: stale.Token, Reason: unknown, Now: f.at(lease + 2*time.Second)})
			}
			wantErr(t, err, storage.ErrClaimLost, "stale "+op)
			got := f.get(d.ID)
			wantUnchanged(t, owner.Delivery, got, "a stale "+op)
			if got.UnsentReason != down || got.Held != owner.Delivery.Held {
				t.Fatalf("a stale %s left reason %q held %v, want %q and %v", op, got.UnsentReason, got.Held, down, owner.Delivery.Held)
			}
			if !f.tokenIs(d.ID, owner.Token) {
				t.Fatalf("a stale %s replaced the owner's token", op)
			}
			if n := len(f.attempts(d.ID)); n != 0 {
				t.Fatalf("a stale %s recorded %d attempts", op, n)
			}
		}
	})

	t.Run("a finished claim cannot fail the delivery afterwards", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		done, _ := f.complete(f.store, c, storage.OutcomeDelivered, f.now, 5)
		_, err := f.store.DeliveryFail(f.ctx, storage.DeliveryFailParams{DeliveryID: d.ID, Token: c.Token, Reason: unknown, Now: f.at(time.Second)})
		wantErr(t, err, storage.ErrClaimLost, "failing a delivered delivery with its spent token")
		wantUnchanged(t, done, f.get(d.ID), "a failure under a spent token")
		_, err = f.store.DeliveryFail(f.ctx, storage.DeliveryFailParams{DeliveryID: "dlv_missing", Token: "x", Reason: unknown})
		wantErr(t, err, storage.ErrNotFound, "failing an unknown delivery")
	})

	t.Run("failing without a request needs a reason, and nothing is written without one", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		for _, p := range []storage.DeliveryFailParams{
			{DeliveryID: d.ID, Token: c.Token, Reason: " \t"},
			{DeliveryID: d.ID, Reason: unknown},
			{Token: c.Token, Reason: unknown},
		} {
			_, err := f.store.DeliveryFail(f.ctx, p)
			wantErr(t, err, storage.ErrInvalid, "DeliveryFail with a missing field")
		}
		wantUnchanged(t, c.Delivery, f.get(d.ID), "a refused DeliveryFail")
		if !f.tokenIs(d.ID, c.Token) {
			t.Fatal("a refused DeliveryFail touched the claim")
		}
	})

	t.Run("the reason is bounded text", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		long := strings.Repeat("é", storage.MaxErrorBytes) + "\x00\xff"
		c := f.claimOne(f.store, f.now, d.ID)
		got, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{DeliveryID: d.ID, Token: c.Token, Reason: long, Now: f.now})
		if err != nil {
			t.Fatal(err)
		}
		c = f.claimOne(f.store, f.now, d.ID)
		failed, err := f.store.DeliveryFail(f.ctx, storage.DeliveryFailParams{DeliveryID: d.ID, Token: c.Token, Reason: long, Now: f.now})
		if err != nil {
			t.Fatal(err)
		}
		for what, r := range map[string]string{"released": got.UnsentReason, "failed": failed.UnsentReason, "stored": f.get(d.ID).UnsentReason} {
			if len(r) == 0 || len(r) > storage.MaxErrorBytes || !utf8.ValidString(r) || strings.ContainsRune(r, 0) {
				t.Fatalf("%s reason is %d bytes (valid UTF-8 %v), want 1..%d bytes of valid text without NUL", what, len(r), utf8.ValidString(r), storage.MaxErrorBytes)
			}
		}
	})

	t.Run("failing the head of an ordered endpoint without a request lets the next delivery go", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint(func(e *storage.Endpoint) { e.Ordered = true })
		first := f.event("form_1").Deliveries[0]
		second := f.event("form_1").Deliveries[0]
		c := f.claimOne(f.store, f.now, first.ID)
		if _, err := f.store.DeliveryFail(f.ctx, storage.DeliveryFailParams{DeliveryID: first.ID, Token: c.Token, Reason: unknown, Now: f.now}); err != nil {
			t.Fatal(err)
		}
		f.claimOne(f.store, f.at(time.Second), second.ID)
	})

	t.Run("a release at an ordered endpoint keeps the delivery's place", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint(func(e *storage.Endpoint) { e.Ordered = true })
		first := f.event("form_1").Deliveries[0]
		f.event("form_1")
		c := f.claimOne(f.store, f.now, first.ID)
		if _, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{DeliveryID: first.ID, Token: c.Token, Delay: 10 * time.Second, Reason: down, Now: f.now}); err != nil {
			t.Fatal(err)
		}
		if claims := f.claim(f.store, f.at(5*time.Second), 10); len(claims) != 0 {
			t.Fatalf("claimed %v while the head waits out its backoff", claimIDs(claims))
		}
		f.claimOne(f.store, f.at(10*time.Second), first.ID)
	})
}

func testFence(t *testing.T, b Backend) {
	// Every outcome a superseded worker might report, each of which would
	// move the row differently if the fence let it through. The endpoint is
	// compared too: a delivered outcome would end its run of failures (so
	// one is under way), a failed one would start one (so none is).
	for _, outcome := range []storage.OutcomeKind{storage.OutcomeDelivered, storage.OutcomeRetryable, storage.OutcomePermanent} {
		t.Run("a stale holder reporting "+string(outcome)+" changes nothing of the owner's claim or the endpoint", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			d := f.delivery()
			stale := f.claimOne(f.store, f.now, d.ID)
			owner := f.claimOne(f.store, f.at(lease+time.Second), d.ID)
			ep := f.endpointOf(d)
			if outcome == storage.OutcomeDelivered {
				ep = f.setFailingSince(d.EndpointID, f.at(-time.Minute))
			}

			_, _, err := f.store.DeliveryComplete(f.ctx, completeParams(stale, outcome, f.at(lease+2*time.Second), 1))
			wantErr(t, err, storage.ErrClaimLost, "stale completion")
			wantUnchanged(t, owner.Delivery, f.get(d.ID), "a stale completion")
			wantEndpointUnchanged(t, ep, f.endpointOf(d), "a stale completion")
			if !f.tokenIs(d.ID, owner.Token) {
				t.Fatal("a stale completion cleared or replaced the owner's token")
			}
			if n := len(f.attempts(d.ID)); n != 0 {
				t.Fatalf("a refused completion recorded %d attempts", n)
			}
		})
	}

	t.Run("a stale holder records its request late: next number, attempts raised, nothing else", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		stale := f.claimOne(f.store, f.now, d.ID)
		owner := f.claimOne(f.store, f.at(lease+time.Second), d.ID)
		// A run of failures under way, which a delivered attempt of the
		// owner's would end and a late one must not.
		ep := f.setFailingSince(d.EndpointID, f.at(-time.Minute))

		a, err := f.store.AttemptRecordLate(f.ctx, lateParams(stale, storage.OutcomeDelivered, f.at(lease+2*time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		if a.Number != 1 || !a.Late || a.Outcome != storage.OutcomeDelivered || a.HTTPStatus != 200 {
			t.Fatalf("late attempt = %+v, want number 1, late, delivered, 200", a)
		}
		got := f.get(d.ID)
		want := owner.Delivery
		want.Attempts = 1
		wantUnchanged(t, want, got, "a late attempt (beyond attempts+1)")
		wantEndpointUnchanged(t, ep, f.endpointOf(d), "a late delivered attempt")
		if !f.tokenIs(d.ID, owner.Token) {
			t.Fatal("a late attempt touched the owner's token")
		}

		// The owner's own request takes the next number and spends the cycle.
		got, oa := f.complete(f.store, owner, storage.OutcomeRetryable, f.at(lease+3*time.Second), 0)
		if oa.Number != 2 || oa.Late {
			t.Fatalf("owner's attempt = %+v, want number 2, not late", oa)
		}
		wantState(t, got, storage.StatePending, 2, 1)
		wantNumbers(t, f.attempts(d.ID), 1)
	})

	t.Run("the current owner cannot record its own request as late", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		owner := f.claimOne(f.store, f.now, d.ID)
		_, err := f.store.AttemptRecordLate(f.ctx, lateParams(owner, storage.OutcomeRetryable, f.now))
		wantErr(t, err, storage.ErrClaimHeld, "late record under the current token")
		wantUnchanged(t, owner.Delivery, f.get(d.ID), "a refused late record")
		if n := len(f.attempts(d.ID)); n != 0 {
			t.Fatalf("a refused late record wrote %d attempts", n)
		}
		_, err = f.store.AttemptRecordLate(f.ctx, lateParams(storage.Claim{Delivery: storage.Delivery{ID: "dlv_missing"}, Token: "x"}, storage.OutcomeRetryable, f.now))
		wantErr(t, err, storage.ErrNotFound, "late record for unknown delivery")
	})

	t.Run("a late attempt on a terminal delivery is recorded and leaves it terminal", func(t *testing.T) {
		t.Parallel()
		for _, final := range []storage.OutcomeKind{storage.OutcomeDelivered, storage.OutcomePermanent} {
			f := newFixture(t, b)
			d := f.delivery()
			stale := f.claimOne(f.store, f.now, d.ID)
			owner := f.claimOne(f.store, f.at(lease+time.Second), d.ID)
			done, _ := f.complete(f.store, owner, final, f.at(lease+2*time.Second), 0)
			// Delivered ended the endpoint's run of failures; a late
			// failure must not start one.
			ep := f.endpointOf(d)

			a, err := f.store.AttemptRecordLate(f.ctx, lateParams(stale, storage.OutcomeRetryable, f.at(lease+3*time.Second)))
			if err != nil {
				t.Fatal(err)
			}
			if a.Number != 2 || !a.Late {
				t.Fatalf("late attempt after %s = %+v, want number 2, late", final, a)
			}
			want := done
			want.Attempts = 2
			wantUnchanged(t, want, f.get(d.ID), "a late attempt on a terminal row (beyond attempts+1)")
			wantEndpointUnchanged(t, ep, f.endpointOf(d), "a late attempt on a terminal row")
			wantNumbers(t, f.attempts(d.ID), 2)
			if claims := f.claim(f.store, f.at(time.Hour), 10); len(claims) != 0 {
				t.Fatal("a late attempt made a terminal delivery claimable")
			}
		}
	})

	t.Run("a late attempt does not move next_attempt_at of a pending delivery", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		stale := f.claimOne(f.store, f.now, d.ID)
		owner := f.claimOne(f.store, f.at(lease+time.Second), d.ID)
		pending, _ := f.complete(f.store, owner, storage.OutcomeRetryable, f.at(lease+2*time.Second), 0)
		ep := f.endpointOf(d)
		if _, err := f.store.AttemptRecordLate(f.ctx, lateParams(stale, storage.OutcomeRetryable, f.at(lease+3*time.Second))); err != nil {
			t.Fatal(err)
		}
		want := pending
		want.Attempts = 2
		wantUnchanged(t, want, f.get(d.ID), "a late attempt on a pending row (beyond attempts+1)")
		wantEndpointUnchanged(t, ep, f.endpointOf(d), "a late attempt on a pending row")
	})

	t.Run("a late attempt leaves a held delivery held and its disabled endpoint as it was", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		stale := f.claimOne(f.store, f.now, d.ID)
		owner := f.claimOne(f.store, f.at(lease+time.Second), d.ID)
		// The endpoint is disabled while the owner's request is out: its
		// retry is held, and its failure started the endpoint's run.
		f.setDisabled(f.endpointOf(d), true)
		held, _ := f.complete(f.store, owner, storage.OutcomeRetryable, f.at(lease+2*time.Second), 0)
		if held.State != storage.StatePending || !held.Held {
			t.Fatalf("the owner's retry of a disabled endpoint's delivery: %+v, want pending and held", held)
		}
		ep := f.endpointOf(d)
		if ep.DisabledAt == nil || ep.FailingSince == nil {
			t.Fatalf("endpoint = %+v, want disabled and failing", ep)
		}

		// Delivered, which from the owner would end the run.
		if _, err := f.store.AttemptRecordLate(f.ctx, lateParams(stale, storage.OutcomeDelivered, f.at(lease+3*time.Second))); err != nil {
			t.Fatal(err)
		}
		want := held
		want.Attempts = 2
		wantUnchanged(t, want, f.get(d.ID), "a late attempt on a held row (beyond attempts+1)")
		wantEndpointUnchanged(t, ep, f.endpointOf(d), "a late attempt on a held row")
		wantNumbers(t, f.attempts(d.ID), 2)
	})
}
