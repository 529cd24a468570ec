package storagetest

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// The per-endpoint controls: pausing (disabled endpoints hold their
// deliveries), rate and in-flight limits shared by every Store on one
// database, FIFO ordering, the failing-since clock and addressed events.
func testControls(t *testing.T, b Backend) {
	t.Run("the controls round-trip and FailingSince is the store's to keep", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		off := f.now.Add(-time.Hour)
		e := f.endpoint(func(e *storage.Endpoint) {
			e.RateLimit, e.RateBurst, e.MaxInFlight, e.Ordered = 2.5, 4, 3, true
			e.RetrySchedule = []time.Duration{time.Second, 90 * time.Second, time.Hour}
			e.DisabledAt = &off
		})
		if e.RateLimit != 2.5 || e.RateBurst != 4 || e.MaxInFlight != 3 || !e.Ordered ||
			!slices.Equal(e.RetrySchedule, []time.Duration{time.Second, 90 * time.Second, time.Hour}) {
			t.Fatalf("created endpoint controls = rate %v burst %d in-flight %d ordered %v schedule %v",
				e.RateLimit, e.RateBurst, e.MaxInFlight, e.Ordered, e.RetrySchedule)
		}
		if e.DisabledReason != storage.DisabledByOperator {
			t.Fatalf("disabled without a reason: reason %q, want %q", e.DisabledReason, storage.DisabledByOperator)
		}
		got, err := f.store.EndpointGet(f.ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.RateLimit != e.RateLimit || got.Ordered != e.Ordered || !slices.Equal(got.RetrySchedule, e.RetrySchedule) ||
			got.DisabledReason != e.DisabledReason || got.FailingSince != nil {
			t.Fatalf("read back %+v, want %+v", got, e)
		}
		got.DisabledReason = storage.DisabledGone
		got.RetrySchedule = nil
		got.RateLimit, got.RateBurst, got.MaxInFlight, got.Ordered = 0, 0, 0, false
		since := f.now
		got.FailingSince = &since
		up, err := f.store.EndpointUpdate(f.ctx, got)
		if err != nil {
			t.Fatal(err)
		}
		if up.DisabledReason != storage.DisabledGone || up.RetrySchedule != nil || up.Limited() || up.Ordered {
			t.Fatalf("updated endpoint = %+v", up)
		}
		if up.FailingSince != nil {
			t.Fatalf("EndpointUpdate wrote FailingSince %v; only completions may", up.FailingSince)
		}
		up.DisabledAt = nil
		if up, err = f.store.EndpointUpdate(f.ctx, up); err != nil {
			t.Fatal(err)
		}
		if up.DisabledReason != "" {
			t.Fatalf("enabled endpoint keeps reason %q", up.DisabledReason)
		}
		for _, bad := range []func(*storage.Endpoint){
			func(e *storage.Endpoint) { e.RateLimit = -1 },
			func(e *storage.Endpoint) { e.RateBurst = 3 },
			func(e *storage.Endpoint) { e.MaxInFlight = -2 },
			func(e *storage.Endpoint) { e.RetrySchedule = []time.Duration{time.Second, 0} },
			func(e *storage.Endpoint) { e.DisabledAt = &off; e.DisabledReason = "bored" },
		} {
			e := storage.Endpoint{Transport: "http", URL: "https://receiver.example/hook",
				Secrets: []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)}}
			bad(&e)
			_, err := f.store.EndpointCreate(f.ctx, storage.EndpointCreateParams{Endpoint: e})
			wantErr(t, err, storage.ErrInvalid, "creating an endpoint with bad controls")
		}
	})

	t.Run("a disabled endpoint holds its deliveries, new, retried and released, until it is enabled", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint()
		f.event("form_1")
		f.event("form_1")
		claims := f.claim(f.store, f.now, 10)
		if len(claims) != 2 {
			t.Fatalf("claimed %v, want both deliveries", claimIDs(claims))
		}
		c := claims[0]
		second := claims[1].Delivery
		e = f.setDisabled(e, true)
		// The retry of an attempt that was out when it was disabled is held.
		d, _ := f.complete(f.store, c, storage.OutcomeRetryable, f.at(time.Second), 5)
		if d.State != storage.StatePending || !d.Held {
			t.Fatalf("retry on a disabled endpoint: state %s held %v, want pending and held", d.State, d.Held)
		}
		// So is a claim given back.
		rd, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{DeliveryID: second.ID, Token: claims[1].Token, Now: f.at(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if !rd.Held {
			t.Fatal("a delivery released on a disabled endpoint is not held")
		}
		third := f.event("form_1").Deliveries[0]
		if !third.Held {
			t.Fatal("a new delivery to a disabled endpoint is not held")
		}
		if got := f.claim(f.store, f.at(time.Hour), 10); len(got) != 0 {
			t.Fatalf("claimed %v from a disabled endpoint", claimIDs(got))
		}
		st, err := f.store.DeliveryStats(f.ctx, f.at(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if st.Held != 3 || st.Due != 0 || st.ByState[storage.StatePending] != 3 {
			t.Fatalf("stats while disabled = %+v, want 3 pending, 3 held, none due", st)
		}
		f.setDisabled(e, false)
		got := f.claim(f.store, f.at(time.Hour), 10)
		if len(got) != 3 {
			t.Fatalf("after enabling claimed %v, want all three", claimIDs(got))
		}
		for _, c := range got {
			if c.Delivery.Attempts > 1 {
				t.Fatalf("holding spent attempts: %+v", c.Delivery)
			}
		}
	})

	t.Run("a lease that expires on a disabled endpoint puts the delivery back held", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		e, err := f.store.EndpointGet(f.ctx, d.EndpointID)
		if err != nil {
			t.Fatal(err)
		}
		f.claimOne(f.store, f.now, d.ID)
		f.setDisabled(e, true)
		if got := f.claim(f.store, f.at(lease+time.Second), 10); len(got) != 0 {
			t.Fatalf("reclaimed %v from a disabled endpoint", claimIDs(got))
		}
		got := f.get(d.ID)
		if got.State != storage.StatePending || !got.Held || got.Attempts != 0 || !f.tokenIs(d.ID, "") {
			t.Fatalf("expired claim of a disabled endpoint = %+v, want pending, held, no attempt, no token", got)
		}
	})

	t.Run("a rate limit defers what it cannot admit, spending no attempt", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint(func(e *storage.Endpoint) { e.RateLimit, e.RateBurst = 1, 2 })
		for range 5 {
			f.event("form_1")
		}
		first := f.claim(f.store, f.now, 10)
		if len(first) != 2 {
			t.Fatalf("burst of 2 admitted %d", len(first))
		}
		if got := f.claim(f.store, f.now, 10); len(got) != 0 {
			t.Fatalf("admitted %d more in the same instant", len(got))
		}
		ds, err := f.store.DeliveryList(f.ctx, storage.DeliveryListParams{Filter: storage.DeliveryFilter{State: storage.StatePending}})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 3 {
			t.Fatalf("%d pending after the burst, want 3 deferred", len(ds))
		}
		for _, d := range ds {
			if d.Attempts != 0 || d.CycleAttempts != 0 || !d.NextAttemptAt.After(f.now) || !f.tokenIs(d.ID, "") {
				t.Fatalf("deferred delivery = %+v, want no attempt, no token, due after %s", d, f.now)
			}
		}
		if got := f.claim(f.store, f.at(1100*time.Millisecond), 10); len(got) != 1 {
			t.Fatalf("a second later admitted %d, want 1", len(got))
		}
	})

	t.Run("an in-flight cap defers claims until sends finish", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint(func(e *storage.Endpoint) { e.MaxInFlight = 2 })
		for range 4 {
			f.event("form_1")
		}
		out := f.claim(f.store, f.now, 10)
		if len(out) != 2 {
			t.Fatalf("cap 2 admitted %d", len(out))
		}
		if got := f.claim(f.store, f.at(time.Second), 10); len(got) != 0 {
			t.Fatalf("admitted %d while 2 were in flight", len(got))
		}
		f.complete(f.store, out[0], storage.OutcomeDelivered, f.at(time.Second), 5)
		if got := f.claim(f.store, f.at(2*time.Second), 10); len(got) != 1 {
			t.Fatalf("after one send finished admitted %d, want 1", len(got))
		}
		// An expired lease no longer counts as a send under way: of the two
		// expired and the one deferred, the cap admits two.
		if got := f.claim(f.store, f.at(lease+3*time.Second), 10); len(got) != 2 {
			t.Fatalf("after the leases ran out claimed %d, want 2: the cap must not count dead sends", len(got))
		}
	})

	t.Run("an ordered endpoint sends one delivery at a time in queue order, a retry keeping its place", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint(func(e *storage.Endpoint) { e.Ordered = true })
		var ids []string
		for i := range 3 {
			d := f.event("form_1").Deliveries[0]
			if d.Held != (i > 0) {
				t.Fatalf("delivery %d held = %v, want only the first unheld", i, d.Held)
			}
			ids = append(ids, d.ID)
		}
		c := f.claimOne(f.store, f.now, ids[0])
		f.complete(f.store, c, storage.OutcomeRetryable, f.at(time.Second), 5)
		if got := f.claim(f.store, f.at(2*time.Second), 10); len(got) != 0 {
			t.Fatalf("claimed %v while the head waits for its retry", claimIDs(got))
		}
		c = f.claimOne(f.store, f.at(time.Minute), ids[0])
		f.complete(f.store, c, storage.OutcomeDelivered, f.at(time.Minute), 5)
		c = f.claimOne(f.store, f.at(time.Minute), ids[1])
		// Replaying the delivered head while the second is out: it waits,
		// and goes next, being the older.
		if _, err := f.store.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: ids[0], Actor: "test", Now: f.at(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if d := f.get(ids[0]); !d.Held {
			t.Fatal("a replay to an ordered endpoint with a send under way is not held")
		}
		if got := f.claim(f.store, f.at(time.Minute+10*time.Second), 10); len(got) != 0 {
			t.Fatalf("claimed %v while %s is out", claimIDs(got), ids[1])
		}
		f.complete(f.store, c, storage.OutcomePermanent, f.at(time.Minute+20*time.Second), 5)
		c = f.claimOne(f.store, f.at(2*time.Minute), ids[0])
		f.complete(f.store, c, storage.OutcomeDelivered, f.at(2*time.Minute), 5)
		f.claimOne(f.store, f.at(2*time.Minute), ids[2])
	})

	t.Run("an ordered endpoint disabled and enabled again goes on with its oldest delivery", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint(func(e *storage.Endpoint) { e.Ordered = true })
		var ids []string
		for range 3 {
			ids = append(ids, f.event("form_1").Deliveries[0].ID)
		}
		c := f.claimOne(f.store, f.now, ids[0])
		f.complete(f.store, c, storage.OutcomeRetryable, f.at(time.Second), 5)
		e = f.setDisabled(e, true)
		if got := f.claim(f.store, f.at(time.Hour), 10); len(got) != 0 {
			t.Fatalf("claimed %v from a disabled ordered endpoint", claimIDs(got))
		}
		f.setDisabled(e, false)
		f.claimOne(f.store, f.at(time.Hour), ids[0])
		if n := f.count("SELECT count(*) FROM webhook_deliveries WHERE held"); n != 2 {
			t.Fatalf("%d held behind the head after enabling, want 2", n)
		}
	})

	t.Run("turning ordering on holds all but the head, turning it off releases them", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint()
		for range 3 {
			f.event("form_1")
		}
		e.Ordered = true
		e, err := f.store.EndpointUpdate(f.ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if n := f.count("SELECT count(*) FROM webhook_deliveries WHERE held"); n != 2 {
			t.Fatalf("%d held after turning ordering on, want 2", n)
		}
		if got := f.claim(f.store, f.now, 10); len(got) != 1 {
			t.Fatalf("claimed %d from an ordered endpoint, want 1", len(got))
		}
		e.Ordered = false
		if _, err := f.store.EndpointUpdate(f.ctx, e); err != nil {
			t.Fatal(err)
		}
		if got := f.claim(f.store, f.now, 10); len(got) != 2 {
			t.Fatalf("claimed %d after turning ordering off, want the 2 held", len(got))
		}
	})

	t.Run("FailingSince starts at the first failure and ends at a delivery", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint()
		f.event("form_1")
		f.event("form_1")
		claims := f.claim(f.store, f.now, 10)
		f.complete(f.store, claims[0], storage.OutcomeRetryable, f.at(time.Second), 5)
		f.complete(f.store, claims[1], storage.OutcomePermanent, f.at(2*time.Second), 5)
		got, err := f.store.EndpointGet(f.ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.FailingSince == nil || !got.FailingSince.Equal(f.at(time.Second)) {
			t.Fatalf("FailingSince = %v, want the first failure at %s", got.FailingSince, f.at(time.Second))
		}
		c := f.claimOne(f.store, f.at(time.Minute), claims[0].Delivery.ID)
		f.complete(f.store, c, storage.OutcomeDelivered, f.at(time.Minute), 5)
		if got, err = f.store.EndpointGet(f.ctx, e.ID); err != nil {
			t.Fatal(err)
		}
		if got.FailingSince != nil {
			t.Fatalf("FailingSince = %v after a delivery, want none", got.FailingSince)
		}
		// Operator updates neither reset nor set it, nor does it move updated_at.
		if !got.UpdatedAt.Equal(e.UpdatedAt) {
			t.Fatalf("keeping FailingSince moved updated_at from %s to %s", e.UpdatedAt, got.UpdatedAt)
		}
		// Enabling an endpoint that was disabled for failing starts the
		// clock again, or the health check would disable it at once.
		f.event("form_1")
		c = f.claim(f.store, f.at(2*time.Minute), 10)[0]
		f.complete(f.store, c, storage.OutcomeRetryable, f.at(2*time.Minute), 5)
		if got, err = f.store.EndpointGet(f.ctx, e.ID); err != nil || got.FailingSince == nil {
			t.Fatalf("after another failure FailingSince = %v, %v", got.FailingSince, err)
		}
		got.Description = "renamed"
		if got, err = f.store.EndpointUpdate(f.ctx, got); err != nil || got.FailingSince == nil {
			t.Fatalf("an operator's edit cleared FailingSince: %v, %v", got.FailingSince, err)
		}
		f.setDisabled(e, true)
		if got = f.setDisabled(e, false); got.FailingSince != nil {
			t.Fatalf("FailingSince = %v after enabling, want none", got.FailingSince)
		}
		if got, err = f.store.EndpointGet(f.ctx, e.ID); err != nil || got.FailingSince != nil {
			t.Fatalf("stored FailingSince = %v after enabling, want none (%v)", got.FailingSince, err)
		}
	})

	t.Run("an addressed event goes to its endpoint alone, whatever the subscriptions", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		ops := f.endpoint(func(e *storage.Endpoint) { e.EventTypes = []string{"form.deleted"} })
		res, err := f.store.EventCreate(f.ctx, storage.Event{Type: "hymical.endpoint.disabled", EndpointID: ops.ID, Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Deliveries) != 1 || res.Deliveries[0].EndpointID != ops.ID || res.Event.EndpointID != ops.ID {
			t.Fatalf("addressed event fanned out to %+v", res.Deliveries)
		}
		ev, err := f.store.EventGet(f.ctx, res.Event.ID)
		if err != nil || ev.EndpointID != ops.ID {
			t.Fatalf("EventGet = %+v, %v; want EndpointID %s", ev, err, ops.ID)
		}
		_, err = f.store.EventCreate(f.ctx, storage.Event{Type: "hymical.endpoint.disabled", EndpointID: "ep_missing", Payload: []byte(`{}`)})
		wantErr(t, err, storage.ErrInvalid, "an event addressed to a missing endpoint")
	})

	t.Run("stores on one database share an endpoint's in-flight cap", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		const limit, n = 3, 40
		f.endpoint(func(e *storage.Endpoint) { e.MaxInFlight = limit })
		for range n {
			f.event("form_1")
		}
		var sends concurrency
		var done atomic.Int64
		f.workers(4, n, &done, func(s storage.Store, c storage.Claim) storage.OutcomeKind {
			defer sends.enter()()
			time.Sleep(2 * time.Millisecond)
			return storage.OutcomeDelivered
		})
		if p := sends.peak.Load(); p > limit || p < 2 {
			t.Fatalf("%d sends were under way at once across stores; want the cap, %d (and at least 2, or nothing overlapped and the test proved nothing)", p, limit)
		}
		f.wantAllDeliveredOnce(n)
	})

	t.Run("stores on one database share an endpoint's rate", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		const rate, burst, n = 40.0, 2, 30
		f.endpoint(func(e *storage.Endpoint) { e.RateLimit, e.RateBurst = rate, burst })
		for range n {
			f.event("form_1")
		}
		var mu sync.Mutex
		var sent []time.Time
		var done atomic.Int64
		f.workers(4, n, &done, func(s storage.Store, c storage.Claim) storage.OutcomeKind {
			mu.Lock()
			sent = append(sent, time.Now())
			mu.Unlock()
			return storage.OutcomeDelivered
		})
		slices.SortFunc(sent, func(a, b time.Time) int { return a.Compare(b) })
		// GCRA lets burst go at once and then one per 1/rate: n sends take
		// at least (n-burst)/rate, however many stores share the work. A
		// per-process limiter would take a quarter of that.
		least := time.Duration(float64(n-burst) / rate * float64(time.Second))
		if span := sent[len(sent)-1].Sub(sent[0]); span < least*9/10 {
			t.Fatalf("%d sends took %s across 4 stores; a shared limit of %v/s with burst %d needs at least %s", n, span, rate, burst, least)
		}
		f.wantAllDeliveredOnce(n)
	})

	t.Run("stores on one database keep an ordered endpoint in order", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		const n = 25
		f.endpoint(func(e *storage.Endpoint) { e.Ordered = true })
		var want []string
		for range n {
			want = append(want, f.event("form_1").Deliveries[0].ID)
		}
		var mu sync.Mutex
		var order []string
		var sends concurrency
		var done atomic.Int64
		tries := map[string]int{}
		f.workers(4, n, &done, func(s storage.Store, c storage.Claim) storage.OutcomeKind {
			defer sends.enter()()
			time.Sleep(time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			tries[c.Delivery.ID]++
			// Every third delivery fails once first: the ones behind it wait.
			if slices.Index(want, c.Delivery.ID)%3 == 0 && tries[c.Delivery.ID] == 1 {
				return storage.OutcomeRetryable
			}
			order = append(order, c.Delivery.ID)
			return storage.OutcomeDelivered
		})
		if p := sends.peak.Load(); p != 1 {
			t.Fatalf("%d sends to an ordered endpoint were under way at once", p)
		}
		if !slices.Equal(order, want) {
			t.Fatalf("delivered in order\n%v\nwant\n%v", order, want)
		}
	})
}

