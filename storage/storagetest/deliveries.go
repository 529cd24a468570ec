package storagetest

import (
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func testQueries(t *testing.T, b Backend) {
	t.Run("list pages newest first through every delivery exactly once", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		f.endpoint()
		for range 7 {
			f.event("form_1")
		}
		seen := map[string]bool{}
		before := ""
		last := "~"
		for pages := 0; ; pages++ {
			page, err := f.store.DeliveryList(f.ctx, storage.DeliveryListParams{Before: before, Limit: 4})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			if pages > 10 {
				t.Fatal("pagination does not end")
			}
			for _, d := range page {
				if d.ID >= last {
					t.Fatalf("page order: %s after %s, want strictly descending ids", d.ID, last)
				}
				if seen[d.ID] {
					t.Fatalf("delivery %s listed twice", d.ID)
				}
				seen[d.ID] = true
				last = d.ID
			}
			before = page[len(page)-1].ID
		}
		if len(seen) != 14 {
			t.Fatalf("listed %d deliveries, want 14", len(seen))
		}
	})

	t.Run("list filters by state, endpoint, event, form and creation time", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		epA := f.endpoint()
		f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{"form_x"} })
		evX := f.event("form_x") // to A and B
		f.event("form_y")        // to A
		time.Sleep(5 * time.Millisecond)
		cut := time.Now().UTC()
		time.Sleep(5 * time.Millisecond)
		late := f.event("form_y") // to A
		// Claim all four; fail exactly one, the rest stay processing.
		var failedID string
		for _, c := range f.claim(f.store, f.now, 100) {
			if failedID == "" {
				failedID = c.Delivery.ID
				f.complete(f.store, c, storage.OutcomePermanent, f.now, 0)
			}
		}

		cases := map[string]struct {
			filter storage.DeliveryFilter
			want   int
		}{
			"everything":     {storage.DeliveryFilter{}, 4},
			"endpoint A":     {storage.DeliveryFilter{EndpointID: epA.ID}, 3},
			"event X":        {storage.DeliveryFilter{EventID: evX.Event.ID}, 2},
			"form y":         {storage.DeliveryFilter{FormID: "form_y"}, 2},
			"failed":         {storage.DeliveryFilter{State: storage.StateFailed}, 1},
			"pending":        {storage.DeliveryFilter{State: storage.StatePending}, 0},
			"after the cut":  {storage.DeliveryFilter{CreatedAfter: cut}, 1},
			"before the cut": {storage.DeliveryFilter{CreatedBefore: cut}, 3},
			"form y after":   {storage.DeliveryFilter{FormID: "form_y", CreatedAfter: cut, EndpointID: epA.ID}, 1},
		}
		for name, tc := range cases {
			got, err := f.store.DeliveryList(f.ctx, storage.DeliveryListParams{Filter: tc.filter})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(got) != tc.want {
				t.Errorf("filter %s: %d deliveries, want %d", name, len(got), tc.want)
			}
		}
		got, _ := f.store.DeliveryList(f.ctx, storage.DeliveryListParams{Filter: storage.DeliveryFilter{CreatedAfter: cut}})
		if len(got) == 1 && got[0].ID != late.Deliveries[0].ID {
			t.Errorf("created-after filter returned %s, want %s", got[0].ID, late.Deliveries[0].ID)
		}
	})

	t.Run("latest attempt of each delivery in one read, none for the untried", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		f.endpoint()
		res := f.event("form_1")
		tried, once, untried := res.Deliveries[0], res.Deliveries[1], f.event("form_1").Deliveries[0]
		for _, c := range f.claim(f.store, f.now, 10) {
			switch c.Delivery.ID {
			case tried.ID:
				f.complete(f.store, c, storage.OutcomeRetryable, f.now, 5)
			case once.ID:
				f.complete(f.store, c, storage.OutcomePermanent, f.now, 5)
			}
		}
		f.complete(f.store, f.claimOne(f.store, f.at(20*time.Second), tried.ID), storage.OutcomeDelivered, f.at(20*time.Second), 5)

		got, err := f.store.AttemptLatest(f.ctx, []string{tried.ID, once.ID, untried.ID, "dlv_missing"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Fatalf("AttemptLatest answered %d deliveries, want the 2 with attempts: %+v", len(got), got)
		}
		for id, want := range map[string]struct {
			number  int
			outcome storage.OutcomeKind
		}{tried.ID: {2, storage.OutcomeDelivered}, once.ID: {1, storage.OutcomePermanent}} {
			a, ok := got[id]
			if !ok || a.DeliveryID != id || a.Number != want.number || a.Outcome != want.outcome || a.Error != errorFor(want.outcome) {
				t.Errorf("latest attempt of %s = %+v (present %v), want number %d, %s", id, a, ok, want.number, want.outcome)
			}
		}
		if none, err := f.store.AttemptLatest(f.ctx, nil); err != nil || none == nil || len(none) != 0 {
			t.Errorf("AttemptLatest of no ids = %v, %v; want an empty map", none, err)
		}
	})

	t.Run("stats count every state and the due queue", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		ids := make([]string, 5)
		for i := range ids {
			ids[i] = f.event("form_1").Deliveries[0].ID
		}
		claims := f.claim(f.store, f.now, 3)
		f.complete(f.store, claims[0], storage.OutcomeDelivered, f.now, 0)
		f.complete(f.store, claims[1], storage.OutcomePermanent, f.now, 0)
		// claims[2] stays processing with its lease; two remain pending and due.
		st, err := f.store.DeliveryStats(f.ctx, f.now)
		if err != nil {
			t.Fatal(err)
		}
		want := map[storage.DeliveryState]int64{storage.StatePending: 2, storage.StateProcessing: 1, storage.StateDelivered: 1, storage.StateFailed: 1}
		for state, n := range want {
			if st.ByState[state] != n {
				t.Errorf("stats %s = %d, want %d", state, st.ByState[state], n)
			}
		}
		if st.Due != 2 {
			t.Errorf("due = %d, want 2", st.Due)
		}
		// Once the lease has expired the processing one is due too.
		st, _ = f.store.DeliveryStats(f.ctx, f.at(lease+time.Second))
		if st.Due != 3 {
			t.Errorf("due after lease expiry = %d, want 3", st.Due)
		}
	})

	t.Run("stats say since when the longest-waiting due delivery has been due", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		st, err := f.store.DeliveryStats(f.ctx, d.NextAttemptAt.Add(-time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if !st.OldestDue.IsZero() {
			t.Errorf("oldest due = %s before anything is due, want zero", st.OldestDue)
		}
		st, _ = f.store.DeliveryStats(f.ctx, f.at(time.Hour))
		if !st.OldestDue.Equal(d.NextAttemptAt) {
			t.Errorf("oldest due = %s, want the pending delivery's next attempt %s", st.OldestDue, d.NextAttemptAt)
		}
		c := f.claimOne(f.store, f.now, d.ID)
		// Claimed under a live lease, nothing is due.
		if st, _ = f.store.DeliveryStats(f.ctx, f.now); !st.OldestDue.IsZero() {
			t.Errorf("oldest due = %s under a live lease, want zero", st.OldestDue)
		}
		// A lease that ran out is due again since it ran out.
		if st, _ = f.store.DeliveryStats(f.ctx, f.at(lease+time.Minute)); !st.OldestDue.Equal(*c.Delivery.ClaimExpiresAt) {
			t.Errorf("oldest due = %s after the lease ran out, want its expiry %s", st.OldestDue, *c.Delivery.ClaimExpiresAt)
		}
	})
}
