package storagetest

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func testEndpoints(t *testing.T, b Backend) {
	t.Run("an endpoint round-trips every field, secrets included", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		exp := time.Now().UTC().Add(24 * time.Hour).Truncate(time.Millisecond)
		created := f.endpoint(func(e *storage.Endpoint) {
			e.URL = "https://example.com/a?b=c"
			e.Config = map[string]string{"header.x-team": "forms"}
			e.EventTypes = []string{"submission.received"}
			e.FormIDs = []string{"form_1", "form_2"}
			e.Description = "CRM sync"
			e.Secrets = []storage.Secret{storage.NewSecret("whsec_bmV3", nil), storage.NewSecret("whsec_b2xk", &exp)}
		})
		if created.ID == "" || created.CreatedAt.IsZero() || created.UpdatedAt.IsZero() {
			t.Fatalf("create did not fill id and timestamps: %+v", created)
		}
		got, err := f.store.EndpointGet(f.ctx, created.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.URL != created.URL || got.Transport != "http" || got.Config["header.x-team"] != "forms" ||
			len(got.EventTypes) != 1 || len(got.FormIDs) != 2 || got.FormIDs[1] != "form_2" || got.Description != "CRM sync" ||
			got.DisabledAt != nil || !got.CreatedAt.Equal(created.CreatedAt) {
			t.Fatalf("endpoint round trip:\ngot  %+v\nwant %+v", got, created)
		}
		if len(got.Secrets) != 2 || got.Secrets[0].Reveal() != "whsec_bmV3" || got.Secrets[0].ExpiresAt != nil ||
			got.Secrets[1].Reveal() != "whsec_b2xk" || got.Secrets[1].ExpiresAt == nil || !got.Secrets[1].ExpiresAt.Equal(exp) {
			t.Fatal("secrets did not round-trip")
		}
	})

	t.Run("update replaces the mutable fields, list sees it, unknown ids are not found", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		a := f.endpoint()
		bEp := f.endpoint()
		disabled := time.Now().UTC().Truncate(time.Millisecond)
		a.URL = "https://example.com/new"
		a.DisabledAt = &disabled
		a.EventTypes = nil
		a.Secrets = []storage.Secret{storage.NewSecret("whsec_cm90YXRlZA==", nil)}
		up, err := f.store.EndpointUpdate(f.ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if up.URL != a.URL || up.DisabledAt == nil || !up.DisabledAt.Equal(disabled) || up.Secrets[0].Reveal() != "whsec_cm90YXRlZA==" {
			t.Fatalf("update: %+v", up)
		}
		list, err := f.store.EndpointList(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{a.ID, bEp.ID}
		sort.Strings(ids)
		if len(list) != 2 || list[0].ID != ids[0] || list[1].ID != ids[1] {
			t.Fatalf("list = %d endpoints, want %v in id order", len(list), ids)
		}
		_, err = f.store.EndpointGet(f.ctx, "ep_missing")
		wantErr(t, err, storage.ErrNotFound, "get unknown endpoint")
		missing := a
		missing.ID = "ep_missing"
		_, err = f.store.EndpointUpdate(f.ctx, missing)
		wantErr(t, err, storage.ErrNotFound, "update unknown endpoint")
	})

	t.Run("an update based on a stale read is refused and changes nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		read := f.endpoint()
		other := f.db.Open(t)
		// Two writers, on two connections, both start from the same read.
		first, second := read, read
		first.Description = "first"
		second.Secrets = append(second.Secrets, storage.NewSecret("whsec_c2Vjb25k", nil))
		won, err := other.EndpointUpdate(f.ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		if !won.UpdatedAt.After(read.UpdatedAt) {
			t.Fatalf("updated_at did not move forward: %s then %s", read.UpdatedAt, won.UpdatedAt)
		}
		_, err = f.store.EndpointUpdate(f.ctx, second)
		wantErr(t, err, storage.ErrConflict, "update from a stale read")
		got, err := f.store.EndpointGet(f.ctx, read.ID)
		if err != nil || got.Description != "first" || len(got.Secrets) != 1 || !got.UpdatedAt.Equal(won.UpdatedAt) {
			t.Fatalf("after the refused update: %+v, %v", got, err)
		}
		// Reapplied on a fresh read it goes through; back to back, each
		// update is a new version.
		got.Secrets = second.Secrets
		again, err := f.store.EndpointUpdate(f.ctx, got)
		if err != nil || len(again.Secrets) != 2 {
			t.Fatalf("reapplied update: %+v, %v", again, err)
		}
		again.Description = "third"
		third, err := f.store.EndpointUpdate(f.ctx, again)
		if err != nil || !third.UpdatedAt.After(again.UpdatedAt) {
			t.Fatalf("back-to-back update: %+v, %v", third, err)
		}
		// A zero UpdatedAt overwrites unconditionally.
		blind := third
		blind.UpdatedAt = time.Time{}
		blind.Description = "blind"
		if _, err := f.store.EndpointUpdate(f.ctx, blind); err != nil {
			t.Fatalf("unconditional update: %v", err)
		}
	})

	t.Run("an endpoint without a transport or a secret is refused", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		_, err := f.store.EndpointCreate(f.ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http"}})
		wantErr(t, err, storage.ErrInvalid, "endpoint without secret")
		_, err = f.store.EndpointCreate(f.ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Secrets: []storage.Secret{storage.NewSecret("whsec_eA==", nil)}}})
		wantErr(t, err, storage.ErrInvalid, "endpoint without transport")
		if list, _ := f.store.EndpointList(f.ctx); len(list) != 0 {
			t.Fatalf("refused endpoints were written: %d", len(list))
		}
	})

	t.Run("a failing endpoint's last error is its newest shortfall among its newest deliveries; a healthy one has none", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		const down = "transport plugin is not running"
		on := func(form string) storage.Endpoint {
			return f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{form} })
		}
		one := func(form string) storage.Delivery {
			t.Helper()
			res := f.event(form)
			if len(res.Deliveries) != 1 {
				t.Fatalf("an event of %s made %d deliveries, want 1", form, len(res.Deliveries))
			}
			return res.Deliveries[0]
		}
		settle := func(d storage.Delivery, outcome storage.OutcomeKind, at time.Time) {
			t.Helper()
			f.complete(f.store, f.claimOne(f.store, at, d.ID), outcome, at, 5)
		}

		// Unsent: of two deliveries, the newer (by id) was released with
		// a reason and the older's attempt failed.
		unsent := on("form_unsent")
		one("form_unsent")
		one("form_unsent")
		pair := f.claim(f.store, f.now, 10)
		if len(pair) != 2 {
			t.Fatalf("claimed %d deliveries, want the 2 of form_unsent", len(pair))
		}
		if pair[0].Delivery.ID > pair[1].Delivery.ID {
			pair[0], pair[1] = pair[1], pair[0]
		}
		f.complete(f.store, pair[0], storage.OutcomeRetryable, f.now, 5)
		if _, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{DeliveryID: pair[1].Delivery.ID, Token: pair[1].Token,
			Delay: time.Hour, Reason: down, Now: f.now}); err != nil {
			t.Fatal(err)
		}

		// Tried: a permanent failure, then a delivery not tried yet (made
		// below), which has nothing to say.
		tried := on("form_tried")
		settle(one("form_tried"), storage.OutcomePermanent, f.at(2*time.Second))

		// Recovered: a failure, then a success, which ends the run.
		healthy := on("form_healthy")
		settle(one("form_healthy"), storage.OutcomeRetryable, f.at(3*time.Second))
		settle(one("form_healthy"), storage.OutcomeDelivered, f.at(4*time.Second))

		// Buried: a failure, then a window's worth of newer deliveries not
		// tried yet; the failure is outside the window.
		buried := on("form_buried")
		old := one("form_buried")
		settle(old, storage.OutcomeRetryable, f.at(5*time.Second))
		one("form_tried")
		for newer := 0; newer < storage.LastErrorWindow; {
			if one("form_buried").ID > old.ID {
				newer++
			}
		}

		for _, e := range []storage.Endpoint{unsent, tried, buried} {
			if e = f.endpointOf(storage.Delivery{EndpointID: e.ID}); e.FailingSince == nil {
				t.Fatalf("endpoint %s is not failing after a failed attempt", e.ID)
			}
		}
		if e := f.endpointOf(storage.Delivery{EndpointID: healthy.ID}); e.FailingSince != nil {
			t.Fatalf("endpoint %s is still failing after a delivery", e.ID)
		}
		got, err := f.store.EndpointLastErrors(f.ctx, []string{unsent.ID, tried.ID, healthy.ID, buried.ID, "ep_missing"})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{unsent.ID: down, tried.ID: errorFor(storage.OutcomePermanent)}
		if !maps.Equal(got, want) {
			t.Errorf("EndpointLastErrors = %v, want %v", got, want)
		}
		if none, err := f.store.EndpointLastErrors(f.ctx, nil); err != nil || none == nil || len(none) != 0 {
			t.Errorf("EndpointLastErrors of no ids = %v, %v; want an empty map", none, err)
		}
	})
}

