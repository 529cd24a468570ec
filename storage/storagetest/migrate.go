package storagetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/storage"
)

// seedRow is a delivery written straight into an old schema.
type seedRow struct {
	id       string
	state    storage.DeliveryState
	attempts int
	cycle    int // written only when the schema has cycle_attempts
}

func testMigrations(t *testing.T, b Backend) {
	all, err := migrations.Postgres()
	if err != nil {
		t.Fatal(err)
	}
	latest := len(all)

	t.Run("a fresh database migrates to the newest version once", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		s := b.NewDatabase(t).Open(t)
		if v, err := s.SchemaVersion(ctx); err != nil || v != 0 {
			t.Fatalf("fresh schema version = %d, %v; want 0", v, err)
		}
		res, err := s.Migrate(ctx, storage.MigrateParams{})
		if err != nil {
			t.Fatal(err)
		}
		if res.From != 0 || res.To != latest || len(res.Applied) != latest || res.Applied[1] != "0002_claim_token" {
			t.Fatalf("migrate result = %+v", res)
		}
		res, err = s.Migrate(ctx, storage.MigrateParams{})
		if err != nil || res.From != latest || res.To != latest || len(res.Applied) != 0 {
			t.Fatalf("second migrate = %+v, %v; want nothing applied", res, err)
		}
		_, err = s.Migrate(ctx, storage.MigrateParams{To: latest + 1})
		wantErr(t, err, storage.ErrInvalid, "migrate past the newest version")
		_, err = s.Migrate(ctx, storage.MigrateParams{To: 1})
		wantErr(t, err, storage.ErrInvalid, "migrate backwards")
	})

	t.Run("a database newer than this build is refused", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		db := b.NewDatabase(t)
		s := db.Open(t)
		if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
			t.Fatal(err)
		}
		if err := db.Exec(ctx, fmt.Sprintf("INSERT INTO hymical_schema_migrations (version, name, applied_at) VALUES (%d, 'from_the_future', %s)",
			latest+1, db.TimeLiteral(time.Now()))); err != nil {
			t.Fatal(err)
		}
		if v, _ := s.SchemaVersion(ctx); v != latest+1 {
			t.Fatalf("schema version = %d, want %d", v, latest+1)
		}
		_, err := s.Migrate(ctx, storage.MigrateParams{})
		wantErr(t, err, storage.ErrSchemaUnknown, "migrate a database from a newer build")
	})

	t.Run("endpoints written before the form index are fanned out by it after the upgrade", func(t *testing.T) {
		t.Parallel()
		testFanOutAfterUpgrade(t, b)
	})

	for stop := 1; stop < latest; stop++ {
		t.Run(fmt.Sprintf("a database stopped at version %d upgrades with its rows intact", stop), func(t *testing.T) {
			t.Parallel()
			testUpgradeFrom(t, b, stop, latest)
		})
	}
}

