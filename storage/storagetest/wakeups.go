package storagetest

import (
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// wakeWithin is how long a wake-up that must come is waited for: long,
// since only its absence fails.
const wakeWithin = 15 * time.Second

// laterDelay is how long after the write a delivery made due later is due:
// long enough that no machine is slow enough for the wake-up to be due
// already when the test checks that it has not come at once.
const laterDelay = time.Second

// wakeCase is one kind of write and the wake-up it must, or must not, cause.
type wakeCase struct {
	name string
	// want is when the write must wake the claimers: now, later (after
	// laterDelay, and only those of the writing Store, which keeps a timed
	// wake-up for it), or never (it made nothing due).
	want wakeWhen
	// prepare brings the fixture to just before the write and returns the
	// write, made through the fixture's store.
	prepare func(f *fixture) func() error
}

type wakeWhen int

const (
	wakeNow wakeWhen = iota
	wakeLater
	wakeNever
)

// testWakeups is the rule: a write that makes a delivery claimable wakes
// the claimers at once, in the writing process and, on a backend that
// serves several processes, in every other; a write that makes one due
// later wakes the writing Store's claimers when it is due; a write that
// makes nothing due wakes nobody.
func testWakeups(t *testing.T, b Backend) {
	release := func(delay time.Duration) func(f *fixture) func() error {
		return func(f *fixture) func() error {
			d := f.delivery()
			c := f.claimOne(f.store, f.now, d.ID)
			return func() error {
				_, err := f.store.DeliveryRelease(f.ctx, storage.DeliveryReleaseParams{
					DeliveryID: d.ID, Token: c.Token, Delay: delay, Now: f.now})
				return err
			}
		}
	}
	// failed is a delivery whose one attempt failed for good: one a replay
	// puts back.
	failed := func(f *fixture) storage.Delivery {
		d := f.delivery()
		c := f.claimOne(f.store, f.now, d.ID)
		f.complete(f.store, c, storage.OutcomePermanent, f.now, 5)
		return d
	}
	// ordered is an ordered endpoint with two deliveries, the first
	// claimed, the second held behind it.
	ordered := func(f *fixture) (storage.Claim, storage.Delivery) {
		f.endpoint(func(e *storage.Endpoint) { e.Ordered = true })
		first := f.event("form_1").Deliveries[0]
		second := f.event("form_1").Deliveries[0]
		if !second.Held {
			f.t.Fatal("the second delivery to an ordered endpoint is not held")
		}
		return f.claimOne(f.store, f.now, first.ID), second
	}
	cases := []wakeCase{
		{name: "an event created", want: wakeNow, prepare: func(f *fixture) func() error {
			f.endpoint()
			return func() error { f.event("form_1"); return nil }
		}},
		{name: "an event for a disabled endpoint only", want: wakeNever, prepare: func(f *fixture) func() error {
			off := f.now
			f.endpoint(func(e *storage.Endpoint) { e.DisabledAt, e.DisabledReason = &off, storage.DisabledByOperator })
			return func() error { f.event("form_1"); return nil }
		}},
		{name: "a claim released due now", want: wakeNow, prepare: release(0)},
		{name: "a claim released due soon", want: wakeLater, prepare: release(laterDelay)},
		{name: "a retryable attempt, due again after its backoff", want: wakeLater, prepare: func(f *fixture) func() error {
			d := f.delivery()
			c := f.claimOne(f.store, f.now, d.ID)
			return func() error {
				p := completeParams(c, storage.OutcomeRetryable, f.now, 5)
				p.RetryDelay = laterDelay
				_, _, err := f.store.DeliveryComplete(f.ctx, p)
				return err
			}
		}},
		{name: "a delivered attempt", want: wakeNever, prepare: func(f *fixture) func() error {
			d := f.delivery()
			c := f.claimOne(f.store, f.now, d.ID)
			return func() error {
				_, _, err := f.store.DeliveryComplete(f.ctx, completeParams(c, storage.OutcomeDelivered, f.now, 5))
				return err
			}
		}},
		{name: "a late attempt", want: wakeNever, prepare: func(f *fixture) func() error {
			d := f.delivery()
			c := f.claimOne(f.store, f.now, d.ID)
			f.claimOne(f.store, f.at(lease+time.Second), d.ID)
			return func() error {
				_, err := f.store.AttemptRecordLate(f.ctx, storage.AttemptRecordLateParams{
					DeliveryID: d.ID, Token: c.Token, Outcome: storage.OutcomeDelivered, HTTPStatus: 200,
					StartedAt: f.now, FinishedAt: f.now})
				return err
			}
		}},
		{name: "a replay", want: wakeNow, prepare: func(f *fixture) func() error {
			d := failed(f)
			return func() error {
				_, err := f.store.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: "test", Now: f.now})
				return err
			}
		}},
		{name: "a replay of many", want: wakeNow, prepare: func(f *fixture) func() error {
			failed(f)
			return func() error {
				_, err := f.store.DeliveryReplayMany(f.ctx, storage.DeliveryReplayManyParams{
					Filter: storage.DeliveryFilter{State: storage.StateFailed}, Actor: "test", Now: f.now})
				return err
			}
		}},
		{name: "an endpoint enabled again, letting its held deliveries go", want: wakeNow, prepare: func(f *fixture) func() error {
			off := f.now
			e := f.endpoint(func(e *storage.Endpoint) { e.DisabledAt, e.DisabledReason = &off, storage.DisabledByOperator })
			if d := f.event("form_1").Deliveries[0]; !d.Held {
				f.t.Fatal("a delivery to a disabled endpoint is not held")
			}
			return func() error { f.setDisabled(e, false); return nil }
		}},
		{name: "an endpoint disabled", want: wakeNever, prepare: func(f *fixture) func() error {
			e := f.endpoint()
			f.event("form_1")
			return func() error { f.setDisabled(e, true); return nil }
		}},
		{name: "ordering turned off, letting the held deliveries go", want: wakeNow, prepare: func(f *fixture) func() error {
			c, _ := ordered(f)
			return func() error {
				e := c.Endpoint
				e.Ordered, e.UpdatedAt = false, time.Time{}
				_, err := f.store.EndpointUpdate(f.ctx, e)
				return err
			}
		}},
		{name: "an ordered endpoint's turn passing on after a delivered attempt", want: wakeNow, prepare: func(f *fixture) func() error {
			c, _ := ordered(f)
			return func() error {
				_, _, err := f.store.DeliveryComplete(f.ctx, completeParams(c, storage.OutcomeDelivered, f.now, 5))
				return err
			}
		}},
		{name: "an ordered endpoint's turn passing on after a delivery failed without a request", want: wakeNow, prepare: func(f *fixture) func() error {
			c, _ := ordered(f)
			return func() error {
				_, err := f.store.DeliveryFail(f.ctx, storage.DeliveryFailParams{
					DeliveryID: c.Delivery.ID, Token: c.Token, Reason: "the transport is unknown", Now: f.now})
				return err
			}
		}},
		{name: "a claim a rate limit deferred", want: wakeLater, prepare: func(f *fixture) func() error {
			f.endpoint(func(e *storage.Endpoint) { e.RateLimit, e.RateBurst = 1/laterDelay.Seconds(), 1 })
			f.event("form_1")
			f.event("form_1")
			return func() error {
				if got := f.claim(f.store, f.now, 10); len(got) != 1 {
					f.t.Fatalf("a burst of 1 admitted %d", len(got))
				}
				return nil
			}
		}},
	}
	for _, c := range cases {
		if b.HoldCommits != nil && c.want == wakeNow {
			t.Run(c.name+", only once the write is visible", func(t *testing.T) {
				t.Parallel()
				testWakeupOnCommit(t, b, c)
			})
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			write := c.prepare(f)
			// Subscribed after the preparation, whose own wake-ups are
			// not this write's.
			own := f.store.Wakeups(t.Context())
			var other <-chan struct{}
			if b.WakeupsAcrossStores && c.want == wakeNow {
				other = f.db.Open(t).Wakeups(t.Context())
			}
			if woke(own) {
				t.Fatal("woken before the write")
			}
			start := time.Now()
			if err := write(); err != nil {
				t.Fatalf("the write: %v", err)
			}
			// The writing Store signals before the write returns, so what
			// it has not signalled by now it never will for this write.
			switch got := woke(own); {
			case c.want == wakeNow && !got:
				t.Fatal("the write made a delivery due now and did not wake this store's claimers")
			case c.want != wakeNow && got:
				t.Fatal("the write made nothing due now and woke this store's claimers")
			}
			if c.want == wakeLater {
				select {
				case <-own:
					if took := time.Since(start); took < laterDelay {
						t.Fatalf("woken %s after the write, before the delivery was due %s after it", took, laterDelay)
					}
				case <-time.After(wakeWithin):
					t.Fatalf("the write made a delivery due %s later and woke nobody then", laterDelay)
				}
			}
			if other != nil {
				select {
				case <-other:
				case <-time.After(wakeWithin):
					t.Fatal("the write made a delivery due now and did not wake the claimers of another store on the database")
				}
			}
		})
	}
}

// woke reports whether ch holds a wake-up, without waiting.
func woke(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// testWakeupOnCommit is the rule that a wake-up through the database goes
// out on the commit of the write it announces, never before: another
// process woken earlier would look, find nothing and sleep until its poll.
// The write is held at its commit, with every statement of it run; no
// wake-up may have gone out by then, and once it commits, another Store
// is woken and claims what it made due.
func testWakeupOnCommit(t *testing.T, b Backend, c wakeCase) {
	f := newFixture(t, b)
	write := c.prepare(f)
	other := f.db.Open(t)
	wake := other.Wakeups(t.Context())
	hold := b.HoldCommits(t, f.db)
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		err = write()
	}()
	hold.Waiting()
	if hold.Sent() {
		t.Fatal("a wake-up went out while the write waited at its commit: another process woken by it looks before the write is visible")
	}
	hold.Release()
	<-done
	if err != nil {
		t.Fatalf("the write: %v", err)
	}
	select {
	case <-wake:
	case <-time.After(wakeWithin):
		t.Fatal("the write made a delivery due now and did not wake the claimers of another store on the database")
	}
	if got := f.claim(other, f.now, 10); len(got) == 0 {
		t.Fatal("woken by the write, another store claims nothing")
	}
}
