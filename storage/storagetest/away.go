package storagetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// awayCallTimeout bounds each call to a store whose database is away: a
// call must give up on its own, as unreachable, well before it. A call
// that only ends at this deadline fails the rule.
const awayCallTimeout = 20 * time.Second

// testAway: once the database cannot be reached, every operation of the
// Store fails with storage.ErrUnavailable, whichever path it takes (a
// batched create, a keyed write, a read, the worker's claims), so that
// every caller can tell "try again later" from a bug.
func testAway(t *testing.T, b Backend) {
	if b.OpenAway == nil {
		t.Skipf("%s: the backend has no way for its database to be away (OpenAway is nil)", b.Name)
	}
	db := b.NewDatabase(t)
	s, cut := b.OpenAway(t, db)
	ctx := context.Background()
	if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	f := &fixture{t: t, ctx: ctx, store: s, db: db, now: time.Now().UTC().Add(time.Minute).Truncate(time.Millisecond)}
	d := f.delivery()
	e, err := s.EndpointGet(ctx, d.EndpointID)
	if err != nil {
		t.Fatal(err)
	}
	claim := f.claimOne(s, f.now, d.ID)
	cut()

	key := func(k string) *storage.Idempotency { return &storage.Idempotency{Key: k, RequestHash: "h"} }
	ops := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"EventCreate", func(ctx context.Context) error {
			_, err := s.EventCreate(ctx, storage.Event{Type: "submission.received", FormID: "form_1", SubmissionID: "sub_away",
				Payload: submissionPayload("sub_away", "form_1")})
			return err
		}},
		{"EventCreate with an idempotency key", func(ctx context.Context) error {
			_, err := s.EventCreate(ctx, storage.Event{Type: "submission.received", FormID: "form_1", SubmissionID: "sub_away_key",
				Payload: submissionPayload("sub_away_key", "form_1"), IdempotencyKey: "away"})
			return err
		}},
		{"EventGet", func(ctx context.Context) error { _, err := s.EventGet(ctx, d.EventID); return err }},
		{"EndpointCreate", func(ctx context.Context) error {
			_, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: awayEndpoint(e)})
			return err
		}},
		{"EndpointCreate with an idempotency key", func(ctx context.Context) error {
			_, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: awayEndpoint(e), Idempotency: key("away")})
			return err
		}},
		{"EndpointGet", func(ctx context.Context) error { _, err := s.EndpointGet(ctx, e.ID); return err }},
		{"EndpointList", func(ctx context.Context) error { _, err := s.EndpointList(ctx); return err }},
		{"EndpointListPage", func(ctx context.Context) error {
			_, err := s.EndpointListPage(ctx, storage.EndpointListParams{Limit: 10})
			return err
		}},
		{"EndpointLastErrors", func(ctx context.Context) error { _, err := s.EndpointLastErrors(ctx, []string{e.ID}); return err }},
		{"EndpointUpdate", func(ctx context.Context) error { _, err := s.EndpointUpdate(ctx, e); return err }},
		{"EndpointRotate", func(ctx context.Context) error {
			_, err := s.EndpointRotate(ctx, storage.EndpointRotateParams{Endpoint: e, SecretSHA256: storage.SecretFingerprint(e.Secrets[0]), Idempotency: key("rotate")})
			return err
		}},
		{"EndpointDelete", func(ctx context.Context) error {
			_, err := s.EndpointDelete(ctx, storage.EndpointDeleteParams{ID: e.ID, Force: true})
			return err
		}},
		{"DeliveryClaim", func(ctx context.Context) error {
			_, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 10, Lease: lease})
			return err
		}},
		{"DeliveryComplete", func(ctx context.Context) error {
			_, _, err := s.DeliveryComplete(ctx, completeParams(claim, storage.OutcomeDelivered, f.now, 5))
			return err
		}},
		{"DeliveryCompleteBatch", func(ctx context.Context) error {
			_, err := s.DeliveryCompleteBatch(ctx, []storage.DeliveryCompleteParams{completeParams(claim, storage.OutcomeDelivered, f.now, 5)})
			return err
		}},
		{"DeliveryRelease", func(ctx context.Context) error {
			_, err := s.DeliveryRelease(ctx, storage.DeliveryReleaseParams{DeliveryID: d.ID, Token: claim.Token, Delay: time.Second, Reason: "away"})
			return err
		}},
		{"DeliveryFail", func(ctx context.Context) error {
			_, err := s.DeliveryFail(ctx, storage.DeliveryFailParams{DeliveryID: d.ID, Token: claim.Token, Reason: "away"})
			return err
		}},
		{"AttemptRecordLate", func(ctx context.Context) error {
			_, err := s.AttemptRecordLate(ctx, lateParams(claim, storage.OutcomeDelivered, f.now))
			return err
		}},
		{"DeliveryGet", func(ctx context.Context) error { _, err := s.DeliveryGet(ctx, d.ID); return err }},
		{"DeliveryList", func(ctx context.Context) error {
			_, err := s.DeliveryList(ctx, storage.DeliveryListParams{Limit: 10})
			return err
		}},
		{"DeliveryStats", func(ctx context.Context) error { _, err := s.DeliveryStats(ctx, f.now); return err }},
		{"AttemptList", func(ctx context.Context) error { _, err := s.AttemptList(ctx, d.ID); return err }},
		{"AttemptLatest", func(ctx context.Context) error { _, err := s.AttemptLatest(ctx, []string{d.ID}); return err }},
		{"ReplayList", func(ctx context.Context) error { _, err := s.ReplayList(ctx, d.ID); return err }},
		{"DeliveryReplay", func(ctx context.Context) error {
			_, err := s.DeliveryReplay(ctx, storage.DeliveryReplayParams{DeliveryID: d.ID, Actor: "test", Idempotency: key("replay")})
			return err
		}},
		{"DeliveryReplayMany", func(ctx context.Context) error {
			_, err := s.DeliveryReplayMany(ctx, storage.DeliveryReplayManyParams{Filter: storage.DeliveryFilter{State: storage.StateFailed},
				Actor: "test", Limit: 10, Idempotency: key("replay-many")})
			return err
		}},
		{"WorkerHeartbeat", func(ctx context.Context) error {
			return s.WorkerHeartbeat(ctx, storage.Worker{ID: "w_away", Build: "test", SchemaVersion: 1, Host: "h"})
		}},
		{"WorkerList", func(ctx context.Context) error { _, err := s.WorkerList(ctx, f.now.Add(-time.Hour)); return err }},
		{"WorkerDeregister", func(ctx context.Context) error { return s.WorkerDeregister(ctx, "w_away") }},
		{"DeliveryPrune", func(ctx context.Context) error {
			_, err := s.DeliveryPrune(ctx, storage.DeliveryPruneParams{CompletedBefore: f.now, Limit: 10})
			return err
		}},
		{"Migrate", func(ctx context.Context) error { _, err := s.Migrate(ctx, storage.MigrateParams{}); return err }},
		{"SchemaVersion", func(ctx context.Context) error { _, err := s.SchemaVersion(ctx); return err }},
	}
	for _, op := range ops {
		t.Run(op.name+" is ErrUnavailable", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), awayCallTimeout)
			defer cancel()
			err := op.call(ctx)
			if !errors.Is(err, storage.ErrUnavailable) {
				t.Errorf("%s on a store whose database is away: %v, want storage.ErrUnavailable", op.name, err)
			}
			if ctx.Err() != nil {
				t.Errorf("%s waited for the caller's deadline instead of failing as unreachable", op.name)
			}
		})
	}
}

// awayEndpoint is a new endpoint like e.
func awayEndpoint(e storage.Endpoint) storage.Endpoint {
	e.ID, e.CreatedAt, e.UpdatedAt = "", time.Time{}, time.Time{}
	return e
}
