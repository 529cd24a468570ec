package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// guardDB is a fresh, empty database of one kind: its URL for the CLI, and
// raw SQL on it for what no command does.
type guardDB struct {
	url  string
	exec func(t *testing.T, q string)
	// now is a literal of the backend's time columns for the current time.
	now string
}

var guardDatabases = map[string]func(t *testing.T) guardDB{
	"sqlite": func(t *testing.T) guardDB {
		path := filepath.Join(t.TempDir(), "hymical.db")
		return guardDB{
			url: "sqlite:" + path,
			exec: func(t *testing.T, q string) {
				t.Helper()
				db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if _, err := db.ExecContext(context.Background(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			},
			now: fmt.Sprint(time.Now().UnixMicro()),
		}
	},
	"postgres": func(t *testing.T) guardDB {
		dsn := pgtest.NewDatabase(t)
		return guardDB{
			url: dsn,
			exec: func(t *testing.T, q string) {
				t.Helper()
				ctx := context.Background()
				conn, err := pgx.Connect(ctx, dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			},
			now: "now()",
		}
	},
}

// openStore opens the database a URL names, as the CLI does.
func openStore(t *testing.T, url string) storage.Store {
	t.Helper()
	s, err := database.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// `hymical serve` refuses a database whose schema is newer than this build
// knows, with an error that says so and names both versions, rather than
// running an old worker beside a schema it does not understand. On
// PostgreSQL this is server.New's schema check (serve does not migrate
// it); on SQLite serve migrates its own file, and the migration refuses.
func TestServeRefusesANewerSchema(t *testing.T) {
	t.Parallel()
	latest, err := migrations.Latest()
	if err != nil {
		t.Fatal(err)
	}
	for name, newDB := range guardDatabases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			if _, err := openStore(t, db.url).Migrate(t.Context(), storage.MigrateParams{}); err != nil {
				t.Fatal(err)
			}
			db.exec(t, fmt.Sprintf(`INSERT INTO hymical_schema_migrations (version, name, applied_at) VALUES (%d, 'from_a_newer_build', %s)`, latest+1, db.now))

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, logs := new(syncbuf.Buffer), new(syncbuf.Buffer)
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"serve", "--database.url=" + db.url, "--plugins.dir=" + t.TempDir(), "--server.listen=127.0.0.1:0"}, out, logs)
			}()
			var got error
			for deadline := time.Now().Add(30 * time.Second); ; {
				select {
				case got = <-done:
				case <-time.After(20 * time.Millisecond):
					if strings.Contains(out.String(), "listening on") || time.Now().After(deadline) {
						cancel()
						<-done
						t.Fatalf("serve ran against schema version %d (this build knows %d):\n%s\n%s", latest+1, latest, out.String(), logs.String())
					}
					continue
				}
				break
			}
			want := []string{storage.ErrSchemaUnknown.Error(), fmt.Sprintf("version %d", latest+1), fmt.Sprintf("up to %d", latest)}
			for _, w := range want {
				if got == nil || !strings.Contains(got.Error(), w) {
					t.Fatalf("serve on a database at schema %d: %v; want an error saying %q", latest+1, got, w)
				}
			}
		})
	}
}

// `hymical migrate` refuses while a live worker of another build is
// registered, naming it and the way out, and applies nothing; --force
// migrates anyway.
func TestMigrateRefusesWhileAnotherBuildIsLiveUnlessForced(t *testing.T) {
	t.Parallel()
	latest, err := migrations.Latest()
	if err != nil {
		t.Fatal(err)
	}
	// The registry exists from schema 4; stop one short of the latest so
	// there is something to migrate.
	from := latest - 1
	if from < 4 {
		t.Fatalf("latest schema %d leaves no version with the registry to migrate from", latest)
	}
	for name, newDB := range guardDatabases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			ctx := t.Context()
			var out bytes.Buffer
			if err := run(ctx, []string{"migrate", "--database", db.url, "--to", fmt.Sprint(from)}, &out, &out); err != nil {
				t.Fatalf("migrate --to %d: %v\n%s", from, err, out.String())
			}
			store := openStore(t, db.url)
			now := time.Now()
			old := storage.Worker{ID: "wrk_oldbuild", Build: "v0.9.0", SchemaVersion: from, Host: "old-host", StartedAt: now.Add(-time.Hour), HeartbeatAt: now}
			if err := store.WorkerHeartbeat(ctx, old); err != nil {
				t.Fatal(err)
			}

			out.Reset()
			err := run(ctx, []string{"migrate", "--database", db.url}, &out, &out)
			for _, w := range []string{"wrk_oldbuild", "v0.9.0", "old-host", "--force"} {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("migrate while another build is live: %v\n%s; want a refusal saying %q", err, out.String(), w)
				}
			}
			if v, err := store.SchemaVersion(ctx); err != nil || v != from {
				t.Fatalf("after the refusal the schema is at %d (%v), want %d: nothing applied", v, err, from)
			}

			out.Reset()
			if err := run(ctx, []string{"migrate", "--database", db.url, "--force"}, &out, &out); err != nil {
				t.Fatalf("migrate --force: %v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), fmt.Sprintf("from schema version %d to %d", from, latest)) {
				t.Fatalf("migrate --force: %s", out.String())
			}
			if v, err := store.SchemaVersion(ctx); err != nil || v != latest {
				t.Fatalf("after migrate --force the schema is at %d (%v), want %d", v, err, latest)
			}
		})
	}
}
