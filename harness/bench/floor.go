package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The floor phase answers how fast PostgreSQL on this machine can do the
// database's part of a delivery at all, apart from everything the server
// adds. On a fresh database with the server's schema, it runs the least
// SQL a delivery needs — the event and its deliveries inserted, the
// deliveries claimed oldest first and completed, an attempt recorded —
// with nothing the server does around it: no HTTP, no signing, no plugin,
// no per-delivery results read back; 16 submissions to an ingest statement
// (the server batches creates only as far as callers arrive together) and
// the worker's batch size for claims and completions. An end-to-end phase
// does all of this and sends too, so with batches no larger than these the
// floor's rate bounds it on the same machine.

// floorIngestSQL inserts a batch of submissions and their deliveries in one
// statement: $1 the events' ids, $2 their payloads, $3 the endpoints every
// event fans out to.
const floorIngestSQL = `
WITH ev AS (
	INSERT INTO webhook_events (id, type, form_id, submission_id, payload, created_at)
	SELECT x.id, 'submission.received', 'form_bench', x.id, x.payload, now()
	FROM unnest($1::text[], $2::bytea[]) AS x (id, payload)
	RETURNING id, created_at
)
INSERT INTO webhook_deliveries (id, endpoint_id, event_id, state, attempts, cycle_attempts,
	next_attempt_at, created_at, held)
SELECT ev.id || '_' || ep.id, ep.id, ev.id, 'pending', 0, 0, ev.created_at, ev.created_at, false
FROM ev CROSS JOIN unnest($3::text[]) AS ep (id)`

// floorClaimSQL claims up to $1 due deliveries under token $2, as the
// server's claim does (oldest first, skipping rows others hold).
const floorClaimSQL = `
UPDATE webhook_deliveries SET state = 'processing', claim_token = $2,
	claim_expires_at = now() + interval '1 minute'
WHERE id IN (
	SELECT id FROM webhook_deliveries
	WHERE state = 'pending' AND NOT held AND next_attempt_at <= now()
	ORDER BY next_attempt_at, id
	LIMIT $1
	FOR UPDATE SKIP LOCKED)
RETURNING id`

// floorCompleteSQL records the claimed deliveries $1 delivered, fenced by
// their token $2, with an attempt each.
const floorCompleteSQL = `
WITH done AS (
	UPDATE webhook_deliveries SET state = 'delivered', attempts = attempts + 1,
		cycle_attempts = cycle_attempts + 1, completed_at = now(),
		claim_token = NULL, claim_expires_at = NULL
	WHERE id = ANY($1::text[]) AND claim_token = $2
	RETURNING id, attempts
)
INSERT INTO webhook_delivery_attempts (delivery_id, number, outcome, http_status, started_at, finished_at)
SELECT id, attempts, 'delivered', 200, now(), now() FROM done`

// floorBatch is how many submissions one floor ingest statement inserts.
const floorBatch = 16

// floor runs the database-only phase; PostgreSQL only.
func (r *runner) floor(ctx context.Context) (p Phase, err error) {
	const name = "database floor: the least SQL"
	fs, err := openFresh(ctx, r.o)
	if err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}
	defer fs.removeInto(ctx, name, &err)
	endpoints, err := r.createEndpoints(ctx, fs)
	if err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}
	payload, err := samplePayload()
	if err != nil {
		return Phase{}, err
	}
	pool, err := pgxpool.New(ctx, fs.dsn)
	if err != nil {
		return Phase{}, fmt.Errorf("%s: connect: %w", name, err)
	}
	defer pool.Close()

	total := r.o.Deliveries()
	m := startMeter(r.dbPID)
	start := time.Now()
	werr := floorRun(ctx, pool, r.o, endpoints, payload)
	wall := time.Since(start)
	u := m.stop()
	if werr != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, werr)
	}
	var delivered int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered' AND attempts = 1`).Scan(&delivered); err != nil {
		return Phase{}, fmt.Errorf("%s: count: %w", name, err)
	}
	if delivered != total {
		return Phase{}, fmt.Errorf("%s: %d of %d deliveries delivered once", name, delivered, total)
	}
	p = Phase{
		Name: name, Kind: KindFloor, Messages: total, Wall: wall,
		Rate:  float64(total) / wall.Seconds(),
		where: fs.where,
	}
	p.setUsage(u, m.hwmReset)
	r.progress("%s: %d deliveries in %s, %.0f/s", name, total, wall.Round(time.Millisecond), p.Rate)
	return p, nil
}

// floorRun inserts o.Submissions submissions on o.Producers goroutines
// while o.Worker.Concurrency/4 (at least 2) goroutines claim and complete
// batches of o.Worker.BatchSize until every delivery is delivered.
func floorRun(ctx context.Context, pool *pgxpool.Pool, o Options, endpoints []string, payload []byte) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	total := int64(o.Deliveries())
	var next, delivered atomic.Int64
	var wg sync.WaitGroup
	for range o.Producers {
		wg.Go(func() {
			for ctx.Err() == nil {
				from := int(next.Add(floorBatch)) - floorBatch
				if from >= o.Submissions {
					return
				}
				n := min(floorBatch, o.Submissions-from)
				ids, payloads := make([]string, n), make([][]byte, n)
				for i := range n {
					ids[i] = "evt_floor_" + strconv.Itoa(from+i)
					payloads[i] = payload
				}
				if _, err := pool.Exec(ctx, floorIngestSQL, ids, payloads, endpoints); err != nil {
					cancel(fmt.Errorf("insert submissions: %w", err))
					return
				}
			}
		})
	}
	for d := range max(2, o.Worker.Concurrency/4) {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil && delivered.Load() < total; n++ {
				token := fmt.Sprintf("floor-%d-%d", d, n)
				rows, err := pool.Query(ctx, floorClaimSQL, o.Worker.BatchSize, token)
				if err != nil {
					cancel(fmt.Errorf("claim: %w", err))
					return
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					cancel(fmt.Errorf("claim: %w", err))
					return
				}
				if len(ids) == 0 {
					time.Sleep(time.Millisecond) // the producers are behind
					continue
				}
				tag, err := pool.Exec(ctx, floorCompleteSQL, ids, token)
				if err != nil {
					cancel(fmt.Errorf("complete: %w", err))
					return
				}
				delivered.Add(tag.RowsAffected())
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}
