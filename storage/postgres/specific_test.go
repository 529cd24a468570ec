package postgres_test

// Tests of what only PostgreSQL does: several processes on one database,
// the query plans, the database clock, the DSN handling. The state machine
// itself is proven by storagetest.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/jackc/pgx/v5"
)

func migrated(t *testing.T) (*database, *postgres.Store) {
	t.Helper()
	db := newDatabase(t).(*database)
	s := db.openStore(t)
	if _, err := s.Migrate(context.Background(), storage.MigrateParams{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db, s
}

func seedEndpoint(t *testing.T, s storage.Store) storage.Endpoint {
	t.Helper()
	ep, err := s.EndpointCreate(context.Background(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{
		Transport: "http",
		URL:       "http://127.0.0.1:1/hook",
		Secrets:   []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldA==", nil)},
	}})
	if err != nil {
		t.Fatalf("create endpoint: %v", err)
	}
	return ep.Endpoint
}

func seedEvents(t *testing.T, s storage.Store, n int, at time.Time) []storage.Delivery {
	t.Helper()
	var out []storage.Delivery
	for i := range n {
		res, err := s.EventCreate(context.Background(), storage.Event{
			Type:      "submission.received",
			Payload:   json.RawMessage(fmt.Sprintf(`{"n": %d}`, i)),
			CreatedAt: at,
		})
		if err != nil {
			t.Fatalf("create event: %v", err)
		}
		out = append(out, res.Deliveries...)
	}
	return out
}

// SKIP LOCKED: a claimer never waits on a row another transaction has
// locked (another process mid-claim or mid-completion); it takes the other
// due rows at once and leaves that one for later.
func TestClaimSkipsLockedRowsInsteadOfWaiting(t *testing.T) {
	t.Parallel()
	db, s := migrated(t)
	seedEndpoint(t, s)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ds := seedEvents(t, s, 3, now)
	ctx := context.Background()

	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	locked := ds[1].ID
	if _, err := tx.Exec(ctx, "SELECT id FROM webhook_deliveries WHERE id = $1 FOR UPDATE", locked); err != nil {
		t.Fatal(err)
	}

	// A claim that waited for the lock would hit this deadline.
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	claims, err := s.DeliveryClaim(waitCtx, storage.DeliveryClaimParams{Limit: 10, Lease: time.Minute, Now: now})
	if err != nil {
		t.Fatalf("claim while a row is locked: %v", err)
	}
	if len(claims) != 2 {
		t.Fatalf("claimed %d rows, want the 2 unlocked ones", len(claims))
	}
	for _, c := range claims {
		if c.Delivery.ID == locked {
			t.Fatalf("claimed %s, which another transaction holds locked", locked)
		}
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	claims, err = s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 10, Lease: time.Minute, Now: now})
	if err != nil || len(claims) != 1 || claims[0].Delivery.ID != locked {
		t.Fatalf("after the lock is released: %v %v, want exactly %s", claims, err, locked)
	}
}

// Many processes starting at once all run Migrate; the advisory lock lets
// each migration run exactly once and every caller succeed.
func TestConcurrentMigratorsApplyEachMigrationOnce(t *testing.T) {
	t.Parallel()
	db := newDatabase(t).(*database)
	ctx := context.Background()
	const n = 6
	stores := make([]*postgres.Store, n)
	for i := range stores {
		stores[i] = db.openStore(t)
	}
	results := make([]storage.MigrateResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() { results[i], errs[i] = stores[i].Migrate(ctx, storage.MigrateParams{}) })
	}
	wg.Wait()
	latest, err := migrations.Latest()
	if err != nil {
		t.Fatal(err)
	}
	applied := map[string]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("migrator %d: %v", i, errs[i])
		}
		if results[i].To != latest {
			t.Errorf("migrator %d ended at %d, want %d", i, results[i].To, latest)
		}
		for _, name := range results[i].Applied {
			applied[name]++
		}
	}
	for _, name := range []string{"0001_initial", "0002_claim_token", "0003_cycle_attempts", "0004_workers", "0005_claim_order_indexes", "0006_endpoint_controls", "0007_unsent_reason", "0008_fair_share", "0009_secrets_key", "0010_endpoint_delete", "0011_operation_keys", "0012_promote_of", "0013_endpoint_forms", "0014_endpoint_queues", "0015_queue_versions", "0016_access", "0017_endpoint_headers", "0018_console_sessions"} {
		if applied[name] != 1 {
			t.Errorf("%s applied %d times, want once", name, applied[name])
		}
	}
	rows, err := db.QueryInt(ctx, "SELECT count(*) FROM hymical_schema_migrations")
	if err != nil || rows != int64(latest) {
		t.Errorf("hymical_schema_migrations has %d rows (%v), want %d", rows, err, latest)
	}
}

