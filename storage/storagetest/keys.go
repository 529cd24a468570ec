package storagetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// lineUp is how long race gives its goroutines to reach the held lock:
// each needs microseconds to.
const lineUp = 200 * time.Millisecond

// testKeyedEndpointCreate holds the rules of an idempotency key on an
// endpoint create.
func testKeyedEndpointCreate(t *testing.T, b Backend) {
	create := func(f *fixture, s storage.Store, key, hash string, now time.Time) (storage.EndpointCreateResult, error) {
		return s.EndpointCreate(f.ctx, storage.EndpointCreateParams{
			Endpoint: storage.Endpoint{Transport: "http", URL: "https://receiver.example/hook",
				Secrets: []storage.Secret{storage.NewSecret("whsec_"+storage.NewID("s"), nil)}},
			Idempotency: &storage.Idempotency{Key: key, RequestHash: hash}, Now: now,
		})
	}
	t.Run("a repeated key with the same request returns the first endpoint and writes nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		first, err := create(f, f.store, "endpoint:k1", "h1", f.now)
		if err != nil || first.Duplicate {
			t.Fatalf("first create: %+v, %v", first, err)
		}
		again, err := create(f, f.store, "endpoint:k1", "h1", f.at(time.Hour))
		if err != nil || !again.Duplicate || again.Endpoint.ID != first.Endpoint.ID {
			t.Fatalf("repeat: duplicate %v id %s, %v; want the first, %s", again.Duplicate, again.Endpoint.ID, err, first.Endpoint.ID)
		}
		if again.Endpoint.Secrets[0].Reveal() != first.Endpoint.Secrets[0].Reveal() {
			t.Fatal("the repeat read back another secret than the first create stored")
		}
		_, err = create(f, f.store, "endpoint:k1", "h2", f.at(time.Hour))
		wantErr(t, err, storage.ErrKeyReused, "the key with another request")
		other, err := create(f, f.store, "endpoint:k2", "h1", f.at(time.Hour))
		if err != nil || other.Duplicate || other.Endpoint.ID == first.Endpoint.ID {
			t.Fatalf("another key: %+v, %v; want a new endpoint", other, err)
		}
		if all, _ := f.store.EndpointList(f.ctx); len(all) != 2 {
			t.Fatalf("%d endpoints, want 2", len(all))
		}
	})

	t.Run("a key past its window creates anew, and one whose endpoint was deleted says so", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		first, err := create(f, f.store, "endpoint:k", "h", f.now)
		if err != nil {
			t.Fatal(err)
		}
		later, err := create(f, f.store, "endpoint:k", "other", f.at(storage.DefaultIdempotencyWindow+time.Second))
		if err != nil || later.Duplicate || later.Endpoint.ID == first.Endpoint.ID {
			t.Fatalf("after the window: %+v, %v; want a new endpoint", later, err)
		}
		if _, err := f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: later.Endpoint.ID}); err != nil {
			t.Fatal(err)
		}
		_, err = create(f, f.store, "endpoint:k", "other", f.at(storage.DefaultIdempotencyWindow+time.Minute))
		wantErr(t, err, storage.ErrDeleted, "a repeat of a key whose endpoint was deleted")
	})

	t.Run("concurrent creates with one key on independent connections make exactly one endpoint", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		results := race(t, f, func(s storage.Store) (storage.EndpointCreateResult, error) {
			return create(f, s, "endpoint:race", "h", time.Time{})
		})
		created := 0
		for _, r := range results {
			if !r.Duplicate {
				created++
			}
			if r.Endpoint.ID != results[0].Endpoint.ID {
				t.Fatalf("one key answered with two endpoints: %s and %s", r.Endpoint.ID, results[0].Endpoint.ID)
			}
		}
		if created != 1 {
			t.Fatalf("%d creates said they created, want exactly 1", created)
		}
		if n := f.count(`SELECT count(*) FROM webhook_endpoints`); n != 1 {
			t.Fatalf("%d endpoint rows, want 1", n)
		}
	})
}

