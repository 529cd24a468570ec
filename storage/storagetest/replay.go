package storagetest

import (
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func testReplay(t *testing.T, b Backend) {
	t.Run("replay puts a terminal delivery back, due now, with a fresh cycle and the audit record", func(t *testing.T) {
		t.Parallel()
		for _, final := range []storage.OutcomeKind{storage.OutcomeDelivered, storage.OutcomePermanent} {
			f := newFixture(t, b)
			d := f.delivery()
			done, _ := f.complete(f.store, f.claimOne(f.store, f.now, d.ID), final, f.now, 0)
			at := f.at(time.Hour)
			got, err := f.store.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: "operator:alice", Now: at})
			if err != nil {
				t.Fatal(err)
			}
			wantState(t, got.Delivery, storage.StatePending, 1, 0)
			if !got.NextAttemptAt.Equal(at) || got.CompletedAt != nil || got.ClaimExpiresAt != nil || !f.tokenIs(d.ID, "") {
				t.Fatalf("replayed row = %+v", got)
			}
			rs, err := f.store.ReplayList(f.ctx, d.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 1 || rs[0].Actor != "operator:alice" || rs[0].PreviousState != done.State || !rs[0].ReplayedAt.Equal(at) || rs[0].DeliveryID != d.ID {
				t.Fatalf("replay audit = %+v, want one record by operator:alice from %s at %s", rs, done.State, at)
			}
			f.claimOne(f.store, at, d.ID)
		}
	})

	t.Run("a replay grants a whole fresh allowance and attempt numbers keep rising", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		const allowance = 2
		now := f.now
		fail := func(wantState storage.DeliveryState) {
			t.Helper()
			got, _ := f.complete(f.store, f.claimOne(f.store, now, d.ID), storage.OutcomeRetryable, now, allowance)
			if got.State != wantState {
				t.Fatalf("after a retryable failure: state %s, want %s (attempts %d, cycle %d)", got.State, wantState, got.Attempts, got.CycleAttempts)
			}
			now = now.Add(time.Minute)
		}
		fail(storage.StatePending)
		fail(storage.StateFailed)
		for round := 1; round <= 2; round++ {
			if _, err := f.store.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: "ops", Now: now}); err != nil {
				t.Fatal(err)
			}
			fail(storage.StatePending)
			fail(storage.StateFailed)
		}
		wantState(t, f.get(d.ID), storage.StateFailed, 6, 2)
		wantNumbers(t, f.attempts(d.ID))
		if rs, _ := f.store.ReplayList(f.ctx, d.ID); len(rs) != 2 {
			t.Fatalf("replay audit has %d records, want 2", len(rs))
		}
	})

	t.Run("pending and processing deliveries cannot be replayed", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		pending := f.get(d.ID)
		_, err := f.store.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: "ops", Now: f.now})
		wantErr(t, err, storage.ErrNotTerminal, "replay of pending")
		wantUnchanged(t, pending, f.get(d.ID), "a refused replay of a pending delivery")

		c := f.claimOne(f.store, f.now, d.ID)
		_, err = f.store.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: "ops", Now: f.now})
		wantErr(t, err, storage.ErrNotTerminal, "replay of processing")
		wantUnchanged(t, c.Delivery, f.get(d.ID), "a refused replay of a processing delivery")
		if !f.tokenIs(d.ID, c.Token) {
			t.Fatal("a refused replay touched the claim token")
		}
		if rs, _ := f.store.ReplayList(f.ctx, d.ID); len(rs) != 0 {
			t.Fatalf("refused replays wrote %d audit records", len(rs))
		}

		_, err = f.store.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: "dlv_missing", Actor: "ops"})
		wantErr(t, err, storage.ErrNotFound, "replay of unknown delivery")
		_, err = f.store.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: " "})
		wantErr(t, err, storage.ErrInvalid, "replay without an actor")
	})

	t.Run("bulk replay moves only terminal deliveries matching the filter", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		epA := f.endpoint()
		epB := f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{"form_b"} })
		// form_b events reach both endpoints; form_1 events reach only A.
		var failedA, failedB, deliveredA []string
		for range 3 {
			f.event("form_b")
		}
		f.event("form_1")
		for _, c := range f.claim(f.store, f.now, 100) {
			outcome := storage.OutcomePermanent
			if c.Event.FormID == "form_1" {
				outcome = storage.OutcomeDelivered
			}
			d, _ := f.complete(f.store, c, outcome, f.now, 0)
			switch {
			case d.State == storage.StateDelivered:
				deliveredA = append(deliveredA, d.ID)
			case d.EndpointID == epA.ID:
				failedA = append(failedA, d.ID)
			case d.EndpointID == epB.ID:
				failedB = append(failedB, d.ID)
			}
		}
		if len(failedA) != 3 || len(failedB) != 3 || len(deliveredA) != 1 {
			t.Fatalf("fixture: failedA=%d failedB=%d deliveredA=%d", len(failedA), len(failedB), len(deliveredA))
		}
		stillPending := f.event("form_1").Deliveries[0].ID

		n, err := f.store.DeliveryReplayMany(f.ctx, storage.DeliveryReplayManyParams{
			Filter: storage.DeliveryFilter{State: storage.StateFailed, EndpointID: epA.ID}, Actor: "ops", Now: f.at(time.Minute)})
		if err != nil || n.Count != 3 {
			t.Fatalf("bulk replay = %d, %v; want 3", n.Count, err)
		}
		for _, id := range failedA {
			wantState(t, f.get(id), storage.StatePending, 1, 0)
		}
		for _, id := range failedB {
			wantState(t, f.get(id), storage.StateFailed, 1, 1)
		}
		wantState(t, f.get(deliveredA[0]), storage.StateDelivered, 1, 1)
		wantState(t, f.get(stillPending), storage.StatePending, 0, 0)

		n, err = f.store.DeliveryReplayMany(f.ctx, storage.DeliveryReplayManyParams{
			Filter: storage.DeliveryFilter{State: storage.StateFailed, FormID: "form_b"}, Actor: "ops", Limit: 2, Now: f.at(time.Minute)})
		if err != nil || n.Count != 2 {
			t.Fatalf("bulk replay with limit 2 = %d, %v; want 2", n.Count, err)
		}
		if got := f.count("SELECT count(*) FROM webhook_delivery_replays"); got != 5 {
			t.Fatalf("replay audit records = %d, want 5", got)
		}

		for _, bad := range []storage.DeliveryReplayManyParams{
			{Filter: storage.DeliveryFilter{State: storage.StatePending}, Actor: "ops"},
			{Filter: storage.DeliveryFilter{}, Actor: "ops"},
			{Filter: storage.DeliveryFilter{State: storage.StateFailed}},
		} {
			_, err := f.store.DeliveryReplayMany(f.ctx, bad)
			wantErr(t, err, storage.ErrInvalid, "bulk replay with bad parameters")
		}
	})
}
