package postgres_test

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hymical/hymical/storage/postgres"
)

// The claim's plan on a table of realistic size takes a minute to seed, so
// it runs only when asked for:
//
//	go test ./storage/postgres -run TestClaimPlanAtScale -bench-explain -v
var (
	benchExplain     = flag.Bool("bench-explain", false, "run TestClaimPlanAtScale: load a large deliveries table and print the claim's plan")
	benchExplainRows = flag.Int("bench-explain-rows", 1_000_000, "deliveries TestClaimPlanAtScale loads")
)

// TestClaimPlanAtScale loads the deliveries table with many rows, in two
// shapes, and prints EXPLAIN (ANALYZE, BUFFERS) of the exact statement
// DeliveryClaim runs, in a transaction rolled back afterwards:
//
//   - steady: almost every row terminal, as after months of traffic, with
//     a few pending due, some pending in the future (retries) and some
//     processing, a few of those with expired leases;
//   - backlog: every row pending and due, as when the bench loads a
//     million deliveries before the pool drains them.
//
// It fails if the claim scans the whole table; the timings it prints are
// for reading, not asserted.
func TestClaimPlanAtScale(t *testing.T) {
	if !*benchExplain {
		t.Skip("loads a large table; run with -bench-explain (and -v to see the plans)")
	}
	rows := *benchExplainRows
	shapes := []struct {
		name  string
		state string // SQL over g, the row number
		next  string
		lease string
	}{
		{
			name: "steady",
			state: `CASE WHEN g % 1000 = 0 OR g % 100 = 5 THEN 'pending'
				WHEN g % 1000 = 1 OR g % 200 = 2 THEN 'processing'
				WHEN g % 50 = 7 THEN 'failed'
				ELSE 'delivered' END`,
			// Pending rows are due except every 100th+5 (retries later).
			next:  `CASE WHEN g % 100 = 5 THEN now() + interval '1 hour' ELSE now() - interval '1 hour' END`,
			lease: `CASE WHEN g % 1000 = 1 THEN now() - interval '1 minute' ELSE now() + interval '1 minute' END`,
		},
		{
			name:  "backlog",
			state: `'pending'`,
			next:  `now() - (g % 3600) * interval '1 second'`,
			lease: `NULL::timestamptz`,
		},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			db, _ := migrated(t)
			ctx := context.Background()
			start := time.Now()
			// Many deliveries per event, as fan-out makes them, and one
			// event per 100 rows keeps the events table realistic.
			seed := fmt.Sprintf(`
				INSERT INTO webhook_events (id, type, payload, created_at)
					SELECT 'evt_' || lpad(e::text, 10, '0'), 'submission.received', '{"type":"submission.received"}', now()
					FROM generate_series(0, %[2]d / 100) AS e;
				INSERT INTO webhook_endpoints (id, transport, url, secrets, created_at, updated_at)
					SELECT 'ep_bench_' || lpad(k::text, 3, '0'), 'http', 'https://receiver.example/', '[]', now(), now()
					FROM generate_series(0, 99) AS k;
				INSERT INTO webhook_deliveries (id, endpoint_id, event_id, state, attempts, cycle_attempts,
						next_attempt_at, claim_expires_at, claim_token, created_at, completed_at)
					SELECT 'dlv_' || lpad(g::text, 10, '0'), 'ep_bench_' || lpad((g %% 100)::text, 3, '0'),
						'evt_' || lpad((g / 100)::text, 10, '0'), st, 1, 1, %[3]s,
						CASE WHEN st = 'processing' THEN %[4]s END,
						CASE WHEN st = 'processing' THEN 'token-' || g END,
						now(), CASE WHEN st IN ('delivered', 'failed') THEN now() END
					FROM generate_series(1, %[2]d) AS g, LATERAL (SELECT %[1]s AS st) AS x;
				ANALYZE;`, sh.state, rows, sh.next, sh.lease)
			if err := db.Exec(ctx, seed); err != nil {
				t.Fatalf("seed %d rows: %v", rows, err)
			}
			counts, err := db.pool.Query(ctx, `SELECT state, count(*) FROM webhook_deliveries GROUP BY state ORDER BY state`)
			if err != nil {
				t.Fatal(err)
			}
			var mix []string
			for counts.Next() {
				var st string
				var n int64
				if err := counts.Scan(&st, &n); err != nil {
					t.Fatal(err)
				}
				mix = append(mix, fmt.Sprintf("%s %d", st, n))
			}
			if err := counts.Err(); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d deliveries seeded in %s: %s", sh.name, rows, time.Since(start).Round(time.Millisecond), strings.Join(mix, ", "))

			for _, limit := range []int{16, 64} {
				plan := explainClaim(t, db, limit)
				t.Logf("%s, LIMIT %d:\n%s", sh.name, limit, plan)
				if strings.Contains(plan, "Seq Scan on webhook_deliveries") {
					t.Errorf("%s: the claim scans the whole deliveries table", sh.name)
				}
				if m := regexp.MustCompile(`Execution Time: ([0-9.]+) ms`).FindStringSubmatch(plan); m != nil {
					t.Logf("%s, LIMIT %d: claim executes in %s ms on %d rows", sh.name, limit, m[1], rows)
				}
			}
		})
	}
}