// testKeyedEndpointRotate holds the rules of an idempotency key on a
// secret rotation: one rotation per key, and only a fingerprint kept.
func testKeyedEndpointRotate(t *testing.T, b Backend) {
	t.Run("without a key a rotation is a conditional update and records nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint()
		next, fresh, until := rotated(e, f.now)
		p := storage.EndpointRotateParams{Endpoint: next, SecretSHA256: storage.SecretFingerprint(fresh), PreviousSecretsExpireAt: until}
		res, err := f.store.EndpointRotate(f.ctx, p)
		if err != nil || res.Duplicate || len(res.Endpoint.Secrets) != 2 || res.Endpoint.Secrets[0].Reveal() != fresh.Reveal() {
			t.Fatalf("rotation without a key: %+v, %v; want the new secret first of 2", res, err)
		}
		if n := f.count(`SELECT count(*) FROM webhook_idempotency_keys`); n != 0 {
			t.Fatalf("a rotation without a key left %d key rows", n)
		}
		// Written again as read before the first: someone changed it since.
		_, err = f.store.EndpointRotate(f.ctx, p)
		wantErr(t, err, storage.ErrConflict, "a rotation of an endpoint changed since it was read")
	})

	t.Run("a repeated key rotates nothing and answers with the first rotation's fingerprint", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint()
		first, err := rotateOnce(f, f.store, e.ID, "rotate:k", "h", f.now)
		if err != nil || first.Duplicate {
			t.Fatalf("first rotation: %+v, %v", first, err)
		}
		if len(first.Endpoint.Secrets) != 2 || storage.SecretFingerprint(first.Endpoint.Secrets[0]) != first.SecretSHA256 {
			t.Fatalf("first rotation wrote %d secrets, the first not the one fingerprinted", len(first.Endpoint.Secrets))
		}
		again, err := rotateOnce(f, f.store, e.ID, "rotate:k", "h", f.at(time.Hour))
		if err != nil || !again.Duplicate || again.SecretSHA256 != first.SecretSHA256 ||
			again.PreviousSecretsExpireAt == nil || !again.PreviousSecretsExpireAt.Equal(*first.PreviousSecretsExpireAt) {
			t.Fatalf("repeat: %+v, %v; want the first rotation's fingerprint and expiry", again, err)
		}
		now, err := f.store.EndpointGet(f.ctx, e.ID)
		if err != nil || len(now.Secrets) != 2 || now.Secrets[0].Reveal() != first.Endpoint.Secrets[0].Reveal() {
			t.Fatalf("after the repeat the endpoint has %d secrets (%v), want the first rotation's 2", len(now.Secrets), err)
		}
		// The key keeps the fingerprint, never the secret.
		if n := f.count(`SELECT count(*) FROM webhook_idempotency_keys WHERE secret_sha256 = '` + first.SecretSHA256 + `'`); n != 1 {
			t.Fatalf("%d key rows hold the fingerprint, want 1", n)
		}
		err = f.db.Exec(f.ctx, `UPDATE webhook_idempotency_keys SET secret_sha256 = '`+sqlQuote(first.Endpoint.Secrets[0].Reveal())+`'`)
		if err == nil {
			t.Fatal("the schema let a secret be written where only its SHA-256 may be")
		}

		_, err = rotateOnce(f, f.store, e.ID, "rotate:k", "other", f.at(time.Hour))
		wantErr(t, err, storage.ErrKeyReused, "the key with another request")
		other := f.endpoint()
		_, err = rotateOnce(f, f.store, other.ID, "rotate:k", "h", f.at(time.Hour))
		wantErr(t, err, storage.ErrKeyReused, "the key on another endpoint")
		if got, _ := f.store.EndpointGet(f.ctx, other.ID); len(got.Secrets) != 1 {
			t.Fatalf("a refused keyed rotation wrote %d secrets", len(got.Secrets))
		}
	})

	t.Run("a key past its window rotates anew, and one whose endpoint was deleted says so", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint()
		if _, err := rotateOnce(f, f.store, e.ID, "rotate:k", "h", f.now); err != nil {
			t.Fatal(err)
		}
		later, err := rotateOnce(f, f.store, e.ID, "rotate:k", "h", f.at(storage.DefaultIdempotencyWindow+time.Second))
		if err != nil || later.Duplicate || len(later.Endpoint.Secrets) != 3 {
			t.Fatalf("after the window: duplicate %v, %d secrets, %v; want a second rotation", later.Duplicate, len(later.Endpoint.Secrets), err)
		}
		if _, err := f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: e.ID}); err != nil {
			t.Fatal(err)
		}
		_, err = f.store.EndpointRotate(f.ctx, storage.EndpointRotateParams{Endpoint: later.Endpoint,
			SecretSHA256: later.SecretSHA256, Idempotency: &storage.Idempotency{Key: "rotate:k", RequestHash: "h"},
			Now: f.at(storage.DefaultIdempotencyWindow + time.Minute)})
		wantErr(t, err, storage.ErrDeleted, "a repeat of a key whose endpoint was deleted")
	})

	t.Run("a key of another operation is refused, and so is a fingerprint of no new secret", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		created, err := f.store.EndpointCreate(f.ctx, storage.EndpointCreateParams{
			Endpoint: storage.Endpoint{Transport: "http", URL: "https://receiver.example/hook",
				Secrets: []storage.Secret{storage.NewSecret("whsec_"+storage.NewID("s"), nil)}},
			Idempotency: &storage.Idempotency{Key: "shared", RequestHash: "h"}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = rotateOnce(f, f.store, created.Endpoint.ID, "shared", "h", f.now)
		wantErr(t, err, storage.ErrKeyReused, "a rotation with a create's key")

		next, _, _ := rotated(created.Endpoint, f.now)
		_, err = f.store.EndpointRotate(f.ctx, storage.EndpointRotateParams{Endpoint: next,
			SecretSHA256: storage.SecretFingerprint(next.Secrets[1]), Idempotency: &storage.Idempotency{Key: "k", RequestHash: "h"}})
		wantErr(t, err, storage.ErrInvalid, "a fingerprint of a rotated-out secret")
	})

	t.Run("concurrent rotations with one key on independent connections rotate once", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint()
		results := race(t, f, func(s storage.Store) (storage.EndpointRotateResult, error) {
			return rotateOnce(f, s, e.ID, "rotate:race", "h", time.Time{})
		})
		wantRotatedOnce(t, f, e.ID, results)
	})

	// Without the endpoint's updated_at to fence on, nothing but the key
	// stops a second rotation: with it, a rotation that lost would only
	// conflict, read again and find the key taken.
	t.Run("concurrent unconditional rotations with one key on independent connections rotate once", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint()
		results := race(t, f, func(s storage.Store) (storage.EndpointRotateResult, error) {
			next, fresh, until := rotated(e, f.now)
			next.UpdatedAt = time.Time{}
			return s.EndpointRotate(f.ctx, storage.EndpointRotateParams{
				Endpoint: next, SecretSHA256: storage.SecretFingerprint(fresh), PreviousSecretsExpireAt: until,
				Idempotency: &storage.Idempotency{Key: "rotate:race", RequestHash: "h"},
			})
		})
		wantRotatedOnce(t, f, e.ID, results)
	})
}

