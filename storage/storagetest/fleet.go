package storagetest

import (
	"errors"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func testPrune(t *testing.T, b Backend) {
	t.Run("only delivered deliveries completed before the cutoff go, with their attempts, replays and orphaned events", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		f.endpoint()
		old, mixed, recent := f.event("form_1"), f.event("form_1"), f.event("form_1")
		for _, res := range []storage.EventCreateResult{old, mixed, recent} {
			if len(res.Deliveries) != 2 {
				t.Fatalf("fanned out to %d endpoints, want 2", len(res.Deliveries))
			}
		}
		byID := map[string]storage.Claim{}
		for _, c := range f.claim(f.store, f.now, 6) {
			byID[c.Delivery.ID] = c
		}
		if len(byID) != 6 {
			t.Fatalf("claimed %d, want the 6 of the first three events", len(byID))
		}
		end := func(d storage.Delivery, outcome storage.OutcomeKind, at time.Time) {
			f.complete(f.store, byID[d.ID], outcome, at, 0)
		}
		end(old.Deliveries[0], storage.OutcomeDelivered, f.now)
		end(old.Deliveries[1], storage.OutcomeDelivered, f.now)
		end(mixed.Deliveries[0], storage.OutcomeDelivered, f.now)
		end(mixed.Deliveries[1], storage.OutcomePermanent, f.now)
		end(recent.Deliveries[0], storage.OutcomeDelivered, f.at(2*time.Hour))
		end(recent.Deliveries[1], storage.OutcomeDelivered, f.at(2*time.Hour))
		// A replayed delivery has an audit record that must go with it.
		if _, err := f.store.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: old.Deliveries[0].ID, Actor: "op", Now: f.at(time.Second)}); err != nil {
			t.Fatal(err)
		}
		again := f.claimOne(f.store, f.at(2*time.Second), old.Deliveries[0].ID)
		f.complete(f.store, again, storage.OutcomeDelivered, f.at(3*time.Second), 0)
		pending := f.event("form_1") // never claimed

		n, err := f.store.DeliveryPrune(f.ctx, storage.DeliveryPruneParams{CompletedBefore: f.at(time.Hour)})
		if err != nil || n != 3 {
			t.Fatalf("prune = %d, %v; want the 3 delivered before the cutoff", n, err)
		}
		for _, d := range []storage.Delivery{old.Deliveries[0], old.Deliveries[1], mixed.Deliveries[0]} {
			if _, err := f.store.DeliveryGet(f.ctx, d.ID); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("pruned delivery %s: DeliveryGet err = %v, want ErrNotFound", d.ID, err)
			}
		}
		for _, d := range []storage.Delivery{mixed.Deliveries[1], recent.Deliveries[0], recent.Deliveries[1], pending.Deliveries[0], pending.Deliveries[1]} {
			f.get(d.ID) // fails the test if it is gone
		}
		if _, err := f.store.EventGet(f.ctx, old.Event.ID); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("event with no delivery left: EventGet err = %v, want ErrNotFound", err)
		}
		for _, ev := range []storage.Event{mixed.Event, recent.Event, pending.Event} {
			if _, err := f.store.EventGet(f.ctx, ev.ID); err != nil {
				t.Fatalf("event %s still has deliveries but: %v", ev.ID, err)
			}
		}
		if got := f.count("SELECT count(*) FROM webhook_delivery_attempts"); got != 3 {
			t.Fatalf("%d attempts left, want the 3 of the kept, completed deliveries", got)
		}
		if got := f.count("SELECT count(*) FROM webhook_delivery_replays"); got != 0 {
			t.Fatalf("%d replay records left, want 0", got)
		}
	})

	t.Run("the limit bounds one call and a bad cutoff is refused", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		for range 3 {
			f.event("form_1")
		}
		for _, c := range f.claim(f.store, f.now, 3) {
			f.complete(f.store, c, storage.OutcomeDelivered, f.now, 0)
		}
		for i, want := range []int{2, 1, 0} {
			n, err := f.store.DeliveryPrune(f.ctx, storage.DeliveryPruneParams{CompletedBefore: f.at(time.Minute), Limit: 2})
			if err != nil || n != want {
				t.Fatalf("call %d: prune = %d, %v; want %d", i+1, n, err, want)
			}
		}
		if _, err := f.store.DeliveryPrune(f.ctx, storage.DeliveryPruneParams{}); !errors.Is(err, storage.ErrInvalid) {
			t.Fatalf("prune without a cutoff: err = %v, want ErrInvalid", err)
		}
	})
}

func testWorkers(t *testing.T, b Backend) {
	t.Run("workers register, heartbeat, list by liveness and deregister", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		t0 := time.Now().UTC().Truncate(time.Millisecond)
		w := storage.Worker{ID: "w1", Build: "v1", SchemaVersion: 4, Host: "h1", StartedAt: t0, HeartbeatAt: t0}
		if err := f.store.WorkerHeartbeat(f.ctx, w); err != nil {
			t.Fatal(err)
		}
		old := storage.Worker{ID: "w2", Build: "v0", SchemaVersion: 3, Host: "h2", StartedAt: t0.Add(-time.Hour), HeartbeatAt: t0.Add(-time.Hour)}
		if err := f.store.WorkerHeartbeat(f.ctx, old); err != nil {
			t.Fatal(err)
		}
		w.HeartbeatAt = t0.Add(time.Minute)
		if err := f.store.WorkerHeartbeat(f.ctx, w); err != nil {
			t.Fatal(err)
		}
		live, err := f.store.WorkerList(f.ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		if len(live) != 1 || live[0].ID != "w1" || live[0].Build != "v1" || live[0].SchemaVersion != 4 || !live[0].HeartbeatAt.Equal(t0.Add(time.Minute)) || !live[0].StartedAt.Equal(t0) {
			t.Fatalf("live workers = %+v", live)
		}
		all, _ := f.store.WorkerList(f.ctx, time.Time{})
		if len(all) != 2 {
			t.Fatalf("all workers = %d, want 2", len(all))
		}
		if err := f.store.WorkerDeregister(f.ctx, "w1"); err != nil {
			t.Fatal(err)
		}
		if live, _ := f.store.WorkerList(f.ctx, t0); len(live) != 0 {
			t.Fatalf("deregistered worker still listed: %+v", live)
		}
	})
}
