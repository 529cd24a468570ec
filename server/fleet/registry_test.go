package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/buildinfo"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
	"github.com/hymical/hymical/storage/sqlite/sqlitetest"
)

// unmigrated opens a store of each kind on a fresh database nothing has
// migrated yet, closed when the test ends.
var unmigrated = map[string]func(t *testing.T) storage.Store{
	"sqlite": func(t *testing.T) storage.Store { return sqlitetest.Open(t) },
	"postgres": func(t *testing.T) storage.Store {
		s, err := postgres.Open(t.Context(), pgtest.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	},
}

func TestMigrateRefusesWhileAnotherBuildIsLive(t *testing.T) {
	for name, open := range unmigrated {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := open(t)
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
			if err == nil || !strings.Contains(err.Error(), "wrk_dead") || !strings.Contains(err.Error(), "v0.0.1") || !strings.Contains(err.Error(), "--force") {
				t.Fatalf("a live worker of another build: %v, want a refusal naming it and --force", err)
			}
			if err := s.WorkerDeregister(ctx, dead.ID); err != nil {
				t.Fatal(err)
			}
			if err := CheckNoOtherBuilds(ctx, s, now); err != nil {
				t.Fatalf("the other build deregistered: %v", err)
			}
		})
	}
}

// TestLiveChecks holds the two refusals to one registry: the migration
// refuses only live servers of another build, work that every server must
// stop for refuses any live server, and neither counts a heartbeat older
// than LiveWindow or looks for a registry the schema does not have yet.
func TestLiveChecks(t *testing.T) {
	t.Parallel()
	now := time.Now()
	this := NewWorker(4, now)
	other := storage.Worker{ID: "wrk_other", Build: "v0.0.1", SchemaVersion: 3, Host: "box1", StartedAt: now.Add(-time.Hour), HeartbeatAt: now}
	stale := other
	stale.ID, stale.HeartbeatAt = "wrk_stale", now.Add(-LiveWindow-time.Second)
	const why = "they would keep the old key"
	tests := []struct {
		name    string
		migrate bool
		workers []storage.Worker
		// The ids each check refuses for; none means it lets the work go.
		otherBuilds, anyLive []string
	}{
		{name: "a database without the registry"},
		{name: "no server registered", migrate: true},
		{name: "a live server of this build", migrate: true, workers: []storage.Worker{this}, anyLive: []string{this.ID}},
		{name: "a live server of another build", migrate: true, workers: []storage.Worker{other}, otherBuilds: []string{other.ID}, anyLive: []string{other.ID}},
		{name: "only a stale heartbeat", migrate: true, workers: []storage.Worker{stale}},
		{name: "both builds live", migrate: true, workers: []storage.Worker{this, other, stale}, otherBuilds: []string{other.ID}, anyLive: []string{other.ID, this.ID}},
	}
	for store, open := range unmigrated {
		for _, tt := range tests {
			t.Run(store+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				s := open(t)
				if tt.migrate {
					if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
						t.Fatal(err)
					}
				}
				for _, w := range tt.workers {
					if err := s.WorkerHeartbeat(ctx, w); err != nil {
						t.Fatal(err)
					}
				}
				wantRefusal(t, "CheckNoOtherBuilds", CheckNoOtherBuilds(ctx, s, now), tt.otherBuilds)
				err := CheckNoneLive(ctx, s, now, why)
				wantRefusal(t, "CheckNoneLive", err, tt.anyLive)
				if err != nil && !strings.Contains(err.Error(), why) {
					t.Errorf("CheckNoneLive: %q does not say why: %q", err, why)
				}
			})
		}
	}
}

// wantRefusal fails unless err is nil when ids is, and otherwise a
// *LiveError for exactly ids that names each and says --force.
func wantRefusal(t *testing.T, check string, err error, ids []string) {
	t.Helper()
	if len(ids) == 0 {
		if err != nil {
			t.Errorf("%s: %v, want no refusal", check, err)
		}
		return
	}
	var live *LiveError
	if !errors.As(err, &live) {
		t.Fatalf("%s: %v, want a *LiveError for %v", check, err, ids)
	}
	var got []string
	for _, w := range live.Workers {
		got = append(got, w.ID)
	}
	slices.Sort(got)
	ids = slices.Sorted(slices.Values(ids))
	if !slices.Equal(got, ids) {
		t.Errorf("%s refuses for %v, want %v", check, got, ids)
	}
	for _, want := range append(ids, "--force") {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %q does not name %s", check, err, want)
		}
	}
}

// RunHeartbeat registers this process with its build, refreshes the row
// every interval, and removes it when its context ends.
func TestHeartbeatRegistersRefreshesAndDeregisters(t *testing.T) {
	for name, open := range unmigrated {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			if _, err := s.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan struct{})
			w := NewWorker(6, time.Now())
			go func() {
				defer close(done)
				RunHeartbeat(ctx, s, w, 20*time.Millisecond, slog.New(slog.DiscardHandler))
			}()
			defer func() { stop(); <-done }()

			first := waitForWorker(t, s, w.ID, func(storage.Worker) bool { return true })
			host, _ := os.Hostname()
			if first.Build != buildinfo.String() || first.SchemaVersion != 6 || first.Host != host || !first.StartedAt.Equal(w.StartedAt.Truncate(time.Microsecond)) {
				t.Fatalf("registered %+v, want build %s, schema 6, host %s, started %s", first, buildinfo.String(), host, w.StartedAt)
			}
			waitForWorker(t, s, w.ID, func(got storage.Worker) bool { return got.HeartbeatAt.After(first.HeartbeatAt) })
			stop()
			<-done
			if ws, err := s.WorkerList(t.Context(), time.Time{}); err != nil || len(ws) != 0 {
				t.Fatalf("after the heartbeat stopped: %+v, %v; want no worker registered", ws, err)
			}
		})
	}
}

// waitForWorker polls the registry until worker id is there and cond holds.
func waitForWorker(t *testing.T, s storage.Store, id string, cond func(storage.Worker) bool) storage.Worker {
	t.Helper()
	var found storage.Worker
	testwait.For(t, 10*time.Second, func() error {
		ws, err := s.WorkerList(t.Context(), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.ID == id && cond(w) {
				found = w
				return nil
			}
		}
		return fmt.Errorf("worker %s never as wanted in the registry: %+v", id, ws)
	})
	return found
}