// testKeyedDeliveryReplay holds the rules of an idempotency key on a
// replay: one replay, one audit record and one cycle per key.
func testKeyedDeliveryReplay(t *testing.T, b Backend) {
	t.Run("a repeat after the replayed delivery finished replays nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.failed()
		first, err := replayOnce(f, f.store, d.ID, "replay:k", "h", f.at(time.Minute))
		if err != nil || first.Duplicate {
			t.Fatalf("first replay: %+v, %v", first, err)
		}
		wantState(t, first.Delivery, storage.StatePending, 1, 0)
		// The replayed cycle runs to its end before the client retries.
		f.complete(f.store, f.claimOne(f.store, f.at(time.Minute), d.ID), storage.OutcomePermanent, f.at(time.Minute), 0)
		again, err := replayOnce(f, f.store, d.ID, "replay:k", "h", f.at(time.Hour))
		if err != nil || !again.Duplicate {
			t.Fatalf("repeat: %+v, %v; want a duplicate", again, err)
		}
		wantState(t, again.Delivery, storage.StateFailed, 2, 1)
		if rs, _ := f.store.ReplayList(f.ctx, d.ID); len(rs) != 1 {
			t.Fatalf("%d replay records, want 1", len(rs))
		}

		_, err = replayOnce(f, f.store, d.ID, "replay:k", "other", f.at(time.Hour))
		wantErr(t, err, storage.ErrKeyReused, "the key with another request")
		other := f.event("form_1").Deliveries[0]
		f.complete(f.store, f.claimOne(f.store, f.at(time.Hour), other.ID), storage.OutcomePermanent, f.at(time.Hour), 0)
		_, err = replayOnce(f, f.store, other.ID, "replay:k", "h", f.at(time.Hour))
		wantErr(t, err, storage.ErrKeyReused, "the key on another delivery")
		wantState(t, f.get(other.ID), storage.StateFailed, 1, 1)

		later, err := replayOnce(f, f.store, d.ID, "replay:k", "h", f.at(storage.DefaultIdempotencyWindow+time.Hour))
		if err != nil || later.Duplicate {
			t.Fatalf("after the window: %+v, %v; want a new replay", later, err)
		}
	})

	t.Run("a refused replay records no key", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.delivery()
		_, err := replayOnce(f, f.store, d.ID, "replay:k", "h", f.now)
		wantErr(t, err, storage.ErrNotTerminal, "a keyed replay of a pending delivery")
		f.complete(f.store, f.claimOne(f.store, f.now, d.ID), storage.OutcomePermanent, f.now, 0)
		res, err := replayOnce(f, f.store, d.ID, "replay:k", "h", f.at(time.Minute))
		if err != nil || res.Duplicate {
			t.Fatalf("the key once the delivery failed: %+v, %v; want a replay", res, err)
		}
	})

	t.Run("concurrent replays with one key on independent connections replay once", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		d := f.failed()
		results := race(t, f, func(s storage.Store) (storage.DeliveryReplayResult, error) {
			return replayOnce(f, s, d.ID, "replay:race", "h", time.Time{})
		})
		replays := 0
		for _, r := range results {
			if !r.Duplicate {
				replays++
			}
		}
		if replays != 1 {
			t.Fatalf("%d replays said they replayed, want exactly 1", replays)
		}
		if rs, _ := f.store.ReplayList(f.ctx, d.ID); len(rs) != 1 {
			t.Fatalf("%d replay records, want 1", len(rs))
		}
	})
}