// testEndpointDelete holds the rules of deleting an endpoint: nothing of
// its history goes, nothing new reaches it, and no open delivery of it ends
// without a state and a reason.
func testEndpointDelete(t *testing.T, b Backend) {
	t.Run("a deleted endpoint leaves lists and fan-out, keeps its history, and takes no change", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		gone, kept := f.endpoint(), f.endpoint()
		old := f.event("form_1")
		for _, c := range f.claim(f.store, f.now, 10) {
			f.complete(f.store, c, storage.OutcomeDelivered, f.at(time.Second), 0)
		}
		res, err := f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: gone.ID, Now: f.at(2 * time.Second)})
		if err != nil {
			t.Fatalf("delete of an endpoint with nothing open: %v", err)
		}
		if res.Pending != 0 || res.Processing != 0 || res.Endpoint.DeletedAt == nil || !res.Endpoint.DeletedAt.Equal(f.at(2*time.Second)) {
			t.Fatalf("delete result: pending %d processing %d deleted_at %v, want 0, 0, %s", res.Pending, res.Processing, res.Endpoint.DeletedAt, f.at(2*time.Second))
		}

		got, err := f.store.EndpointGet(f.ctx, gone.ID)
		if err != nil || got.DeletedAt == nil {
			t.Fatalf("a deleted endpoint reads back with deleted_at: got %v, %v", got.DeletedAt, err)
		}
		all, err := f.store.EndpointList(f.ctx)
		if err != nil || len(all) != 1 || all[0].ID != kept.ID {
			t.Fatalf("EndpointList after delete: %v, %v; want only %s", endpointIDs(all), err, kept.ID)
		}
		page, err := f.store.EndpointListPage(f.ctx, storage.EndpointListParams{})
		if err != nil || len(page) != 1 || page[0].ID != kept.ID {
			t.Fatalf("EndpointListPage after delete: %v, %v; want only %s", endpointIDs(page), err, kept.ID)
		}
		if next := f.event("form_1"); len(next.Deliveries) != 1 || next.Deliveries[0].EndpointID != kept.ID {
			t.Fatalf("an event after the delete fanned out to %v, want only %s", deliveryEndpoints(next.Deliveries), kept.ID)
		}
		_, err = f.store.EventCreate(f.ctx, storage.Event{Type: "hymical.endpoint.disabled", Payload: []byte(`{}`), EndpointID: gone.ID})
		wantErr(t, err, storage.ErrInvalid, "an event addressed to a deleted endpoint")

		for _, d := range old.Deliveries {
			if d.EndpointID != gone.ID {
				continue
			}
			if got := f.get(d.ID); got.State != storage.StateDelivered || len(f.attempts(d.ID)) != 1 {
				t.Fatalf("the deleted endpoint's delivery %s: state %s with %d attempts, want delivered with its 1 attempt", d.ID, got.State, len(f.attempts(d.ID)))
			}
			_, err := f.store.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: "test"})
			wantErr(t, err, storage.ErrDeleted, "replay of a deleted endpoint's delivery")
			if got := f.get(d.ID); got.State != storage.StateDelivered {
				t.Fatalf("a refused replay moved the delivery to %s", got.State)
			}
		}
		n, err := f.store.DeliveryReplayMany(f.ctx, storage.DeliveryReplayManyParams{
			Filter: storage.DeliveryFilter{State: storage.StateDelivered}, Actor: "test"})
		if err != nil || n.Count != 1 {
			t.Fatalf("bulk replay of delivered: %d, %v; want 1 (only the kept endpoint's)", n.Count, err)
		}

		_, err = f.store.EndpointUpdate(f.ctx, got)
		wantErr(t, err, storage.ErrDeleted, "an update of a deleted endpoint")
		_, err = f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: gone.ID, Force: true})
		wantErr(t, err, storage.ErrDeleted, "a second delete")
		_, err = f.store.EndpointCreate(f.ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{ID: gone.ID, Transport: "http", Secrets: got.Secrets}})
		wantErr(t, err, storage.ErrConflict, "a create reusing a deleted endpoint's id")
		_, err = f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: "ep_missing"})
		wantErr(t, err, storage.ErrNotFound, "a delete of an endpoint that never was")
	})

	t.Run("a delete conditional on what was read refuses an endpoint changed since", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		read := f.endpoint(withForms("form_a"))
		f.update(read, withForms("form_b")) // another writer, after the read
		_, err := f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: read.ID, UpdatedAt: read.UpdatedAt})
		wantErr(t, err, storage.ErrConflict, "a delete of an endpoint changed since it was read")
		now, err := f.store.EndpointGet(f.ctx, read.ID)
		if err != nil || now.DeletedAt != nil || !slices.Equal(now.FormIDs, []string{"form_b"}) {
			t.Fatalf("after the refused delete: %+v, %v; want it kept with the other writer's forms", now, err)
		}
		res, err := f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: now.ID, UpdatedAt: now.UpdatedAt})
		if err != nil || res.Endpoint.DeletedAt == nil {
			t.Fatalf("a delete of the endpoint as it is: %+v, %v; want it deleted", res, err)
		}
	})

	t.Run("open deliveries refuse a delete without force, and nothing changes", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint()
		pending := f.event("form_1").Deliveries[0]
		claimed := f.event("form_1").Deliveries[0]
		c := f.claim(f.store, f.now, 1)[0]
		if c.Delivery.ID != pending.ID && c.Delivery.ID != claimed.ID {
			t.Fatalf("claimed %s", c.Delivery.ID)
		}
		before := []storage.Delivery{f.get(pending.ID), f.get(claimed.ID)}
		res, err := f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: e.ID})
		wantErr(t, err, storage.ErrEndpointBusy, "a delete with open deliveries")
		if res.Pending != 1 || res.Processing != 1 {
			t.Fatalf("a refused delete counted %d pending and %d processing, want 1 and 1", res.Pending, res.Processing)
		}
		for _, d := range before {
			wantUnchanged(t, d, f.get(d.ID), "a refused delete")
		}
		if got, err := f.store.EndpointGet(f.ctx, e.ID); err != nil || got.DeletedAt != nil {
			t.Fatalf("a refused delete deleted the endpoint: %v, %v", got.DeletedAt, err)
		}
	})

	t.Run("a forced delete fails pending deliveries with a reason and fences processing ones, whose late outcome is still recorded", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint()
		ids := []string{f.event("form_1").Deliveries[0].ID, f.event("form_1").Deliveries[0].ID, f.event("form_1").Deliveries[0].ID}
		c := f.claim(f.store, f.now, 1)[0]
		// One pending delivery is held: a disabled endpoint's work must not
		// slip past the delete either.
		f.setDisabled(e, true)
		res, err := f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: e.ID, Force: true, Now: f.at(time.Second)})
		if err != nil {
			t.Fatalf("forced delete: %v", err)
		}
		if res.Pending != 2 || res.Processing != 1 {
			t.Fatalf("forced delete counted %d pending and %d processing, want 2 and 1", res.Pending, res.Processing)
		}
		for _, id := range ids {
			d := f.get(id)
			if d.State != storage.StateFailed || d.UnsentReason != storage.EndpointDeletedReason || d.Held ||
				d.ClaimExpiresAt != nil || d.CompletedAt == nil || !f.tokenIs(id, "") {
				t.Fatalf("delivery %s after a forced delete: %+v; want failed, the delete's reason, no claim, completed", id, d)
			}
		}
		// The worker that held the claim finishes its request afterwards.
		_, _, err = f.store.DeliveryComplete(f.ctx, completeParams(c, storage.OutcomeRetryable, f.at(2*time.Second), 0))
		wantErr(t, err, storage.ErrClaimLost, "the fenced worker's completion")
		if _, err := f.store.AttemptRecordLate(f.ctx, lateParams(c, storage.OutcomeRetryable, f.at(2*time.Second))); err != nil {
			t.Fatalf("the fenced worker's late attempt: %v", err)
		}
		d := f.get(c.Delivery.ID)
		wantState(t, d, storage.StateFailed, 1, 0)
		wantNumbers(t, f.attempts(d.ID), 1)
		if got := f.claim(f.store, f.at(time.Hour), 10); len(got) != 0 {
			t.Fatalf("a claim after the delete took %v", claimIDs(got))
		}
	})

	t.Run("a delete racing a claim of its endpoint's delivery on another connection leaves it failed, and the claim fenced", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		claimer, deleter := f.db.Open(t), f.db.Open(t)
		const rounds = 12
		claimedFirst := 0
		for round := range rounds {
			e := f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{fmt.Sprintf("form_%d", round)} })
			d := f.event(fmt.Sprintf("form_%d", round)).Deliveries[0]
			var (
				claims []storage.Claim
				res    storage.EndpointDeleteResult
				cerr   error
				derr   error
				wg     sync.WaitGroup
			)
			begin := make(chan struct{})
			wg.Go(func() {
				<-begin
				claims, cerr = claimer.DeliveryClaim(f.ctx, storage.DeliveryClaimParams{Limit: 10, Lease: lease, Now: f.now})
			})
			wg.Go(func() {
				<-begin
				res, derr = deleter.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: e.ID, Force: true})
			})
			close(begin)
			wg.Wait()
			if cerr != nil || derr != nil {
				t.Fatalf("round %d: claim %v, delete %v", round, cerr, derr)
			}
			if res.Pending+res.Processing != 1 {
				t.Fatalf("round %d: the delete found %d pending and %d processing, want the one delivery", round, res.Pending, res.Processing)
			}
			got := f.get(d.ID)
			if got.State != storage.StateFailed || got.UnsentReason != storage.EndpointDeletedReason {
				t.Fatalf("round %d: delivery is %s (%q), want failed by the delete", round, got.State, got.UnsentReason)
			}
			switch len(claims) {
			case 0:
				if res.Pending != 1 {
					t.Fatalf("round %d: nothing was claimed, yet the delete found it processing", round)
				}
			case 1:
				claimedFirst++
				if res.Processing != 1 {
					t.Fatalf("round %d: the claim took it, yet the delete found it pending", round)
				}
				_, _, err := claimer.DeliveryComplete(f.ctx, completeParams(claims[0], storage.OutcomeDelivered, f.at(time.Second), 0))
				wantErr(t, err, storage.ErrClaimLost, "the completion of a claim the delete fenced")
				if _, err := claimer.AttemptRecordLate(f.ctx, lateParams(claims[0], storage.OutcomeDelivered, f.at(time.Second))); err != nil {
					t.Fatalf("round %d: late attempt: %v", round, err)
				}
				if got := f.get(d.ID); got.State != storage.StateFailed || got.Attempts != 1 {
					t.Fatalf("round %d: after the late attempt: %s with %d attempts, want failed with 1", round, got.State, got.Attempts)
				}
			default:
				t.Fatalf("round %d: claimed %v", round, claimIDs(claims))
			}
		}
		t.Logf("%d of %d rounds claimed before the delete", claimedFirst, rounds)
	})

	t.Run("events racing a delete on other connections never leave an open delivery to the deleted endpoint", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		creators := []storage.Store{f.db.Open(t), f.db.Open(t), f.db.Open(t)}
		deleter := f.db.Open(t)
		const rounds, perCreator = 4, 30
		for round := range rounds {
			form := fmt.Sprintf("race_%d", round)
			e := f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{form} })
			var wg sync.WaitGroup
			errs := make(chan error, len(creators)*perCreator+1)
			begin := make(chan struct{})
			for _, s := range creators {
				for range perCreator {
					wg.Go(func() {
						<-begin
						sub := storage.NewID("sub")
						if _, err := s.EventCreate(f.ctx, storage.Event{Type: "submission.received", FormID: form,
							SubmissionID: sub, Payload: submissionPayload(sub, form)}); err != nil {
							errs <- err
						}
					})
				}
			}
			wg.Go(func() {
				<-begin
				// Let some creates go first, so the delete lands among them.
				time.Sleep(time.Duration(round) * time.Millisecond)
				if _, err := deleter.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: e.ID, Force: true}); err != nil {
					errs <- fmt.Errorf("delete: %w", err)
				}
			})
			close(begin)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("round %d: %v", round, err)
			}
			open := f.count(fmt.Sprintf(`SELECT count(*) FROM webhook_deliveries
				WHERE endpoint_id = '%s' AND state IN ('pending', 'processing')`, e.ID))
			if open != 0 {
				t.Fatalf("round %d: %d deliveries to the deleted endpoint are still open", round, open)
			}
			unexplained := f.count(fmt.Sprintf(`SELECT count(*) FROM webhook_deliveries
				WHERE endpoint_id = '%s' AND unsent_reason <> '%s'`, e.ID, storage.EndpointDeletedReason))
			if unexplained != 0 {
				t.Fatalf("round %d: %d deliveries to the deleted endpoint ended without the delete's reason", round, unexplained)
			}
		}
	})

	t.Run("endpoints page newest first, by id, leaving out the deleted", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		var ids []string
		for range 5 {
			ids = append(ids, f.endpoint().ID)
		}
		if _, err := f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: ids[2]}); err != nil {
			t.Fatal(err)
		}
		live := slices.Delete(slices.Clone(ids), 2, 3)
		slices.Sort(live)
		slices.Reverse(live)
		var got []string
		cursor := ""
		for range 10 {
			page, err := f.store.EndpointListPage(f.ctx, storage.EndpointListParams{Before: cursor, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > 2 {
				t.Fatalf("a page of 2 has %d", len(page))
			}
			got = append(got, endpointIDs(page)...)
			if len(page) < 2 {
				break
			}
			cursor = page[len(page)-1].ID
		}
		if !slices.Equal(got, live) {
			t.Fatalf("paged endpoints %v, want %v", got, live)
		}
	})
}

func endpointIDs(es []storage.Endpoint) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func deliveryEndpoints(ds []storage.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.EndpointID
	}
	return out
}