func testUpgradeFrom(t *testing.T, b Backend, stop, latest int) {
	ctx := t.Context()
	db := b.NewDatabase(t)
	s := db.Open(t)
	res, err := s.Migrate(ctx, storage.MigrateParams{To: stop})
	if err != nil {
		t.Fatal(err)
	}
	if res.To != stop || len(res.Applied) != stop {
		t.Fatalf("migrate to %d = %+v", stop, res)
	}

	hasCycle := stop >= 3
	past := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	ts := db.TimeLiteral(past)
	secrets, err := storage.EncodeSecrets([]storage.Secret{storage.NewSecret("whsec_b2xkc2VjcmV0", nil)})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"type":"submission.received","submission":{"id":"sub_old"}}`)
	rows := []seedRow{
		{"dlv_failed", storage.StateFailed, 3, 1}, // cycle 1: replayed once before
		{"dlv_pending", storage.StatePending, 2, 2},
		{"dlv_stuck", storage.StateProcessing, 1, 1}, // its worker died; the lease is long gone
		{"dlv_done", storage.StateDelivered, 1, 1},
	}
	var sql strings.Builder
	fmt.Fprintf(&sql, "INSERT INTO webhook_endpoints (id, transport, url, secrets, created_at, updated_at) VALUES ('ep_old', 'http', 'https://old.example/hook', '%s', %s, %s);\n", secrets, ts, ts)
	for i, r := range rows {
		fmt.Fprintf(&sql, "INSERT INTO webhook_events (id, type, form_id, submission_id, payload, created_at) VALUES ('evt_%d', 'submission.received', 'form_1', 'sub_old', %s, %s);\n", i, db.BlobLiteral(payload), ts)
		completed, lease := "NULL", "NULL"
		if r.state.Terminal() {
			completed = ts
		}
		if r.state == storage.StateProcessing {
			lease = ts
		}
		cols, vals := "", ""
		if hasCycle {
			cols, vals = ", cycle_attempts", fmt.Sprintf(", %d", r.cycle)
		}
		fmt.Fprintf(&sql, "INSERT INTO webhook_deliveries (id, endpoint_id, event_id, state, attempts, next_attempt_at, claim_expires_at, created_at, completed_at%s) VALUES ('%s', 'ep_old', 'evt_%d', '%s', %d, %s, %s, %s, %s%s);\n",
			cols, r.id, i, r.state, r.attempts, ts, lease, ts, completed, vals)
		for n := 1; n <= r.attempts; n++ {
			outcome := storage.OutcomeRetryable
			if r.state == storage.StateDelivered {
				outcome = storage.OutcomeDelivered
			}
			fmt.Fprintf(&sql, "INSERT INTO webhook_delivery_attempts (delivery_id, number, outcome, http_status, error, started_at, finished_at) VALUES ('%s', %d, '%s', 503, 'old error', %s, %s);\n",
				r.id, n, outcome, ts, ts)
		}
	}
	// From 10 on, POST /v1/endpoints records its keys: one made before
	// the upgrade must still answer its repeat after it.
	// From 11 on, a key also says which operation made it.
	hasKeys := stop >= 10
	switch {
	case stop >= 11:
		fmt.Fprintf(&sql, "INSERT INTO webhook_idempotency_keys (key, operation, endpoint_id, request_hash, created_at) VALUES ('endpoint:old', 'endpoint.create', 'ep_old', 'h_old', %s);\n", ts)
	case hasKeys:
		fmt.Fprintf(&sql, "INSERT INTO webhook_idempotency_keys (key, endpoint_id, request_hash, created_at) VALUES ('endpoint:old', 'ep_old', 'h_old', %s);\n", ts)
	}
	if err := db.Exec(ctx, sql.String()); err != nil {
		t.Fatalf("seed rows into schema version %d: %v", stop, err)
	}

	res, err = s.Migrate(ctx, storage.MigrateParams{})
	if err != nil {
		t.Fatalf("upgrade from %d: %v", stop, err)
	}
	if res.From != stop || res.To != latest || len(res.Applied) != latest-stop {
		t.Fatalf("upgrade from %d = %+v", stop, res)
	}

	for _, r := range rows {
		d, err := s.DeliveryGet(ctx, r.id)
		if err != nil {
			t.Fatal(err)
		}
		wantCycle := r.attempts // backfilled from attempts
		if hasCycle {
			wantCycle = r.cycle
		}
		wantState(t, d, r.state, r.attempts, wantCycle)
		if d.UnsentReason != "" {
			t.Fatalf("%s: unsent reason %q after upgrade, want none", r.id, d.UnsentReason)
		}
		as, err := s.AttemptList(ctx, r.id)
		if err != nil {
			t.Fatal(err)
		}
		if len(as) != r.attempts {
			t.Fatalf("%s: %d attempts after upgrade, want %d", r.id, len(as), r.attempts)
		}
		wantNumbers(t, as)
	}
	ep, err := s.EndpointGet(ctx, "ep_old")
	if err != nil || len(ep.Secrets) != 1 || ep.Secrets[0].Reveal() != "whsec_b2xkc2VjcmV0" {
		t.Fatalf("endpoint after upgrade: %+v, %v", ep, err)
	}
	if hasKeys {
		again, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http",
			URL: "https://old.example/hook", Secrets: []storage.Secret{storage.NewSecret("whsec_bmV3", nil)}},
			Idempotency: &storage.Idempotency{Key: "endpoint:old", RequestHash: "h_old"}})
		if err != nil || !again.Duplicate || again.Endpoint.ID != "ep_old" {
			t.Fatalf("a key recorded before the upgrade, repeated after it: %+v, %v; want ep_old again", again, err)
		}
	}
	ev, err := s.EventGet(ctx, "evt_0")
	if err != nil || string(ev.Payload) != string(payload) {
		t.Fatalf("event after upgrade: %q, %v", ev.Payload, err)
	}

	// The upgraded rows obey the current machine: the stuck one is
	// reclaimed, numbers continue from the stored row, replay resets the cycle.
	now := time.Now().UTC()
	claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 10, Lease: lease, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(claims); len(got) != 2 {
		t.Fatalf("claimed %v after upgrade, want dlv_pending and dlv_stuck", got)
	}
	for _, c := range claims {
		_, a, err := s.DeliveryComplete(ctx, completeParams(c, storage.OutcomeDelivered, now, 0))
		if err != nil {
			t.Fatal(err)
		}
		if a.Number != c.Delivery.Attempts+1 {
			t.Fatalf("%s: new attempt numbered %d, want %d", c.Delivery.ID, a.Number, c.Delivery.Attempts+1)
		}
	}
	d, err := s.DeliveryReplay(ctx, storage.DeliveryReplayParams{DeliveryID: "dlv_failed", Actor: "ops", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, d.Delivery, storage.StatePending, 3, 0)
	claims, err = s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 10, Lease: lease, Now: now})
	if err != nil || len(claims) != 1 || claims[0].Delivery.ID != "dlv_failed" {
		t.Fatalf("claim replayed delivery: %v, %v", claimIDs(claims), err)
	}
	_, a, err := s.DeliveryComplete(ctx, completeParams(claims[0], storage.OutcomeDelivered, now, 0))
	if err != nil || a.Number != 4 {
		t.Fatalf("attempt after replay numbered %d, %v; want 4", a.Number, err)
	}
}