// testKeyedDeliveryReplayMany holds the rules of an idempotency key on a
// bulk replay: its matches are replayed once, however often it is sent.
func testKeyedDeliveryReplayMany(t *testing.T, b Backend) {
	t.Run("a repeat after the replayed deliveries failed again replays nothing and answers the first count", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.failedMany(3)
		first, err := replayManyOnce(f, f.store, e.ID, "bulk:k", "h", f.at(time.Minute))
		if err != nil || first.Duplicate || first.Count != 3 {
			t.Fatalf("first bulk replay: %+v, %v; want 3 replayed", first, err)
		}
		for _, c := range f.claim(f.store, f.at(time.Minute), 10) {
			f.complete(f.store, c, storage.OutcomePermanent, f.at(time.Minute), 0)
		}
		again, err := replayManyOnce(f, f.store, e.ID, "bulk:k", "h", f.at(time.Hour))
		if err != nil || !again.Duplicate || again.Count != 3 {
			t.Fatalf("repeat: %+v, %v; want a duplicate counting 3", again, err)
		}
		if n := f.count(`SELECT count(*) FROM webhook_delivery_replays`); n != 3 {
			t.Fatalf("%d replay records, want 3", n)
		}
		if n := f.count(`SELECT count(*) FROM webhook_deliveries WHERE state = 'failed'`); n != 3 {
			t.Fatalf("%d failed deliveries after the repeat, want all 3 left failed", n)
		}
		_, err = replayManyOnce(f, f.store, "", "bulk:k", "other", f.at(time.Hour))
		wantErr(t, err, storage.ErrKeyReused, "the key with another request")
		_, err = replayOnce(f, f.store, storage.NewID("dlv"), "bulk:k", "h", f.at(time.Hour))
		wantErr(t, err, storage.ErrKeyReused, "a single replay with a bulk replay's key")
	})

	t.Run("a bulk replay that matched nothing still holds its key", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.endpoint()
		first, err := replayManyOnce(f, f.store, e.ID, "bulk:k", "h", f.now)
		if err != nil || first.Duplicate || first.Count != 0 {
			t.Fatalf("first bulk replay: %+v, %v; want 0 replayed", first, err)
		}
		again, err := replayManyOnce(f, f.store, e.ID, "bulk:k", "h", f.now)
		if err != nil || !again.Duplicate || again.Count != 0 {
			t.Fatalf("repeat: %+v, %v; want a duplicate counting 0", again, err)
		}
	})

	t.Run("concurrent bulk replays with one key on independent connections replay once", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		e := f.failedMany(3)
		results := race(t, f, func(s storage.Store) (storage.DeliveryReplayManyResult, error) {
			return replayManyOnce(f, s, e.ID, "bulk:race", "h", time.Time{})
		})
		replays := 0
		for _, r := range results {
			if !r.Duplicate {
				replays++
			}
			if r.Count != 3 {
				t.Fatalf("an answer counted %d, want every answer to count the 3 replayed", r.Count)
			}
		}
		if replays != 1 {
			t.Fatalf("%d bulk replays said they replayed, want exactly 1", replays)
		}
		if n := f.count(`SELECT count(*) FROM webhook_delivery_replays`); n != 3 {
			t.Fatalf("%d replay records, want 3", n)
		}
	})
}