// With many terminal rows and few due ones, the claim must reach the due
// rows through the partial indexes, not a scan of the whole table.
func TestClaimPlanUsesPartialIndexes(t *testing.T) {
	t.Parallel()
	db, s := migrated(t)
	ep := seedEndpoint(t, s)
	ctx := context.Background()
	// One event per delivery, as the unique (event_id, endpoint_id) needs.
	// Of 20000 rows, 20 are pending and due and 20 processing with an
	// expired lease; 2000 are pending but waiting out a retry delay and 180
	// hold live leases; the rest are delivered.
	seed := fmt.Sprintf(`
		INSERT INTO webhook_events (id, type, payload, created_at)
			SELECT 'evt_' || lpad(g::text, 8, '0'), 'submission.received', '{}', now()
			FROM generate_series(1, 20000) AS g;
		INSERT INTO webhook_deliveries (id, endpoint_id, event_id, state, attempts, cycle_attempts,
				next_attempt_at, claim_expires_at, claim_token, created_at, completed_at)
			SELECT 'dlv_' || lpad(g::text, 8, '0'), '%s', 'evt_' || lpad(g::text, 8, '0'), s.state,
				1, 1, s.next,
				CASE WHEN s.state = 'processing' THEN s.lease END,
				CASE WHEN s.state = 'processing' THEN 'token-' || g END,
				now(), CASE WHEN s.state = 'delivered' THEN now() END
			FROM generate_series(1, 20000) AS g,
				LATERAL (SELECT
					CASE WHEN g %% 1000 = 0 OR g %% 10 = 5 THEN 'pending'
						WHEN g %% 1000 = 1 OR g %% 100 = 2 THEN 'processing'
						ELSE 'delivered' END AS state,
					CASE WHEN g %% 10 = 5 THEN now() + interval '1 hour' ELSE now() - interval '1 hour' END AS next,
					CASE WHEN g %% 1000 = 1 THEN now() - interval '1 minute' ELSE now() + interval '1 minute' END AS lease
				) AS s;
		ANALYZE webhook_deliveries;`, ep.ID)
	if err := db.Exec(ctx, seed); err != nil {
		t.Fatalf("seed: %v", err)
	}
	var plan strings.Builder
	rows, err := db.pool.Query(ctx, "EXPLAIN "+postgres.ClaimSQL, nil, 10, time.Minute.Microseconds())
	if err != nil {
		t.Fatalf("explain claim: %v", err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.String(), "webhook_deliveries_pending_order") {
		t.Errorf("claim plan does not use webhook_deliveries_pending_order:\n%s", plan.String())
	}
	if !strings.Contains(plan.String(), "webhook_deliveries_processing_order") {
		t.Errorf("claim plan does not use webhook_deliveries_processing_order:\n%s", plan.String())
	}
	if strings.Contains(plan.String(), "Seq Scan on webhook_deliveries") {
		t.Errorf("claim plan scans the whole deliveries table:\n%s", plan.String())
	}

	claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 100, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 40 {
		t.Errorf("claimed %d, want the 20 pending and 20 expired rows", len(claims))
	}
}

// A zero Now means the database clock: leases are measured from the
// server's now(), whatever this host's clock says.
func TestZeroNowUsesTheDatabaseClock(t *testing.T) {
	t.Parallel()
	db, s := migrated(t)
	seedEndpoint(t, s)
	ctx := context.Background()
	// A delivery due a minute in the future by the database clock: a host
	// whose clock ran ahead must still not claim it.
	ds := seedEvents(t, s, 1, time.Time{})
	if err := db.Exec(ctx, "UPDATE webhook_deliveries SET next_attempt_at = now() + interval '1 minute'"); err != nil {
		t.Fatal(err)
	}
	claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 1, Lease: time.Hour})
	if err != nil || len(claims) != 0 {
		t.Fatalf("claimed %v (%v) before it was due by the database clock", claims, err)
	}
	if err := db.Exec(ctx, "UPDATE webhook_deliveries SET next_attempt_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	claims, err = s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 1, Lease: time.Hour})
	if err != nil || len(claims) != 1 || claims[0].Delivery.ID != ds[0].ID {
		t.Fatalf("claim of a due delivery: %v %v", claims, err)
	}
	lease, err := db.QueryInt(ctx, "SELECT extract(epoch FROM claim_expires_at - now())::bigint FROM webhook_deliveries")
	if err != nil {
		t.Fatal(err)
	}
	if lease < 3590 || lease > 3600 {
		t.Errorf("lease ends %ds after the database's now, want about 3600", lease)
	}
}

