package storagetest

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hymical/hymical/storage"
)

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
		wantState(t, got, storage.StatePending, 0, 0)
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
			Filter: storage.DeliveryFilter{State: storage.StateFailed}, Actor: "ops", Now: f2.at(time.Second)}); err != nil || n != 1 {
			t.Fatalf("bulk replay: %d, %v", n, err)
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
