package sqlite

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/groupcommit"
	"github.com/hymical/hymical/storage"
)

// capPages sets the writer connection's max_page_count, SQLite's own limit
// on how far the file may grow: writes that need a page beyond it fail
// with SQLITE_FULL, as they do when the disk under the file is full. Below
// the file's current size, SQLite holds it at the current size.
func capPages(t *testing.T, s *Store, pages int) {
	t.Helper()
	ctx := context.Background()
	// The writer pool has one connection; Conn waits for it.
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA max_page_count = "+strconv.Itoa(pages)); err != nil {
		t.Fatalf("set max_page_count: %v", err)
	}
}

// PostgreSQL cannot be filled from a test (its disk is the server's), so
// the rule that a write failing for lack of space is ErrNoSpace and keeps
// nothing is shown here, on a real file, rather than in storagetest.
func TestAWriteWithoutSpaceIsErrNoSpaceAndKeepsNothing(t *testing.T) {
	t.Parallel()
	s, db := openStore(t)
	ctx := context.Background()
	claimed := seed(t, s, 40)
	claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: len(claimed), Lease: time.Hour})
	if err != nil || len(claims) != len(claimed) {
		t.Fatalf("claim: %d claims, %v", len(claims), err)
	}
	count := func(table string) int64 {
		t.Helper()
		n, err := db.QueryInt(ctx, "SELECT count(*) FROM "+table)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	capPages(t, s, 1) // no page beyond those the file has

	t.Run("creates, alone and batched together, fail with ErrNoSpace and write nothing", func(t *testing.T) {
		events := count("webhook_events")
		pad := strings.Repeat("x", 400)
		var (
			mu       sync.Mutex
			accepted int
			refused  int
		)
		// Concurrent creates share transactions (see createEvents): the
		// one that hits the limit must not leave its batch with another
		// error, nor any create of the batch half written.
		for round := 0; refused < 16 && round < 200; round++ {
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					_, err := s.EventCreate(ctx, storage.Event{Type: "t", Payload: []byte(`{"pad":"` + pad + `"}`)})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						accepted++
					case errors.Is(err, storage.ErrNoSpace):
						refused++
						if !strings.Contains(err.Error(), "free space on its volume or grow the volume") {
							t.Errorf("error %q does not say what to do", err)
						}
					default:
						t.Errorf("create: %v, want nil or ErrNoSpace", err)
					}
				})
			}
			wg.Wait()
		}
		if refused < 16 {
			t.Fatalf("%d creates refused for lack of space, want the file to fill", refused)
		}
		// One batch, formed by hand so it surely holds several creates
		// when the file is full: each must hear why.
		batch := make(eventBatch, 3)
		for i := range batch {
			batch[i] = &groupcommit.Call[storage.Event, storage.EventCreateResult]{Ctx: ctx,
				In: storage.Event{ID: storage.NewID("evt"), Type: "t", Payload: []byte(`{"pad":"` + pad + `"}`), CreatedAt: s.now(time.Time{})}}
		}
		s.createEvents(batch)
		for i, c := range batch {
			if !errors.Is(c.Err, storage.ErrNoSpace) {
				t.Errorf("create %d of a batch on a full file: %v, want ErrNoSpace", i, c.Err)
			}
		}
		if got := count("webhook_events"); got != events+int64(accepted) {
			t.Fatalf("%d events written, %d creates answered success", got-events, accepted)
		}
		if got := count("webhook_deliveries"); got != events+int64(accepted) {
			t.Fatalf("%d deliveries for %d events: a create was half written", got, events+int64(accepted))
		}
	})

	t.Run("a completion fails with ErrNoSpace, changes nothing, and succeeds once there is room", func(t *testing.T) {
		// Errors at their longest, so each attempt row takes room.
		long := strings.Repeat("e", storage.MaxErrorBytes)
		complete := func(c storage.Claim) error {
			res, err := s.DeliveryCompleteBatch(ctx, []storage.DeliveryCompleteParams{{
				DeliveryID: c.Delivery.ID, Token: c.Token, Outcome: storage.OutcomeRetryable, Error: long,
				RetryDelay: time.Minute, MaxCycleAttempts: 5,
			}})
			if err != nil {
				return err
			}
			return res[0].Err
		}
		var full *storage.Claim
		for i := range claims {
			err := complete(claims[i])
			if errors.Is(err, storage.ErrNoSpace) {
				full = &claims[i]
				break
			}
			if err != nil {
				t.Fatalf("complete: %v, want nil or ErrNoSpace", err)
			}
		}
		if full == nil {
			t.Fatalf("%d completions with %d-byte errors all fit under the page limit", len(claims), len(long))
		}
		d, err := s.DeliveryGet(ctx, full.Delivery.ID)
		if err != nil {
			t.Fatal(err)
		}
		attempts, err := db.QueryInt(ctx, "SELECT count(*) FROM webhook_delivery_attempts WHERE delivery_id = '"+d.ID+"'")
		if err != nil {
			t.Fatal(err)
		}
		if d.State != storage.StateProcessing || d.Attempts != 0 || d.CycleAttempts != 0 || attempts != 0 {
			t.Fatalf("after a completion refused for lack of space: state %s, attempts %d/%d, %d attempt rows; want it untouched",
				d.State, d.Attempts, d.CycleAttempts, attempts)
		}

		capPages(t, s, 1<<20) // space freed
		if err := complete(*full); err != nil {
			t.Fatalf("the same completion once there is room: %v", err)
		}
		if _, err := s.EventCreate(ctx, storage.Event{Type: "t", Payload: []byte(`{}`)}); err != nil {
			t.Fatalf("a create once there is room: %v", err)
		}
	})
}