// explainClaim runs EXPLAIN (ANALYZE, BUFFERS) of the claim in a
// transaction it rolls back, so the rows stay as seeded.
func explainClaim(t *testing.T, db *database, limit int) string {
	t.Helper()
	ctx := context.Background()
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+postgres.ClaimSQL, nil, limit, time.Minute.Microseconds())
	if err != nil {
		t.Fatalf("explain claim: %v", err)
	}
	var plan strings.Builder
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
	return plan.String()
}

// TestFanOutPlanAtScale registers 10,000 endpoints, each of a form of its
// own but two that share one, and one of every form, and prints EXPLAIN
// (ANALYZE, BUFFERS) of the plan the read of endpoints a batch of creates
// makes runs with, inside hymical_fan_out, as auto_explain reports it (-v
// to see it). It fails if the read scans a table: a create's cost must
// follow the endpoints that can match, not those that exist.
func TestFanOutPlanAtScale(t *testing.T) {
	db, _ := migrated(t)
	ctx := context.Background()
	const registered = 10_000
	// Written straight into the table: the triggers of migration 13 keep
	// webhook_endpoint_forms, whoever writes the row.
	if err := db.Exec(ctx, fmt.Sprintf(`
		INSERT INTO webhook_endpoints (id, transport, url, secrets, created_at, updated_at, event_types, form_ids)
			SELECT 'ep_' || lpad(k::text, 6, '0'), 'http', 'https://receiver.example/', '[]', now(), now(),
				'["submission.received"]', jsonb_build_array(CASE WHEN k < 2 THEN 'form_bench' ELSE 'form_' || k END)
			FROM generate_series(0, %d) AS k;
		INSERT INTO webhook_endpoints (id, transport, url, secrets, created_at, updated_at)
			VALUES ('ep_every_form', 'http', 'https://receiver.example/', '[]', now(), now());`, registered-2)); err != nil {
		t.Fatalf("seed %d endpoints: %v", registered, err)
	}

	// The plan is made once per connection and kept (hymical_fan_out
	// forces the generic plan), so it must be the same without statistics
	// (a fresh database) as with them.
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if err := db.Exec(ctx, "ANALYZE"); err != nil {
				t.Fatal(err)
			}
		}
		explainFanOut(t, db, registered, analyzed)
	}
}

