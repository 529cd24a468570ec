package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/buildinfo"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/server"
	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// A running server registers itself in the worker registry with this
// build's identity and the schema it checked, keeps its heartbeat fresh,
// and removes its row when Run returns: what `hymical migrate`'s
// one-build check reads.
func TestRunRegistersHeartbeatsAndDeregisters(t *testing.T) {
	t.Parallel()
	urls := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "hymical.db") },
		"postgres": func(t *testing.T) string { return pgtest.NewDatabase(t) },
	}
	for name, newURL := range urls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := newURL(t)
			direct, err := database.Open(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			if _, err := direct.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
				t.Fatal(err)
			}
			latest, err := migrations.Latest()
			if err != nil {
				t.Fatal(err)
			}

			cfg := testConfig(url)
			cfg.Console.Enabled = false
			srv, err := server.New(t.Context(), cfg, e2etest.Logger())
			if err != nil {
				t.Fatal(err)
			}
			srv.SetHeartbeatInterval(20 * time.Millisecond)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			done := make(chan error, 1)
			go func() { done <- srv.Run(ctx) }()

			host, _ := os.Hostname()
			var first storage.Worker
			testwait.For(t, 10*time.Second, func() error {
				ws, err := direct.WorkerList(t.Context(), time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				if len(ws) != 1 {
					return fmt.Errorf("the registry holds %s, want this server alone", formatWorkers(ws))
				}
				first = ws[0]
				return nil
			})
			if first.Build != buildinfo.String() || first.SchemaVersion != latest || first.Host != host {
				t.Fatalf("registered %+v, want build %s, schema %d, host %s", first, buildinfo.String(), latest, host)
			}
			testwait.For(t, 5*time.Second, func() error {
				ws, err := direct.WorkerList(t.Context(), time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				if len(ws) != 1 || ws[0].ID != first.ID || !ws[0].HeartbeatAt.After(first.HeartbeatAt) {
					return fmt.Errorf("the heartbeat has not moved: %s", formatWorkers(ws))
				}
				return nil
			})

			stop()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return")
			}
			if ws, err := direct.WorkerList(t.Context(), time.Time{}); err != nil || len(ws) != 0 {
				t.Fatalf("after Run returned: %s, %v; want no worker registered", formatWorkers(ws), err)
			}
		})
	}
}

func formatWorkers(ws []storage.Worker) string {
	s := ""
	for _, w := range ws {
		s += w.ID + " " + w.Build + " heartbeat " + w.HeartbeatAt.Format(time.RFC3339Nano) + "; "
	}
	return s
}