// Every time the Store returns is in UTC, whatever time.Local is.
func TestTimesAreUTC(t *testing.T) {
	t.Parallel()
	_, s := migrated(t)
	ep := seedEndpoint(t, s)
	ctx := context.Background()
	res, err := s.EventCreate(ctx, storage.Event{
		Type: "submission.received", Payload: json.RawMessage(`{}`),
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600)),
	})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 1, Lease: time.Minute,
		Now: time.Date(2026, 1, 2, 9, 0, 0, 0, time.FixedZone("Y", -7200))})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v %v", claims, err)
	}
	for name, tm := range map[string]time.Time{
		"endpoint created_at":      ep.CreatedAt,
		"endpoint updated_at":      ep.UpdatedAt,
		"event created_at":         res.Event.CreatedAt,
		"delivery next_attempt_at": res.Deliveries[0].NextAttemptAt,
		"claim expires_at":         *claims[0].Delivery.ClaimExpiresAt,
		"claim event created_at":   claims[0].Event.CreatedAt,
	} {
		if tm.Location() != time.UTC {
			t.Errorf("%s is in %v, want UTC", name, tm.Location())
		}
	}
	if want := time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC); !res.Event.CreatedAt.Equal(want) {
		t.Errorf("event created_at %v, want %v", res.Event.CreatedAt, want)
	}
}