// concurrency counts the sends under way and the most there ever were.
type concurrency struct{ now, peak atomic.Int64 }

// enter counts a send in and returns what counts it out.
func (c *concurrency) enter() func() {
	n := c.now.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	return func() { c.now.Add(-1) }
}

// setDisabled disables or enables e through EndpointUpdate.
func (f *fixture) setDisabled(e storage.Endpoint, disabled bool) storage.Endpoint {
	f.t.Helper()
	e, err := f.store.EndpointGet(f.ctx, e.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	e.DisabledAt = nil
	if disabled {
		at := f.now
		e.DisabledAt = &at
	}
	e, err = f.store.EndpointUpdate(f.ctx, e)
	if err != nil {
		f.t.Fatalf("EndpointUpdate(disabled=%v): %v", disabled, err)
	}
	return e
}

// workers runs one goroutine per Store, each on its own connections and the
// real clock, claiming and completing until n deliveries are done. send
// decides each outcome; a retry is due again 5ms later.
func (f *fixture) workers(stores, n int, done *atomic.Int64, send func(storage.Store, storage.Claim) storage.OutcomeKind) {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, stores)
	for range stores {
		s := f.db.Open(f.t)
		wg.Go(func() {
			for done.Load() < int64(n) && time.Now().Before(deadline) {
				claims, err := s.DeliveryClaim(f.ctx, storage.DeliveryClaimParams{Limit: 5, Lease: lease})
				if err != nil {
					errs <- err
					return
				}
				if len(claims) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				var inner sync.WaitGroup
				for _, c := range claims {
					inner.Go(func() {
						outcome := send(s, c)
						p := completeParams(c, outcome, time.Now().UTC(), 10)
						p.Now, p.RetryDelay = time.Time{}, 5*time.Millisecond
						if _, _, err := s.DeliveryComplete(f.ctx, p); err != nil {
							errs <- err
							return
						}
						if outcome == storage.OutcomeDelivered {
							done.Add(1)
						}
					})
				}
				inner.Wait()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		f.t.Fatal(err)
	}
	if done.Load() != int64(n) {
		f.t.Fatalf("%d of %d delivered within 30s", done.Load(), n)
	}
}

// wantAllDeliveredOnce checks that n deliveries were delivered, each with
// exactly one attempt: deferring spent none.
func (f *fixture) wantAllDeliveredOnce(n int) {
	f.t.Helper()
	ds, err := f.store.DeliveryList(f.ctx, storage.DeliveryListParams{Limit: n + 1})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(ds) != n {
		f.t.Fatalf("%d deliveries, want %d", len(ds), n)
	}
	for _, d := range ds {
		if d.State != storage.StateDelivered || d.Attempts != 1 {
			f.t.Fatalf("delivery %s: state %s after %d attempts, want delivered after exactly 1", d.ID, d.State, d.Attempts)
		}
	}
}
