package server

import (
	"context"
	"errors"
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
