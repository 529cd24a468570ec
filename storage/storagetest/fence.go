package storagetest

import (
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

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
