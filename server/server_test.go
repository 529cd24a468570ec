package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func openSQLite(t *testing.T) storage.Store {
	t.Helper()
	s, err := OpenStore(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOpenStoreRefusesUnknownURLs(t *testing.T) {
	for _, url := range []string{"", "mysql://x", "hymical.db"} {
		if _, err := OpenStore(context.Background(), url); err == nil || !strings.Contains(err.Error(), "sqlite:PATH") {
			t.Errorf("OpenStore(%q) = %v, want an error naming the accepted forms", url, err)
		}
	}
}

func TestCheckSchema(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	if _, err := CheckSchema(ctx, s); err == nil || !strings.Contains(err.Error(), "hymical migrate") {
		t.Fatalf("unmigrated database: %v, want a hint to migrate", err)
	}
	if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckSchema(ctx, s); err != nil {
		t.Fatalf("migrated database: %v", err)
	}
}

func TestMigrateRefusesWhileAnotherBuildIsLive(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	if err := CheckNoOtherBuilds(ctx, s, time.Now()); err != nil {
		t.Fatalf("fresh database: %v", err)
	}
	if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	same := NewWorker(4, now)
	if err := s.WorkerHeartbeat(ctx, same); err != nil {
		t.Fatal(err)
	}
	if err := CheckNoOtherBuilds(ctx, s, now); err != nil {
		t.Fatalf("only this build is live: %v", err)
	}
	dead := storage.Worker{ID: "wrk_dead", Build: "v0.0.1", SchemaVersion: 3, StartedAt: now.Add(-time.Hour), HeartbeatAt: now.Add(-LiveWindow - time.Second)}
	if err := s.WorkerHeartbeat(ctx, dead); err != nil {
		t.Fatal(err)
	}
	if err := CheckNoOtherBuilds(ctx, s, now); err != nil {
		t.Fatalf("the other build's heartbeat is stale: %v", err)
	}
	dead.HeartbeatAt = now
	if err := s.WorkerHeartbeat(ctx, dead); err != nil {
		t.Fatal(err)
	}
	err := CheckNoOtherBuilds(ctx, s, now)
	if err == nil || !strings.Contains(err.Error(), "wrk_dead") || !strings.Contains(err.Error(), "v0.0.1") {
		t.Fatalf("a live worker of another build: %v, want a refusal naming it", err)
	}
}

func TestSubmissionEvent(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ev, err := SubmissionEvent("form_1", []byte(`{"email":"a@example.com"}`), now)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"submission.received","submission":{"id":"` + ev.SubmissionID + `","form_id":"form_1","data":{"email":"a@example.com"},"created_at":"2026-12-02T10:00:00Z"}}`
	if string(ev.Payload) != want {
		t.Fatalf("payload = %s\nwant      %s", ev.Payload, want)
	}
	if !strings.HasPrefix(ev.SubmissionID, "sub_") || len(ev.SubmissionID) != 36 {
		t.Fatalf("submission id %q is not sub_<32 hex>", ev.SubmissionID)
	}
	for _, bad := range []string{`[]`, `"x"`, `null`, `{`} {
		if _, err := SubmissionEvent("form_1", []byte(bad), now); !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("data %s: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := SubmissionEvent("", []byte(`{}`), now); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("empty form id: %v", err)
	}
}

// PruneDelivered works through more old deliveries than one batch holds,
// and keeps what is newer than the cutoff or not delivered.
func TestPruneDeliveredWorksInBatches(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndpointCreate(ctx, storage.Endpoint{Transport: "http", URL: "https://receiver.example/",
		Secrets: []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)}}); err != nil {
		t.Fatal(err)
	}
	const old, kept = pruneBatch + 500, 7
	for i := range old + kept {
		ev, err := SubmissionEvent("form_1", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), time.Now())
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
