package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite/sqlitetest"
)

// PruneDelivered works through more old deliveries than one batch holds,
// and keeps what is newer than the cutoff or not delivered.
func TestPruneDeliveredWorksInBatches(t *testing.T) {
	ctx := context.Background()
	s := sqlitetest.Open(t)
	if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: "https://receiver.example/",
		Secrets: []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)}}}); err != nil {
		t.Fatal(err)
	}
	const old, kept = pruneBatch + 500, 7
	for i := range old + kept {
		ev, err := event.Submission("form_1", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.EventCreate(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().Add(time.Minute)
	claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: old + kept, Lease: time.Minute, Now: now})
	if err != nil || len(claims) != old+kept {
		t.Fatalf("claimed %d, %v; want %d", len(claims), err, old+kept)
	}
	var ps []storage.DeliveryCompleteParams
	for i, c := range claims {
		done := now.Add(-48 * time.Hour) // delivered two days ago
		if i >= old {
			done = now // delivered just now
		}
		ps = append(ps, storage.DeliveryCompleteParams{DeliveryID: c.Delivery.ID, Token: c.Token, Outcome: storage.OutcomeDelivered, Now: done})
	}
	for len(ps) > 0 {
		k := min(len(ps), storage.MaxCompleteBatch)
		if _, err := s.DeliveryCompleteBatch(ctx, ps[:k]); err != nil {
			t.Fatal(err)
		}
		ps = ps[k:]
	}
	n, err := PruneDelivered(ctx, s, now.Add(-24*time.Hour))
	if err != nil || n != old {
		t.Fatalf("PruneDelivered = %d, %v; want %d", n, err, old)
	}
	st, err := s.DeliveryStats(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.ByState[storage.StateDelivered]; got != kept {
		t.Fatalf("%d delivered deliveries left, want the %d recent ones", got, kept)
	}
}

// PruneAccess works through more expired credentials than one batch holds,
// and keeps those that expire after the cutoff.
func TestPruneAccessWorksInBatches(t *testing.T) {
	ctx := context.Background()
	s := sqlitetest.New(t)
	now := time.Now().UTC()
	const old, kept = pruneBatch + 5, 3
	for i := range old + kept {
		expires := now.Add(-48 * time.Hour)
		if i >= old {
			expires = now.Add(time.Hour)
		}
		if _, err := s.TokenCreate(ctx, storage.AccessToken{Hash: sha256.Sum256([]byte(storage.NewID("s"))),
			Forms: []string{"form_1"}, ExpiresAt: expires, CreatedAt: now.Add(-72 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := PruneAccess(ctx, s, now.Add(-24*time.Hour))
	if err != nil || n != old {
		t.Fatalf("PruneAccess = %d, %v; want %d", n, err, old)
	}
	left, err := s.TokenList(ctx)
	if err != nil || len(left) != kept {
		t.Fatalf("%d tokens left (%v), want the %d that have not expired", len(left), err, kept)
	}
}