func TestOpenErrorsNeverEchoThePassword(t *testing.T) {
	t.Parallel()
	const pw = "s3cr3t-PaSS"
	for _, tc := range []struct {
		name, dsn, want string
	}{
		{"bad port in URL", "postgres://u:" + pw + "@127.0.0.1:notaport/db", "invalid port"},
		{"slash in URL password", "postgres://u:" + pw + "/x@127.0.0.1:5432/db", "invalid port"},
		{"unparseable URL", "postgres://u:" + pw + "@[::1/db", "failed to parse as URL"},
		{"unknown sslmode in URL", "postgres://u:" + pw + "@127.0.0.1:5432/db?sslmode=sometimes", "sslmode"},
		{"password in query", "postgres://u@127.0.0.1:5432/db?password=" + pw + "&sslmode=bogus", "sslmode"},
		{"keyword/value bad port", "host=127.0.0.1 port=x user=u password=" + pw, "port"},
		{"keyword/value quoted password", "host=127.0.0.1 port=x user=u password='" + pw + " x'", "port"},
		{"connection refused", "postgres://u:" + pw + "@127.0.0.1:1/db?connect_timeout=2", "connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := postgres.Open(context.Background(), tc.dsn)
			if err == nil {
				_ = s.Close()
				t.Fatal("Open succeeded")
			}
			for e := error(err); e != nil; e = errors.Unwrap(e) {
				if strings.Contains(e.Error(), pw) || strings.Contains(e.Error(), "s3cr3t") {
					t.Fatalf("error leaks the password: %v", e)
				}
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// A store on a database nobody migrated says what to do.
func TestUnmigratedDatabaseSaysToMigrate(t *testing.T) {
	t.Parallel()
	db := newDatabase(t).(*database)
	s := db.openStore(t)
	_, err := s.DeliveryClaim(context.Background(), storage.DeliveryClaimParams{Limit: 1, Lease: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "hymical migrate") {
		t.Errorf("claim on an empty database: %v, want a hint to run hymical migrate", err)
	}
	v, err := s.SchemaVersion(context.Background())
	if err != nil || v != 0 {
		t.Errorf("SchemaVersion = %d, %v; want 0", v, err)
	}
}

// An endpoint made ordered while its last delivery under way completes
// must still let its next delivery go. The interleaving: the completion
// has updated its row (and, seeing the endpoint unordered, let nothing
// go) but not committed when the update makes the endpoint ordered and
// holds its pending deliveries. If the update looked then, it would see
// the delivery still under way and let nothing go either, and the held
// delivery would wait for the endpoint's next submission. The update
// waits for the completion's row instead, and looks after it commits.
func TestAnEndpointMadeOrderedDuringACompletionLetsItsNextDeliveryGo(t *testing.T) {
	t.Parallel()
	db, s := migrated(t)
	ep := seedEndpoint(t, s)
	now := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	seedEvents(t, s, 2, now)
	ctx := context.Background()

	claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 1, Lease: time.Minute})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim one: %v %v", claims, err)
	}
	inFlight := claims[0].Delivery.ID

	// The completion, by hand: its row updated and locked, not committed.
	completion, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = completion.Rollback(ctx) }()
	if _, err := completion.Exec(ctx, `UPDATE webhook_deliveries SET state = 'delivered', attempts = 1,
		cycle_attempts = 1, completed_at = now(), claim_token = NULL, claim_expires_at = NULL
		WHERE id = $1`, inFlight); err != nil {
		t.Fatal(err)
	}

	got, err := s.EndpointGet(ctx, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	got.Ordered = true
	if err := updateAcross(t, db, completion, func() error {
		_, err := s.EndpointUpdate(ctx, got)
		return err
	}); err != nil {
		t.Fatalf("make the endpoint ordered: %v", err)
	}

	claims, err = s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || claims[0].Delivery.ID == inFlight {
		held, _ := db.QueryInt(ctx, `SELECT count(*) FROM webhook_deliveries WHERE held`)
		t.Fatalf("after the completion committed, claimed %d deliveries (%d held); want the ordered endpoint's next one, let go", len(claims), held)
	}
}

// A create that read an endpoint as disabled, and so made its delivery
// held, must not commit after the endpoint is enabled again and its held
// deliveries let go: the held delivery would wait for ever. The update
// takes the fan-out lock exclusive, which every create holds shared, so it
// waits for the create and then lets its delivery go too.
func TestAnEndpointEnabledDuringACreateLetsTheCreatesDeliveryGo(t *testing.T) {
	t.Parallel()
	db, s := migrated(t)
	ep := seedEndpoint(t, s)
	ctx := context.Background()
	disabledAt := time.Now().UTC().Truncate(time.Microsecond)
	ep.DisabledAt, ep.DisabledReason = &disabledAt, "operator"
	ep, err := s.EndpointUpdate(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}

	// The create, by hand, as createEvents writes it for a disabled
	// endpoint: under the fan-out lock, its delivery held; not committed.
	create, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = create.Rollback(ctx) }()
	for _, q := range []string{
		`SELECT pg_advisory_xact_lock_shared(` + fmt.Sprint(postgres.FanOutLockKey) + `)`,
		`INSERT INTO webhook_events (id, type, payload, created_at) VALUES ('evt_during', 'submission.received', '\x7b7d', now())`,
		`INSERT INTO webhook_deliveries (id, endpoint_id, event_id, state, next_attempt_at, created_at, held)
			VALUES ('dlv_during', '` + ep.ID + `', 'evt_during', 'pending', now(), now(), true)`,
	} {
		if _, err := create.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	ep.DisabledAt, ep.DisabledReason = nil, ""
	if err := updateAcross(t, db, create, func() error {
		_, err := s.EndpointUpdate(ctx, ep)
		return err
	}); err != nil {
		t.Fatalf("enable the endpoint: %v", err)
	}
	claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || claims[0].Delivery.ID != "dlv_during" {
		held, _ := db.QueryInt(ctx, `SELECT count(*) FROM webhook_deliveries WHERE held`)
		t.Fatalf("after the create committed, claimed %d deliveries (%d held); want dlv_during, let go", len(claims), held)
	}
}

// updateAcross runs update while tx is open, and commits tx once update
// has either finished or is waiting for a lock (tx's, presumably); it
// returns update's error. Either way the interleaving the callers test
// happened: without the lock, the update ran wholly inside tx's window.
func updateAcross(t *testing.T, db *database, tx pgx.Tx, update func() error) error {
	t.Helper()
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- update() }()
	testwait.For(t, 10*time.Second, func() error {
		if len(done) > 0 {
			return nil // the update finished
		}
		waiting, err := db.QueryInt(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`)
		if err != nil {
			t.Fatal(err)
		}
		if waiting == 0 {
			return errors.New("the update neither finished nor waited for a lock")
		}
		return nil
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return <-done
}

// A claim with a share picks its rows before it locks them. When another
// transaction (another process's claim, mid-way) holds some of the picked
// rows, the claim must take the endpoints' next due rows instead, as the
// plain claim does with SKIP LOCKED, not come back short while rows are
// due. Rows another transaction holds count as taken by it: the claim
// gives each endpoint its room among the rest. With idle endpoints beside
// them too.
func TestShareClaimTakesOtherDueRowsWhenPickedOnesAreLocked(t *testing.T) {
	t.Parallel()
	for _, idle := range []int{0, 40} {
		t.Run(fmt.Sprintf("%d idle endpoints", idle), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, s := migrated(t)
			for range idle {
				if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: "http://127.0.0.1:1/idle",
					FormIDs: []string{"form_idle"}, Secrets: []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldA==", nil)}}}); err != nil {
					t.Fatal(err)
				}
			}
			seedEndpoint(t, s)
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			ds := seedEvents(t, s, 6, now)

			tx, err := db.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			// The two oldest: what a claim with room 2 picks first.
			if _, err := tx.Exec(ctx, "SELECT id FROM webhook_deliveries WHERE id = ANY($1) FOR UPDATE",
				[]string{ds[0].ID, ds[1].ID}); err != nil {
				t.Fatal(err)
			}

			claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{
				Limit: 2, Lease: time.Minute, Now: now.Add(time.Minute), Share: &storage.ClaimShare{Default: 2}})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range claims {
				got = append(got, c.Delivery.ID)
			}
			if want := []string{ds[2].ID, ds[3].ID}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("with the two oldest locked by another transaction, a claim with room 2 took %v, want the next two due %v", got, want)
			}
		})
	}
}

// A commit the store acknowledges survives a PostgreSQL crash whatever
// synchronous_commit default the database was given: off is raised to on
// for the store's own connections, and the stronger or equal values an
// operator may choose (waiting for a standby, say) are kept as they are.
func TestStoreCommitsDurablyWhateverTheDatabaseDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dflt, want string }{
		{"off", "on"},
		{"local", "local"},
		{"on", "on"},
		{"remote_write", "remote_write"},
		{"remote_apply", "remote_apply"},
	} {
		t.Run(tc.dflt, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := newDatabase(t).(*database)
			set := fmt.Sprintf(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %%I SET synchronous_commit = %%L', current_database(), '%s'); END $$`, tc.dflt)
			if err := db.Exec(ctx, set); err != nil {
				t.Fatalf("set the database default: %v", err)
			}
			s := db.openStore(t)
			got, err := s.Settings(ctx, "synchronous_commit", "no_such_setting")
			if err != nil {
				t.Fatal(err)
			}
			if got["synchronous_commit"] != tc.want || len(got) != 1 {
				t.Errorf("database default %s: the store's sessions read %v, want synchronous_commit %s and nothing for an unknown name", tc.dflt, got, tc.want)
			}
		})
	}
}
