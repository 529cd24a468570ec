package storagetest

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// testQueueHeads checks what the claim with a share rests on: every write
// that makes a delivery claimable lowers its endpoint's queue head, so no
// claimable delivery is left behind by the heads, whichever store and
// statement wrote it and however the writes and claims interleave.
func testQueueHeads(t *testing.T, b Backend) {
	t.Run("creates and retries racing claims on three stores strand nothing", func(t *testing.T) {
		t.Parallel()
		testHeadsRace(t, b)
	})
	t.Run("rows claimable before the upgrade are found by the heads", func(t *testing.T) {
		t.Parallel()
		const queues = 14 // 0014_endpoint_queues
		ctx := t.Context()
		db := b.NewDatabase(t)
		s := db.Open(t)
		if _, err := s.Migrate(ctx, storage.MigrateParams{To: queues - 1}); err != nil {
			t.Fatal(err)
		}
		var eps []storage.Endpoint
		for i := range 3 {
			e, err := s.EndpointCreate(ctx, storage.Endpoint{Transport: "http", URL: "https://receiver.example/hook",
				FormIDs: []string{fmt.Sprintf("form_%d", i)},
				Secrets: []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)}})
			if err != nil {
				t.Fatal(err)
			}
			eps = append(eps, e)
		}
		// The events go to a form no endpoint takes, so this build writes
		// no head for them; their deliveries are written as an earlier
		// build wrote them, with nothing but the row.
		want := map[string]bool{}
		var rows strings.Builder
		at := db.TimeLiteral(time.Now().Add(-time.Minute).Truncate(time.Millisecond))
		for i := range 9 {
			sub := storage.NewID("sub")
			res, err := s.EventCreate(ctx, storage.Event{Type: "submission.received", FormID: "form_none", SubmissionID: sub, Payload: submissionPayload(sub, "form_none")})
			if err != nil {
				t.Fatal(err)
			}
			id := storage.NewID("dlv")
			fmt.Fprintf(&rows, "INSERT INTO webhook_deliveries (id, endpoint_id, event_id, state, attempts, cycle_attempts, next_attempt_at, created_at, held) VALUES ('%s', '%s', '%s', 'pending', 0, 0, %s, %s, FALSE);\n",
				id, eps[i%len(eps)].ID, res.Event.ID, at, at)
			want[id] = true
		}
		if err := db.Exec(ctx, rows.String()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
			t.Fatal(err)
		}
		claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 20, Lease: lease,
			Now: time.Now().Add(time.Minute), Share: &storage.ClaimShare{Default: 5}})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claims {
			delete(want, c.Delivery.ID)
		}
		if len(want) > 0 || len(claims) != 9 {
			t.Fatalf("after the upgrade a claim with a share took %d of the 9 deliveries made before it; left %v", len(claims), want)
		}
	})
}

// testHeadsRace has creators on three stores add deliveries to a few
// endpoints while claimers on three other stores claim with a share and
// complete each claim as delivered or, one in three, as retryable and due
// again at once. Once the creators are done, the claimers go on until every
// delivery is delivered: a head left past a claimable row (a claim that
// moved it on while a create it could not see lowered it) would leave that
// row pending with every claim coming back empty.
func testHeadsRace(t *testing.T, b Backend) {
	f := newFixture(t, b)
	const endpoints, creators, perCreator = 4, 3, 60
	for i := range endpoints {
		form := fmt.Sprintf("form_race_%d", i)
		f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{form} })
	}
	var (
		created, delivered atomic.Int64
		creating           sync.WaitGroup
		claiming           sync.WaitGroup
		errs               = make(chan error, 16)
		stopCreating       atomic.Bool
	)
	for c := range creators {
		s := f.db.Open(t)
		creating.Go(func() {
			for i := range perCreator {
				if stopCreating.Load() {
					return
				}
				sub := storage.NewID("sub")
				form := fmt.Sprintf("form_race_%d", (c+i)%endpoints)
				if _, err := s.EventCreate(f.ctx, storage.Event{Type: "submission.received", FormID: form, SubmissionID: sub, Payload: submissionPayload(sub, form)}); err != nil {
					errs <- fmt.Errorf("create: %w", err)
					stopCreating.Store(true)
					return
				}
				created.Add(1)
			}
		})
	}
	deadline := time.Now().Add(60 * time.Second)
	total := int64(creators * perCreator)
	var emptyAfterCreates atomic.Int64
	for range 3 {
		s := f.db.Open(t)
		claiming.Go(func() {
			n := 0
			for delivered.Load() < total && time.Now().Before(deadline) {
				doneCreating := created.Load() == total
				claims, err := s.DeliveryClaim(f.ctx, storage.DeliveryClaimParams{Limit: 3, Lease: lease, Share: &storage.ClaimShare{Default: 2}})
				if err != nil {
					errs <- fmt.Errorf("claim: %w", err)
					return
				}
				if len(claims) == 0 {
					if doneCreating {
						emptyAfterCreates.Add(1)
					}
					time.Sleep(time.Millisecond)
					continue
				}
				for _, c := range claims {
					n++
					outcome := storage.OutcomeDelivered
					if n%3 == 0 {
						outcome = storage.OutcomeRetryable
					}
					p := completeParams(c, outcome, time.Now().UTC(), 1000)
					p.Now, p.RetryDelay = time.Time{}, 0
					if _, _, err := s.DeliveryComplete(f.ctx, p); err != nil {
						errs <- fmt.Errorf("complete: %w", err)
						return
					}
					if outcome == storage.OutcomeDelivered {
						delivered.Add(1)
					}
				}
			}
		})
	}
	creating.Wait()
	claiming.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := delivered.Load(); got != total {
		left, err := f.store.DeliveryList(f.ctx, storage.DeliveryListParams{Limit: 1000, Filter: storage.DeliveryFilter{State: storage.StatePending}})
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("%d of %d delivered within a minute; %d claims came back empty after the creates were done; still pending:\n%s",
			got, total, emptyAfterCreates.Load(), describeRows(left, time.Now()))
	}
	t.Logf("%s: %d deliveries created and delivered on racing stores, %d empty claims after the creates were done", b.Name, total, emptyAfterCreates.Load())
}
