package sqlite

import (
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/storage"
)

// fillDelivered creates n events of about size bytes each for one
// endpoint, and marks their deliveries delivered an hour ago, as the
// worker would have.
func fillDelivered(t *testing.T, s *Store, db *testDatabase, n, size int) {
	t.Helper()
	ctx := t.Context()
	if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: testEndpoint()}); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", size)
	for i := range n {
		if _, err := s.EventCreate(ctx, storage.Event{Type: "submission.received",
			Payload: fmt.Appendf(nil, `{"n":%d,"pad":"%s"}`, i, pad)}); err != nil {
			t.Fatalf("create event %d: %v", i, err)
		}
	}
	if err := db.Exec(ctx, `UPDATE webhook_deliveries SET state = 'delivered', completed_at = `+
		db.TimeLiteral(time.Now().Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}
}

// fileSize is the database file's size once the WAL has been copied back
// into it, as SQLite's automatic checkpoint does: in WAL mode a file is
// cut to its new length only then.
func fileSize(t *testing.T, db *testDatabase) int64 {
	t.Helper()
	if err := db.Exec(t.Context(), `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(db.path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestPruneGivesDiskBack is retention on a disk that must not fill: rows
// removed by a prune give their pages back to the file system, in passes
// of bounded size, rather than staying in the file as free pages.
func TestPruneGivesDiskBack(t *testing.T) {
	t.Parallel()
	s, db := openStore(t)
	ctx := t.Context()
	// About 8 MB of payloads, three batches of the retention job.
	fillDelivered(t, s, db, 2500, 3000)
	before := fileSize(t, db)
	if before < 8<<20 {
		t.Fatalf("the file is %d bytes before the prune, want at least 8 MB for the test to mean something", before)
	}
	pruned := 0
	for {
		n, err := s.DeliveryPrune(ctx, storage.DeliveryPruneParams{CompletedBefore: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		pruned += n
	}
	if pruned != 2500 {
		t.Fatalf("pruned %d deliveries, want 2500", pruned)
	}
	after := fileSize(t, db)
	free, err := db.QueryInt(ctx, `PRAGMA freelist_count`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("file %d bytes before the prune, %d after, %d pages still free", before, after, free)
	if after > before/4 {
		t.Errorf("the file is %d bytes after pruning every delivery, %d before: the freed pages were not given back", after, before)
	}
	if free != 0 {
		t.Errorf("%d pages are still on the free list after the prunes", free)
	}
}

// TestMigrateConvertsAnOlderDatabase is a file made before new databases
// were created in incremental auto_vacuum mode: its mode changes only
// with a VACUUM, which Migrate runs when the live data is small and
// otherwise leaves to the operator, with a warning that says how.
func TestMigrateConvertsAnOlderDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		convertMax int64
		wantMode   int64
		wantLog    string
	}{
		{"small: converted at once", vacuumConvertMax, autoVacuumIncremental, "converted the database to incremental vacuum"},
		{"over the limit: left alone, with the command", 64 << 10, 0, "PRAGMA auto_vacuum=INCREMENTAL; VACUUM;"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "hymical.db")
			// As an older build left it: no auto_vacuum, and some data.
			old, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)")
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{
				`CREATE TABLE filler (b BLOB)`,
				`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) INSERT INTO filler SELECT randomblob(1000) FROM n`,
			} {
				if _, err := old.ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			old.Close()

			logs := &syncbuf.Buffer{}
			s, err := Open(ctx, path, storage.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			s.vacuumConvertMax = tt.convertMax
			if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
				t.Fatal(err)
			}
			var mode int64
			if err := s.writer.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
				t.Fatal(err)
			}
			if mode != tt.wantMode {
				t.Errorf("auto_vacuum is %d after Migrate, want %d", mode, tt.wantMode)
			}
			if !strings.Contains(logs.String(), tt.wantLog) {
				t.Errorf("the log does not say %q:\n%s", tt.wantLog, logs)
			}
		})
	}
}
