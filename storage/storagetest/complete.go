package storagetest

import (
	"strings"
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