// explainFanOut runs the fan-out's read on a connection of its own, with
// auto_explain reporting the plan inside hymical_fan_out.
func explainFanOut(t *testing.T, db *database, registered int, analyzed bool) {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "LOAD 'auto_explain'"); err != nil {
		t.Skipf("auto_explain, which shows the plan inside the function, does not load: %v", err)
	}
	if _, err := conn.Exec(ctx, `SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;
		SET auto_explain.log_analyze = on; SET auto_explain.log_buffers = on; SET auto_explain.log_level = notice`); err != nil {
		t.Fatal(err)
	}
	// As a batch of creates sends it: the forms of its events, and the
	// endpoints any of them is addressed to.
	for _, args := range []struct {
		forms, addressed []string
		want             int
	}{
		{[]string{"form_bench"}, []string{}, 3},
		{[]string{"form_bench", "form_17", ""}, []string{"ep_000042"}, 5},
	} {
		notices = nil
		rows, err := conn.Query(ctx, postgres.FanOutEndpointsSQL, args.forms, args.addressed)
		if err != nil {
			t.Fatalf("fan-out: %v", err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n != args.want {
			t.Errorf("fan-out of forms %q and endpoints %q read %d endpoints, want %d", args.forms, args.addressed, n, args.want)
		}
		var inner string
		for _, m := range notices {
			if strings.Contains(m, "webhook_endpoint_forms") {
				inner = m
			}
		}
		if inner == "" {
			t.Fatalf("auto_explain reported no plan of the read inside hymical_fan_out: %q", notices)
		}
		t.Logf("fan-out of forms %q and endpoints %q, %d endpoints registered, statistics %v:\n%s",
			args.forms, args.addressed, registered, analyzed, inner)
		if strings.Contains(inner, "Seq Scan") {
			t.Errorf("the fan-out of forms %q scans a table of %d endpoints (statistics: %v)", args.forms, registered, analyzed)
		}
	}
}

// TestShareClaimBuffersAtScale spreads one backlog of 200,000 due
// deliveries over 10, 1,000, 10,000 and 100,000 endpoints and reports the
// buffers a claim of 64 with a share reads to find its rows: the walk of
// the queue heads and the probe of their endpoints, each under EXPLAIN
// (ANALYZE, BUFFERS) in a transaction rolled back. It fails if they grow
// with the endpoints that have due work past the claim's 64.
//
//	go test ./storage/postgres -run TestShareClaimBuffersAtScale -bench-explain -v
func TestShareClaimBuffersAtScale(t *testing.T) {
	if !*benchExplain {
		t.Skip("loads a large table; run with -bench-explain (and -v to see the plans)")
	}
	const backlog, limit = 200_000, 64
	ctx := context.Background()
	found := map[int]int{}
	for _, endpoints := range []int{10, 1_000, 10_000, 100_000} {
		db, _ := migrated(t)
		seed := fmt.Sprintf(`
			INSERT INTO webhook_events (id, type, payload, created_at)
				SELECT 'evt_' || lpad(e::text, 10, '0'), 'submission.received', '{}', now()
				FROM generate_series(0, %[1]d / %[2]d + 1) AS e;
			INSERT INTO webhook_endpoints (id, transport, url, secrets, created_at, updated_at)
				SELECT 'ep_' || lpad(k::text, 7, '0'), 'http', 'https://receiver.example/', '[]', now(), now()
				FROM generate_series(0, %[2]d - 1) AS k;
			INSERT INTO webhook_deliveries (id, endpoint_id, event_id, state, attempts, cycle_attempts, next_attempt_at, created_at)
				SELECT 'dlv_' || lpad(g::text, 10, '0'), 'ep_' || lpad((g %% %[2]d)::text, 7, '0'),
					'evt_' || lpad((g / %[2]d)::text, 10, '0'), 'pending', 0, 0,
					now() - (g %% 3600) * interval '1 second', now()
				FROM generate_series(1, %[1]d) AS g;
			ANALYZE;`, backlog, endpoints)
		if err := db.Exec(ctx, seed); err != nil {
			t.Fatalf("seed %d rows over %d endpoints: %v", backlog, endpoints, err)
		}
		tx, err := db.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		heads := []any{nil, nil, "", []string{}, false, nil, limit}
		rows, err := tx.Query(ctx, postgres.HeadsSQL, heads...)
		ids, err := pgx.CollectRows(queried(t, rows, err), func(r pgx.CollectableRow) (string, error) {
			var id, head string
			var due, now time.Time
			var version int64
			err := r.Scan(&id, &due, &head, &version, &now)
			return id, err
		})
		if err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(ctx)
		counts := make([]int32, len(ids))
		for i := range counts {
			counts[i] = 2
		}
		walk, walkPlan := explainBuffers(t, db, postgres.HeadsSQL, heads...)
		probe, probePlan := explainBuffers(t, db, postgres.ProbeSQL, ids, counts)
		t.Logf("%d endpoints, %d due rows each: the heads walk read %d buffers, the probe of %d endpoints %d (%.1f a claimed endpoint)\n%s\n%s",
			endpoints, backlog/endpoints, walk, len(ids), probe, float64(walk+probe)/float64(len(ids)), walkPlan, probePlan)
		found[endpoints] = (walk + probe) / len(ids)
	}
	if found[100_000] > 2*found[1_000] {
		t.Errorf("buffers a claimed endpoint: %d at 100,000 endpoints, %d at 1,000: the claim's cost grows with the endpoints that have work", found[100_000], found[1_000])
	}
}

// queried is rows, failing t on err.
func queried(t *testing.T, rows pgx.Rows, err error) pgx.Rows {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// explainBuffers runs EXPLAIN (ANALYZE, BUFFERS) of q in a transaction it
// rolls back and returns the buffers its top node read (hit and read) and
// the plan.
func explainBuffers(t *testing.T, db *database, q string, args ...any) (int, string) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q, args...)
	lines, err := pgx.CollectRows(queried(t, rows, err), pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	buffers := -1
	for _, line := range lines {
		if m := regexp.MustCompile(`Buffers: shared hit=(\d+)(?: read=(\d+))?`).FindStringSubmatch(line); m != nil && buffers < 0 {
			hit, _ := strconv.Atoi(m[1])
			read, _ := strconv.Atoi(m[2])
			buffers = hit + read
		}
	}
	if buffers < 0 {
		t.Fatalf("no buffer counts in the plan:\n%s", strings.Join(lines, "\n"))
	}
	return buffers, strings.Join(lines, "\n")
}