// race runs op from perStore goroutines on each of four independent
// Stores on f's database, and returns what each returned; any error fails
// the test. The goroutines are lined up behind a held lock on the keys,
// as behind another process's write, and let go together: a key read in
// one transaction and written in another is then read by several of them
// before the first writes it, every run. (On SQLite the others of a
// store queue for its one writer connection, which the first hands over
// between its two transactions.)
func race[R any](t *testing.T, f *fixture, op func(s storage.Store) (R, error)) []R {
	t.Helper()
	stores := []storage.Store{f.db.Open(t), f.db.Open(t), f.db.Open(t), f.db.Open(t)}
	release := f.db.HoldKeyWrites(t)
	const perStore = 4
	var (
		mu      sync.Mutex
		results []R
		wg      sync.WaitGroup
	)
	errs := make(chan error, len(stores)*perStore)
	begin := make(chan struct{})
	for _, s := range stores {
		for range perStore {
			wg.Go(func() {
				<-begin
				r, err := op(s)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			})
		}
	}
	close(begin)
	time.Sleep(lineUp)
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return results
}

// rotated is e with a new secret first and its others expiring an hour
// after now, as a rotation leaves it.
func rotated(e storage.Endpoint, now time.Time) (storage.Endpoint, storage.Secret, *time.Time) {
	fresh := storage.NewSecret("whsec_"+storage.NewID("s"), nil)
	until := now.Add(time.Hour).UTC().Truncate(time.Millisecond)
	next := []storage.Secret{fresh}
	for _, s := range e.Secrets {
		next = append(next, storage.NewSecret(s.Reveal(), &until))
	}
	e.Secrets = next
	return e, fresh, &until
}

