package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite/sqlitetest"
)

func TestMigrateRefusesWhileAnotherBuildIsLive(t *testing.T) {
	ctx := context.Background()
	s := sqlitetest.Open(t)
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
