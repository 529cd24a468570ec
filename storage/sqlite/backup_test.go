package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hymical/hymical/storage"
)

// TestBackupIntoIsASnapshotWhileWritesGoOn copies a database while events
// are being created on it: the copy holds every event committed before the
// copy began (most of them still in the WAL, where a copy of the file alone
// misses them), each event with its delivery and no delivery without its
// event, and SQLite finds it intact.
func TestBackupIntoIsASnapshotWhileWritesGoOn(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := t.Context()
	if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: testEndpoint()}); err != nil {
		t.Fatal(err)
	}
	var created atomic.Int64
	create := func(ctx context.Context) error {
		_, err := s.EventCreate(ctx, storage.Event{Type: "submission.received",
			Payload: fmt.Appendf(nil, `{"n":%d}`, created.Load())})
		if err == nil {
			created.Add(1)
		}
		return err
	}
	for range 300 {
		if err := create(ctx); err != nil {
			t.Fatal(err)
		}
	}

	writing, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var writeErr error
	going := make(chan struct{}) // closed after 100 writes, or when writing stops
	wg.Go(func() {
		defer func() {
			if created.Load() < 400 {
				close(going)
			}
		}()
		for writing.Err() == nil {
			if err := create(writing); err != nil {
				if !errors.Is(err, context.Canceled) {
					writeErr = err
				}
				return
			}
			if created.Load() == 400 {
				close(going)
			}
		}
	})
	// The writer gets going first, so the copy overlaps writes.
	<-going
	before := created.Load()
	to := filepath.Join(t.TempDir(), "copy.db")
	err := s.BackupInto(ctx, to)
	stop()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if writeErr != nil {
		t.Fatalf("creating events during the copy: %v", writeErr)
	}

	copyDB, err := sql.Open("sqlite", to)
	if err != nil {
		t.Fatal(err)
	}
	defer copyDB.Close()
	var check string
	if err := copyDB.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check on the copy: %q, %v", check, err)
	}
	count := func(query string) int64 {
		t.Helper()
		var n int64
		if err := copyDB.QueryRow(query).Scan(&n); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return n
	}
	events := count(`SELECT count(*) FROM webhook_events`)
	if events < before || events > created.Load() {
		t.Errorf("the copy holds %d events; %d were committed before it began and %d by the end", events, before, created.Load())
	}
	if n := count(`SELECT count(*) FROM webhook_events e WHERE NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id)`); n != 0 {
		t.Errorf("%d events in the copy have no delivery", n)
	}
	if n := count(`SELECT count(*) FROM webhook_deliveries d WHERE NOT EXISTS (SELECT 1 FROM webhook_events e WHERE e.id = d.event_id)`); n != 0 {
		t.Errorf("%d deliveries in the copy have no event", n)
	}
	if fi, err := os.Stat(to); err != nil || fi.Size() == 0 {
		t.Errorf("the copy: %v, %v", fi, err)
	}
}