// rotateOnce reads the endpoint, rotates it and writes it under the key,
// reading again after a conflict as endpoint.Modify does.
func rotateOnce(f *fixture, s storage.Store, id, key, hash string, now time.Time) (storage.EndpointRotateResult, error) {
	for {
		e, err := s.EndpointGet(f.ctx, id)
		if err != nil {
			return storage.EndpointRotateResult{}, err
		}
		next, fresh, until := rotated(e, f.now)
		res, err := s.EndpointRotate(f.ctx, storage.EndpointRotateParams{
			Endpoint: next, SecretSHA256: storage.SecretFingerprint(fresh), PreviousSecretsExpireAt: until,
			Idempotency: &storage.Idempotency{Key: key, RequestHash: hash}, Now: now,
		})
		if errors.Is(err, storage.ErrConflict) {
			continue
		}
		return res, err
	}
}

// failed makes a delivery that failed, of an endpoint of its own.
func (f *fixture) failed() storage.Delivery {
	f.t.Helper()
	d := f.delivery()
	done, _ := f.complete(f.store, f.claimOne(f.store, f.now, d.ID), storage.OutcomePermanent, f.now, 0)
	return done
}

func replayOnce(f *fixture, s storage.Store, id, key, hash string, now time.Time) (storage.DeliveryReplayResult, error) {
	return s.DeliveryReplay(f.ctx, storage.DeliveryReplayParams{DeliveryID: id, Actor: "ops", Now: now,
		Idempotency: &storage.Idempotency{Key: key, RequestHash: hash}})
}

func replayManyOnce(f *fixture, s storage.Store, endpointID, key, hash string, now time.Time) (storage.DeliveryReplayManyResult, error) {
	return s.DeliveryReplayMany(f.ctx, storage.DeliveryReplayManyParams{
		Filter: storage.DeliveryFilter{State: storage.StateFailed, EndpointID: endpointID}, Actor: "ops", Now: now,
		Idempotency: &storage.Idempotency{Key: key, RequestHash: hash}})
}

// failedMany makes n failed deliveries to one endpoint.
func (f *fixture) failedMany(n int) storage.Endpoint {
	f.t.Helper()
	e := f.endpoint()
	for range n {
		f.event("form_1")
	}
	for _, c := range f.claim(f.store, f.now, n) {
		f.complete(f.store, c, storage.OutcomePermanent, f.now, 0)
	}
	if got := f.count(fmt.Sprintf(`SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = '%s' AND state = 'failed'`, e.ID)); got != int64(n) {
		f.t.Fatalf("%d failed deliveries, want %d", got, n)
	}
	return e
}

// wantRotatedOnce checks what racing rotations of endpoint id with one key
// answered and left: one rotated, every answer names its secret, and the
// endpoint holds that secret and the first.
func wantRotatedOnce(t *testing.T, f *fixture, id string, results []storage.EndpointRotateResult) {
	t.Helper()
	rotations := 0
	for _, r := range results {
		if !r.Duplicate {
			rotations++
		}
		if r.SecretSHA256 != results[0].SecretSHA256 {
			t.Fatal("one key answered with two secrets")
		}
	}
	if rotations != 1 {
		t.Fatalf("%d rotations said they rotated, want exactly 1", rotations)
	}
	got, err := f.store.EndpointGet(f.ctx, id)
	if err != nil || len(got.Secrets) != 2 || storage.SecretFingerprint(got.Secrets[0]) != results[0].SecretSHA256 {
		t.Fatalf("the endpoint has %d secrets (%v), want the first and the one fingerprinted", len(got.Secrets), err)
	}
}
