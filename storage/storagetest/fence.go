package storagetest

import (
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func testFence(t *testing.T, b Backend) {
	// Every outcome a superseded worker might report, each of which would
	// move the row differently if the fence let it through.
	for _, outcome := range []storage.OutcomeKind{storage.OutcomeDelivered, storage.OutcomeRetryable, storage.OutcomePermanent} {
		t.Run("a stale holder reporting "+string(outcome)+" changes nothing of the owner's claim", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			d := f.delivery()
			stale := f.claimOne(f.store, f.now, d.ID)
			owner := f.claimOne(f.store, f.at(lease+time.Second), d.ID)

			_, _, err := f.store.DeliveryComplete(f.ctx, completeParams(stale, outcome, f.at(lease+2*time.Second), 1))
			wantErr(t, err, storage.ErrClaimLost, "stale completion")
			wantUnchanged(t, owner.Delivery, f.get(d.ID), "a stale completion")
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
		if _, err := f.store.AttemptRecordLate(f.ctx, lateParams(stale, storage.OutcomeRetryable, f.at(lease+3*time.Second))); err != nil {
			t.Fatal(err)
		}
		want := pending
		want.Attempts = 2
		wantUnchanged(t, want, f.get(d.ID), "a late attempt on a pending row (beyond attempts+1)")
	})
}
