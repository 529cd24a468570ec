package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// claimSQL claims in one statement. Each branch walks its partial index in
// (next_attempt_at, id) order and stops at the limit, so a claim reads about
// limit rows however large the backlog; the two are merged and cut to the
// limit, oldest due first. FOR UPDATE SKIP LOCKED in each branch means
// concurrent claimers neither wait nor overlap, and the LIMIT counts only
// rows this claimer locked. A branch may lock a few rows the merge then
// drops; they are unlocked at the end of the statement, untouched. A lease
// is "expired" strictly after claim_expires_at, a pending row is due at
// next_attempt_at. Each claim carries its event and its endpoint, so the
// worker reads nothing else before it sends.
const claimSQL = `
WITH pending AS (
	SELECT id, next_attempt_at FROM webhook_deliveries
	WHERE state = 'pending' AND NOT held AND next_attempt_at <= coalesce($1::timestamptz, now())
	ORDER BY next_attempt_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)` + claimExpiredAndTake

// claimExpiredAndTake ends both claim statements: after their pending CTE
// it adds the oldest expired leases, keeps the oldest due of both, gives
// each a lease and a fresh token, and returns them with their events and
// endpoints.
const claimExpiredAndTake = claimExpiredCTEs + claimTakeSelect

const claimExpiredCTEs = `, expired AS (
	SELECT id, next_attempt_at FROM webhook_deliveries
	WHERE state = 'processing' AND claim_expires_at < coalesce($1::timestamptz, now())
	ORDER BY next_attempt_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), due AS (
	SELECT id FROM (SELECT * FROM pending UNION ALL SELECT * FROM expired) AS u
	ORDER BY next_attempt_at, id
	LIMIT $2
), claimed AS (
	UPDATE webhook_deliveries AS d
	SET state = 'processing',
		claim_expires_at = coalesce($1::timestamptz, now()) + $3::bigint * interval '1 microsecond',
		claim_token = gen_random_uuid()::text
	FROM due
	WHERE d.id = due.id
	RETURNING d.*
)`

const claimTakeSelect = `
SELECT ` + deliveryColumns + `, d.claim_token, ` + eventColumns + `, ` + epEndpointColumns + `
FROM claimed AS d
JOIN webhook_events AS e ON e.id = d.event_id
JOIN webhook_endpoints AS ep ON ep.id = d.endpoint_id
ORDER BY d.next_attempt_at, d.id`

// The claim with a share (see storage.ClaimShare and storage.PickShare)
// walks the endpoints' queue heads and probes their rows, then claims what
// it picked and moves the heads in one statement.
//
// headsSQL reads the due heads in (next_due_at, head_id) order, a range of
// webhook_endpoint_queues_due after the cursor ($2, $3), leaving out the
// endpoints in $4 (those with no room) or, with $5, all but those; one more
// than asked, which is the claim's cutoff (see storage.PickShare). It
// locks nothing: other processes walk the same heads and split their rows
// (the probe skips the rows another claim holds). It runs in a statement
// of its own, before the probe, and reads each head's version: a write
// that made a delivery claimable and committed before this read is seen
// by the probe's later snapshot; one that commits after it changes the
// version, and the claim then leaves that head where it is (see migration
// 0015).
const (
	headsSQL = `SELECT endpoint_id, next_due_at, head_id, version, now() FROM webhook_endpoint_queues
WHERE next_due_at <= coalesce($1::timestamptz, now())
	AND ($2::timestamptz IS NULL OR (next_due_at, head_id) > ($2::timestamptz, $3::text))
	AND endpoint_id <> ALL($4::text[])
	AND (NOT $5::boolean OR endpoint_id = ANY($6::text[]))
ORDER BY next_due_at, head_id
LIMIT $7`
	// probeSQL reads each endpoint's first claimable rows ($1, $2:
	// endpoints and how many), whenever due, through
	// webhook_deliveries_endpoint_due: those it can lock, which it keeps
	// locked for the claim, and, unlocked, the first rows whoever holds
	// them, so that rows another transaction holds are seen as held.
	probeSQL = `SELECT e.endpoint_id, d.id, d.next_attempt_at, false
FROM unnest($1::text[], $2::integer[]) AS e(endpoint_id, n)
CROSS JOIN LATERAL (
	SELECT id, next_attempt_at FROM webhook_deliveries
	WHERE endpoint_id = e.endpoint_id AND state = 'pending' AND NOT held
	ORDER BY next_attempt_at, id
	LIMIT e.n
	FOR UPDATE SKIP LOCKED) AS d
UNION ALL
SELECT e.endpoint_id, d.id, d.next_attempt_at, true
FROM unnest($1::text[], $2::integer[]) AS e(endpoint_id, n)
CROSS JOIN LATERAL (
	SELECT id, next_attempt_at FROM webhook_deliveries
	WHERE endpoint_id = e.endpoint_id AND state = 'pending' AND NOT held
	ORDER BY next_attempt_at, id
	LIMIT e.n) AS d`
	// claimPickedSQL claims the picked rows ($4) that are still claimable,
	// skipping those another transaction holds, with the oldest expired
	// leases, as claimSQL does; and moves each head looked at ($5, $6, $10,
	// $11: endpoints, where the pick would move them, NULL for none, and
	// the versions read) to the first row probed ($7, $8, $9: endpoints,
	// ids, due times) that was not claimed, or else to where the pick said.
	// A head moves only if it can be locked at once and its version is
	// still the one read (checked again on the newest row version by the
	// lock): otherwise a write since may have made a row claimable that
	// the probe did not see, and the head stays, early.
	claimPickedSQL = `
WITH pending AS (
	SELECT d.id, d.next_attempt_at FROM unnest($4::text[]) AS p(id)
	JOIN webhook_deliveries AS d ON d.id = p.id
	WHERE d.state = 'pending' AND NOT d.held AND d.next_attempt_at <= coalesce($1::timestamptz, now())
	FOR UPDATE OF d SKIP LOCKED
)` + claimExpiredCTEs + `, unclaimed AS (
	SELECT DISTINCT ON (p.endpoint_id) p.endpoint_id, p.due, p.id
	FROM unnest($7::text[], $8::text[], $9::timestamptz[]) AS p(endpoint_id, id, due)
	WHERE NOT EXISTS (SELECT 1 FROM claimed AS c WHERE c.id = p.id)
	ORDER BY p.endpoint_id, p.due, p.id
), heads AS (
	SELECT h.* FROM unnest($5::text[], $6::timestamptz[], $10::text[], $11::bigint[]) AS h(endpoint_id, due, head, version)
	JOIN webhook_endpoint_queues AS q ON q.endpoint_id = h.endpoint_id
	WHERE q.version = h.version
	FOR UPDATE OF q SKIP LOCKED
), moved AS (
	UPDATE webhook_endpoint_queues AS q
	SET next_due_at = CASE WHEN u.id IS NULL THEN h.due ELSE u.due END,
		head_id = CASE WHEN u.id IS NULL THEN h.head ELSE u.id END,
		version = q.version + 1
	FROM heads AS h
	LEFT JOIN unclaimed AS u ON u.endpoint_id = h.endpoint_id
	WHERE q.endpoint_id = h.endpoint_id
)` + claimTakeSelect
)

// DeliveryClaim claims up to p.Limit claimable deliveries, oldest due first,
// each with a fresh random token, the event it carries and its endpoint,
// and returns those the endpoints' controls admit (see admitClaims).
func (s *Store) DeliveryClaim(ctx context.Context, p storage.DeliveryClaimParams) ([]storage.Claim, error) {
	const op = "delivery claim"
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	// One transaction with the admission, so that claims another process
	// has taken but not yet admitted are invisible to this one's count of
	// sends under way, rather than counted against the cap.
	var claims []storage.Claim
	var later []time.Duration
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if claims, err = claimIn(ctx, tx, p, s.secrets); err != nil || !needsAdmission(claims) {
			return err
		}
		claims, later, err = admitClaims(ctx, tx, claims, p.Now)
		return err
	})
	if err != nil {
		return nil, mapErr(op, err)
	}
	// What the endpoints' budgets put back is due later: this process
	// wakes up for it then rather than find it by polling.
	for _, d := range later {
		s.wake.hub.SignalAfter(d)
	}
	if claims == nil {
		claims = []storage.Claim{}
	}
	return claims, nil
}

// claimIn runs the claim statement in tx; codec opens the endpoints' secrets.
func claimIn(ctx context.Context, tx pgx.Tx, p storage.DeliveryClaimParams, codec storage.SecretsCodec) ([]storage.Claim, error) {
	// A batch usually holds many deliveries to few endpoints: each
	// endpoint's secrets are decoded once.
	endpoints := map[string]storage.Endpoint{}
	if p.Share != nil {
		return claimFair(ctx, tx, p, codec, endpoints)
	}
	rows, err := tx.Query(ctx, claimSQL, dbNow(p.Now), p.Limit, p.Lease.Microseconds())
	if err != nil {
		return nil, err
	}
	return collectClaims(rows, codec, endpoints)
}

// headSource reads heads and rows for storage.PickShare in a claim's
// transaction.
type headSource struct {
	tx  pgx.Tx
	at  any // the claim's clock: p.Now, or nil for the database's
	now int64
}

func (h *headSource) Heads(ctx context.Context, after *storage.DueHead, n int, exclude, include []string) ([]storage.DueHead, *storage.DueHead, error) {
	var afterAt any
	afterID := ""
	if after != nil {
		afterAt, afterID = time.UnixMicro(after.Due).UTC(), after.ID
	}
	only := include != nil
	if exclude == nil {
		exclude = []string{}
	}
	rows, err := h.tx.Query(ctx, headsSQL, h.at, afterAt, afterID, exclude, only, include, n+1)
	if err != nil {
		return nil, nil, err
	}
	var heads []storage.DueHead
	for rows.Next() {
		var d storage.DueHead
		var due, now time.Time
		if err := rows.Scan(&d.EndpointID, &due, &d.ID, &d.Version, &now); err != nil {
			rows.Close()
			return nil, nil, err
		}
		d.Due = due.UnixMicro()
		heads = append(heads, d)
		if h.at == nil {
			h.now = now.UnixMicro()
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(heads) <= n {
		return heads, nil, nil
	}
	return heads[:n], &heads[n], nil
}

func (h *headSource) Now() int64 { return h.now }

func (h *headSource) Probe(ctx context.Context, endpoints []string, counts []int) (map[string][]storage.DueRow, error) {
	n := make([]int32, len(counts))
	for i, c := range counts {
		n[i] = int32(c)
	}
	rows, err := h.tx.Query(ctx, probeSQL, endpoints, n)
	if err != nil {
		return nil, err
	}
	// A row is held when the unlocked read saw it and the locking one
	// did not.
	locked := map[string]bool{}
	seen := map[string]bool{}
	out := map[string][]storage.DueRow{}
	for rows.Next() {
		var endpoint string
		var r storage.DueRow
		var due time.Time
		var unlocked bool
		if err := rows.Scan(&endpoint, &r.ID, &due, &unlocked); err != nil {
			rows.Close()
			return nil, err
		}
		if !unlocked {
			locked[r.ID] = true
		} else if locked[r.ID] {
			continue
		}
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		r.Due = due.UnixMicro()
		out[endpoint] = append(out[endpoint], r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for endpoint, rs := range out {
		for i := range rs {
			rs[i].Held = !locked[rs[i].ID]
		}
		storage.SortDueRows(rs)
		out[endpoint] = rs
	}
	return out, nil
}

// claimFair claims with a share: storage.PickShare picks through the
// heads, then one statement claims the picks that are still claimable
// (skipping rows another transaction holds, whose endpoint's head then
// stays at them) and moves the heads.
func claimFair(ctx context.Context, tx pgx.Tx, p storage.DeliveryClaimParams, codec storage.SecretsCodec, endpoints map[string]storage.Endpoint) ([]storage.Claim, error) {
	src := &headSource{tx: tx, at: dbNow(p.Now)}
	if !p.Now.IsZero() {
		src.now = p.Now.UnixMicro()
	}
	pick, err := storage.PickShare(ctx, src, p.Share, p.Limit)
	if err != nil {
		return nil, err
	}
	heads := pick.Moves()
	var (
		headIDs   = make([]string, len(heads))
		headAt    = make([]*time.Time, len(heads))
		headRows  = make([]*string, len(heads))
		headVers  = make([]int64, len(heads))
		probedEps []string
		probedIDs []string
		probedAt  []time.Time
	)
	for i, m := range heads {
		headIDs[i], headVers[i] = m.EndpointID, m.Version
		if m.Fallback != nil {
			t := time.UnixMicro(m.Fallback.Due).UTC()
			headAt[i], headRows[i] = &t, &m.Fallback.ID
		}
		for _, r := range m.Rows {
			probedEps, probedIDs, probedAt = append(probedEps, m.EndpointID), append(probedIDs, r.ID), append(probedAt, time.UnixMicro(r.Due).UTC())
		}
	}
	if pick.IDs == nil {
		pick.IDs = []string{}
	}
	rows, err := tx.Query(ctx, claimPickedSQL, dbNow(p.Now), p.Limit, p.Lease.Microseconds(), pick.IDs,
		headIDs, headAt, probedEps, probedIDs, probedAt, headRows, headVers)
	if err != nil {
		return nil, err
	}
	return collectClaims(rows, codec, endpoints)
}

// collectClaims reads the rows of a claim statement; codec opens the
// endpoints' secrets, each endpoint's once, kept in endpoints.
func collectClaims(rows pgx.Rows, codec storage.SecretsCodec, endpoints map[string]storage.Endpoint) ([]storage.Claim, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Claim, error) {
		var c storage.Claim
		var ev eventScan
		var ep endpointScan
		err := r.Scan(append(append(append(deliveryDest(&c.Delivery), &c.Token), ev.dest()...), ep.dest()...)...)
		if err != nil {
			return c, err
		}
		c.Event = ev.event()
		known, ok := endpoints[ep.e.ID]
		if !ok {
			if known, err = ep.endpoint(codec); err != nil {
				return c, err
			}
			endpoints[known.ID] = known
		}
		c.Endpoint = known
		return c, nil
	})
}

// completeBatchSQL is the owner's transition for many claims at once, each
// fenced on its own token: a row whose token does not match is neither
// updated nor given an attempt. Every owner attempt raises both counters;
// the allowance is measured against cycle_attempts after this attempt. The
// UPDATE holds each row's lock until commit, so no late worker can take an
// attempt number in between.
//
// The rows are locked in id order before the update takes any: a row
// reaches the update only through locked, which has locked it, and locked
// locks in id order. So two batches that share rows (one of them holding a
// superseded token) queue behind each other instead of deadlocking. This
// was a statement of its own before the update; in the update it saves a
// statement a batch, which PostgreSQL planned afresh nearly every time.
const completeBatchSQL = `
WITH locked AS MATERIALIZED (
	SELECT id FROM webhook_deliveries WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE
), input AS (
	SELECT i.* FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::timestamptz[],
		$6::bigint[], $7::integer[], $8::text[], $9::timestamptz[], $10::timestamptz[], $11::text[])
		AS i(id, token, outcome, allowance, now, delay, status, error, started_at, finished_at, trace_id)
	JOIN locked ON locked.id = i.id
), done AS (
	UPDATE webhook_deliveries AS d
	SET attempts = d.attempts + 1,
		cycle_attempts = d.cycle_attempts + 1,
		state = CASE
			WHEN i.outcome = 'delivered' THEN 'delivered'
			WHEN i.outcome = 'permanent' THEN 'failed'
			WHEN d.cycle_attempts + 1 >= i.allowance THEN 'failed'
			ELSE 'pending'
		END,
		next_attempt_at = CASE
			WHEN i.outcome = 'retryable' AND d.cycle_attempts + 1 < i.allowance
			THEN coalesce(i.now, now()) + i.delay * interval '1 microsecond'
			ELSE d.next_attempt_at
		END,
		completed_at = CASE
			WHEN i.outcome = 'retryable' AND d.cycle_attempts + 1 < i.allowance THEN NULL
			ELSE coalesce(i.now, now())
		END,
		held = i.outcome = 'retryable' AND d.cycle_attempts + 1 < i.allowance AND EXISTS (
			SELECT 1 FROM webhook_endpoints AS ep WHERE ep.id = d.endpoint_id AND ep.disabled_at IS NOT NULL),
		-- A request went out: whatever kept an earlier claim from sending
		-- is no longer the news.
		unsent_reason = '',
		claim_token = NULL,
		claim_expires_at = NULL
	FROM input AS i
	WHERE d.id = i.id AND d.claim_token = i.token
	RETURNING d.*, i.outcome AS a_outcome, i.status AS a_status, i.error AS a_error,
		coalesce(i.started_at, i.now, now()) AS a_started, coalesce(i.finished_at, i.now, now()) AS a_finished,
		i.trace_id AS a_trace
), run AS (
	-- What the batch says about each endpoint's run of failures: when it
	-- last delivered, and the first failure after that.
	SELECT endpoint_id, last_delivered,
		min(a_finished) FILTER (WHERE a_outcome <> 'delivered'
			AND (last_delivered IS NULL OR a_finished > last_delivered)) AS first_failure
	FROM (SELECT endpoint_id, a_outcome, a_finished,
			max(a_finished) FILTER (WHERE a_outcome = 'delivered') OVER (PARTITION BY endpoint_id) AS last_delivered
		FROM done) AS o
	GROUP BY endpoint_id, last_delivered
), failing AS (
	-- A delivered attempt ends the run, a failure starts one unless one is
	-- under way. Only a change is written, so a healthy endpoint's row is
	-- neither written nor locked here.
	UPDATE webhook_endpoints AS ep
	SET failing_since = r.first_failure
	FROM run AS r
	WHERE ep.id = r.endpoint_id AND (
		(r.last_delivered IS NOT NULL AND ep.failing_since IS DISTINCT FROM r.first_failure)
		OR (r.last_delivered IS NULL AND ep.failing_since IS NULL AND r.first_failure IS NOT NULL))
), attempt AS (
	INSERT INTO webhook_delivery_attempts AS a (delivery_id, number, outcome, http_status, error, late,
		started_at, finished_at, trace_id)
	SELECT id, attempts, a_outcome, a_status, a_error, false, a_started, a_finished, a_trace FROM done
	RETURNING ` + attemptColumns + `
)
SELECT ` + deliveryColumns + `, ` + attemptColumns + `
FROM done AS d JOIN attempt AS a ON a.delivery_id = d.id`

const insertAttemptSQL = `
INSERT INTO webhook_delivery_attempts AS a (delivery_id, number, outcome, http_status, error, late,
	started_at, finished_at, trace_id)
VALUES ($1, $2, $3, $4, $5, $6, coalesce($7::timestamptz, now()), coalesce($8::timestamptz, now()), $9)
RETURNING ` + attemptColumns

// DeliveryComplete records the owner's attempt and moves the delivery on,
// fenced on p.Token. On storage.ErrClaimLost nothing is written.
func (s *Store) DeliveryComplete(ctx context.Context, p storage.DeliveryCompleteParams) (storage.Delivery, storage.Attempt, error) {
	op := "delivery complete " + p.DeliveryID
	res, err := s.DeliveryCompleteBatch(ctx, []storage.DeliveryCompleteParams{p})
	if err != nil {
		return storage.Delivery{}, storage.Attempt{}, err
	}
	if err := res[0].Err; err != nil {
		return storage.Delivery{}, storage.Attempt{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	return res[0].Delivery, res[0].Attempt, nil
}

// DeliveryCompleteBatch completes many claims in one round trip: the
// locks and the fenced update with its attempts go as one pipeline, which
// PostgreSQL runs as one implicit transaction.
func (s *Store) DeliveryCompleteBatch(ctx context.Context, ps []storage.DeliveryCompleteParams) ([]storage.DeliveryCompleteResult, error) {
	const op = "delivery complete batch"
	errs, err := storage.ValidateCompleteBatch(ps)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	out := make([]storage.DeliveryCompleteResult, len(ps))
	index := make(map[string]int, len(ps))
	var in completeInput
	for i, p := range ps {
		if errs[i] != nil {
			out[i].Err = errs[i]
			continue
		}
		index[p.DeliveryID] = i
		in.add(p)
	}
	if len(in.ids) == 0 {
		return out, nil
	}

	// After the update, the next delivery of each ordered endpoint that has
	// nothing under way any more is let go.
	b := &pgx.Batch{}
	b.Queue(completeBatchSQL, in.ids, in.tokens, in.outcomes, in.allowances, in.nows, in.delays,
		in.statuses, in.errors, in.started, in.finished, in.traces)
	b.Queue(promoteOfSQL, in.ids)
	// Sent on commit when an ordered endpoint's turn passed to a delivery
	// that is due; in the pipeline's one implicit transaction.
	b.Queue(notifyTurnSQL, in.ids, s.wake.id)
	br := s.pool.SendBatch(ctx, b)
	done := map[string]bool{}
	notified := false
	err = func() error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		_, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct{}, error) {
			var d storage.Delivery
			var a attemptScan
			if err := r.Scan(append(deliveryDest(&d), a.dest()...)...); err != nil {
				return struct{}{}, err
			}
			i := index[d.ID]
			out[i].Delivery, out[i].Attempt = d, a.attempt()
			done[d.ID] = true
			return struct{}{}, nil
		})
		if err != nil {
			return err
		}
		if _, err = br.Exec(); err != nil {
			return err
		}
		rows, err = br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			notified = true
		}
		rows.Close()
		return rows.Err()
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, mapErr(op, err)
	}
	if notified {
		s.notified()
	}
	// A retry is due after its delay: this process wakes up for it then.
	for i, r := range out {
		if r.Err == nil && r.Delivery.ID != "" && r.Delivery.State == storage.StatePending && !r.Delivery.Held {
			s.wake.hub.SignalAfter(ps[i].RetryDelay)
		}
	}
	if len(done) == len(in.ids) {
		return out, nil
	}
	// Some entries missed their fence, which is rare: a lost claim or an
	// unknown id. Whether the row exists tells them apart; it is read after
	// the transaction, which only matters for a row that retention removed
	// in between, and either answer means nothing was written.
	var missed []string
	for _, id := range in.ids {
		if !done[id] {
			missed = append(missed, id)
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT id FROM webhook_deliveries WHERE id = ANY($1::text[])`, missed)
	if err != nil {
		return nil, mapErr(op, err)
	}
	existing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, mapErr(op, err)
	}
	for _, id := range missed {
		out[index[id]].Err = storage.ErrNotFound
	}
	for _, id := range existing {
		out[index[id]].Err = storage.ErrClaimLost
	}
	return out, nil
}

// completeInput is a completion batch as the arrays completeBatchSQL
// unnests, one element per entry.
type completeInput struct {
	ids, tokens, outcomes, errors, traces []string
	allowances, statuses                  []*int32
	delays                                []int64
	nows, started, finished               []*time.Time
}

func (c *completeInput) add(p storage.DeliveryCompleteParams) {
	allowance := int32(p.Allowance())
	var status *int32
	if p.HTTPStatus != 0 {
		v := int32(p.HTTPStatus)
		status = &v
	}
	c.ids = append(c.ids, p.DeliveryID)
	c.tokens = append(c.tokens, p.Token)
	c.outcomes = append(c.outcomes, string(p.Outcome))
	c.allowances = append(c.allowances, &allowance)
	c.nows = append(c.nows, timeOrNull(p.Now))
	c.delays = append(c.delays, p.RetryDelay.Microseconds())
	c.statuses = append(c.statuses, status)
	c.errors = append(c.errors, storage.BoundError(p.Error))
	c.started = append(c.started, timeOrNull(p.StartedAt))
	c.finished = append(c.finished, timeOrNull(p.FinishedAt))
	c.traces = append(c.traces, p.TraceID)
}

// timeOrNull is nil for the zero time, which the SQL reads as "the
// database clock".
func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// fenceMiss explains a fenced UPDATE that matched no row: the id does not
// exist (ErrNotFound), or the token check failed (miss).
func fenceMiss(ctx context.Context, tx pgx.Tx, id string, miss error) error {
	ok, err := deliveryExists(ctx, tx, id)
	if err != nil {
		return err
	}
	if !ok {
		return storage.ErrNotFound
	}
	return miss
}

// AttemptRecordLate records a request made under a superseded claim: it
// takes the next lifetime number from the stored row under the row lock,
// raises attempts and changes nothing else, whatever state the row is in.
func (s *Store) AttemptRecordLate(ctx context.Context, p storage.AttemptRecordLateParams) (storage.Attempt, error) {
	op := "attempt record late " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.Attempt{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var a storage.Attempt
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var number int
		err := tx.QueryRow(ctx, `
			UPDATE webhook_deliveries SET attempts = attempts + 1
			WHERE id = $1 AND claim_token IS DISTINCT FROM $2
			RETURNING attempts`, p.DeliveryID, p.Token).Scan(&number)
		if errors.Is(err, pgx.ErrNoRows) {
			return fenceMiss(ctx, tx, p.DeliveryID, storage.ErrClaimHeld)
		}
		if err != nil {
			return err
		}
		a, err = scanAttempt(tx.QueryRow(ctx, insertAttemptSQL, p.DeliveryID, number, string(p.Outcome),
			nullStatus(p.HTTPStatus), storage.BoundError(p.Error), true,
			dbNow(p.StartedAt), dbNow(p.FinishedAt), p.TraceID))
		return err
	})
	if err != nil {
		return storage.Attempt{}, mapErr(op, err)
	}
	return a, nil
}

// DeliveryRelease gives a claim back unspent: pending again after p.Delay,
// no counter changed, the reason kept when one is given. Fenced on the
// token.
func (s *Store) DeliveryRelease(ctx context.Context, p storage.DeliveryReleaseParams) (storage.Delivery, error) {
	op := "delivery release " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.Delivery{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	// Due now, every process may take it: the wake-up goes out on commit.
	// Due later, this process wakes up for it then.
	notify := func(tx pgx.Tx, d storage.Delivery) error {
		if d.Held || p.Delay > 0 {
			return nil
		}
		_, err := tx.Exec(ctx, notifySQL, s.wake.id)
		return err
	}
	d, err := s.deliveryFenced(ctx, op, p.DeliveryID, `
			UPDATE webhook_deliveries AS d
			SET state = 'pending',
				next_attempt_at = coalesce($3::timestamptz, now()) + $4::bigint * interval '1 microsecond',
				claim_token = NULL,
				claim_expires_at = NULL,
				held = EXISTS (SELECT 1 FROM webhook_endpoints AS ep
					WHERE ep.id = d.endpoint_id AND ep.disabled_at IS NOT NULL),
				unsent_reason = CASE WHEN $5 = '' THEN d.unsent_reason ELSE $5 END
			WHERE d.id = $1 AND d.claim_token = $2
			RETURNING `+deliveryColumns, notify,
		p.DeliveryID, p.Token, dbNow(p.Now), p.Delay.Microseconds(), storage.BoundError(p.Reason))
	if err == nil && !d.Held {
		if p.Delay > 0 {
			s.wake.hub.SignalAfter(p.Delay)
		} else {
			s.notified()
		}
	}
	return d, err
}

// DeliveryFail ends a claim as failed without a request: no attempt, no
// counter changed, the reason kept. An ordered endpoint's next delivery may
// then go, as after any failure. Fenced on the token.
func (s *Store) DeliveryFail(ctx context.Context, p storage.DeliveryFailParams) (storage.Delivery, error) {
	op := "delivery fail " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.Delivery{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	// An ordered endpoint's next delivery may go, as after any failure.
	released := false
	promote := func(tx pgx.Tx, d storage.Delivery) error {
		if _, err := tx.Exec(ctx, promoteSQL, []string{d.EndpointID}); err != nil {
			return err
		}
		var err error
		released, err = notifyTurn(ctx, tx, []string{d.EndpointID}, true, s.wake.id)
		return err
	}
	d, err := s.deliveryFenced(ctx, op, p.DeliveryID, `
			UPDATE webhook_deliveries AS d
			SET state = 'failed',
				completed_at = coalesce($3::timestamptz, now()),
				claim_token = NULL,
				claim_expires_at = NULL,
				held = false,
				unsent_reason = $4
			WHERE d.id = $1 AND d.claim_token = $2
			RETURNING `+deliveryColumns, promote,
		p.DeliveryID, p.Token, dbNow(p.Now), storage.BoundError(p.Reason))
	if err == nil && released {
		s.notified()
	}
	return d, err
}

// deliveryFenced runs update, an UPDATE of one delivery fenced on its claim
// token ($1 the id, $2 the token) that returns the row, then, when set,
// after in the same transaction. A fence that matches no row is ErrNotFound
// or ErrClaimLost, and nothing is written.
func (s *Store) deliveryFenced(ctx context.Context, op, id, update string, after func(pgx.Tx, storage.Delivery) error, args ...any) (storage.Delivery, error) {
	var d storage.Delivery
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		d, err = scanDelivery(tx.QueryRow(ctx, update, args...))
		if errors.Is(err, pgx.ErrNoRows) {
			return fenceMiss(ctx, tx, id, storage.ErrClaimLost)
		}
		if err != nil || after == nil {
			return err
		}
		return after(tx, d)
	})
	if err != nil {
		return storage.Delivery{}, mapErr(op, err)
	}
	return d, nil
}

// replaySet is the row change every replay makes: due now, a fresh retry
// cycle, attempts kept, no reason left from the last cycle.
const replaySet = `
	SET state = 'pending',
		next_attempt_at = coalesce($2::timestamptz, now()),
		cycle_attempts = 0,
		completed_at = NULL,
		claim_token = NULL,
		claim_expires_at = NULL,
		held = false,
		unsent_reason = ''`

// DeliveryReplay moves one terminal delivery back to pending and writes who
// did it. storage.ErrNotTerminal for a pending or processing delivery.
func (s *Store) DeliveryReplay(ctx context.Context, p storage.DeliveryReplayParams) (storage.Delivery, error) {
	op := "delivery replay " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.Delivery{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var d storage.Delivery
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		d, err = s.replayOne(ctx, tx, p)
		return err
	})
	if err != nil {
		return storage.Delivery{}, mapErr(op, err)
	}
	s.notified()
	return d, nil
}

// replayOne is DeliveryReplay's write, in tx.
func (s *Store) replayOne(ctx context.Context, tx pgx.Tx, p storage.DeliveryReplayParams) (storage.Delivery, error) {
	// Lock first, so two operators replaying at once cannot both see
	// the terminal state: the second waits and then sees pending.
	ids := []string{p.DeliveryID}
	// A replay makes a delivery pending, as a fan-out does: it must not
	// pass a delete of its endpoint (fanOutLockKey).
	if err := lockFanOut(ctx, tx); err != nil {
		return storage.Delivery{}, err
	}
	var prev storage.DeliveryState
	var endpointID string
	var deleted *time.Time
	err := tx.QueryRow(ctx, `SELECT d.state, d.endpoint_id, ep.deleted_at
		FROM webhook_deliveries AS d JOIN webhook_endpoints AS ep ON ep.id = d.endpoint_id
		WHERE d.id = $1 FOR UPDATE OF d`, p.DeliveryID).Scan(&prev, &endpointID, &deleted)
	if err != nil {
		return storage.Delivery{}, err
	}
	if !prev.Terminal() {
		return storage.Delivery{}, fmt.Errorf("%w (it is %s)", storage.ErrNotTerminal, prev)
	}
	if deleted != nil {
		return storage.Delivery{}, fmt.Errorf("%w: endpoint %s, which the delivery goes to, was deleted at %s",
			storage.ErrDeleted, endpointID, deleted.UTC().Format(time.RFC3339))
	}
	if _, err := tx.Exec(ctx, `UPDATE webhook_deliveries AS d`+replaySet+` WHERE d.id = $1`,
		p.DeliveryID, dbNow(p.Now)); err != nil {
		return storage.Delivery{}, err
	}
	if err := requeued(ctx, tx, ids); err != nil {
		return storage.Delivery{}, err
	}
	if _, err = tx.Exec(ctx, `
		INSERT INTO webhook_delivery_replays (delivery_id, actor, previous_state, replayed_at)
		VALUES ($1, $2, $3, coalesce($4::timestamptz, now()))`,
		p.DeliveryID, p.Actor, string(prev), dbNow(p.Now)); err != nil {
		return storage.Delivery{}, err
	}
	// Due now, or, held at an ordered endpoint, another of its
	// deliveries may have been let go in its place.
	if _, err = tx.Exec(ctx, notifySQL, s.wake.id); err != nil {
		return storage.Delivery{}, err
	}
	return scanDelivery(tx.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries AS d
		WHERE d.id = $1`, p.DeliveryID))
}

// DeliveryReplayMany replays up to p.BatchSize() terminal deliveries that
// match p.Filter, oldest first, in one statement, and returns how many.
// Rows another transaction has locked are skipped, not waited for.
func (s *Store) DeliveryReplayMany(ctx context.Context, p storage.DeliveryReplayManyParams) (int, error) {
	const op = "delivery replay many"
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		n, err = s.replayMany(ctx, tx, p)
		return err
	})
	if err != nil {
		return 0, mapErr(op, err)
	}
	if n > 0 {
		s.notified()
	}
	return n, nil
}

// replayMany is DeliveryReplayMany's write, in tx; it returns how many
// it replayed.
func (s *Store) replayMany(ctx context.Context, tx pgx.Tx, p storage.DeliveryReplayManyParams) (int, error) {
	// $1 actor, $2 now, $3 limit; the filter's arguments follow.
	w := newWhere(p.Actor, dbNow(p.Now), p.BatchSize())
	w.filter(p.Filter)
	// A deleted endpoint's deliveries are history, not work.
	w.conds = append(w.conds, "NOT EXISTS (SELECT 1 FROM webhook_endpoints AS de WHERE de.id = d.endpoint_id AND de.deleted_at IS NOT NULL)")
	sql := `
WITH picked AS (
	SELECT d.id, d.state FROM webhook_deliveries AS d
	` + w.sql() + `
	ORDER BY d.id
	LIMIT $3
	FOR UPDATE OF d SKIP LOCKED
), replayed AS (
	UPDATE webhook_deliveries AS d` + replaySet + `
	FROM picked
	WHERE d.id = picked.id AND picked.state IN ('delivered', 'failed')
	RETURNING d.id, picked.state AS previous_state
), audit AS (
	INSERT INTO webhook_delivery_replays (delivery_id, actor, previous_state, replayed_at)
	SELECT id, $1, previous_state, coalesce($2::timestamptz, now()) FROM replayed
)
SELECT id FROM replayed`
	if err := lockFanOut(ctx, tx); err != nil {
		return 0, err
	}
	rows, err := tx.Query(ctx, sql, w.args...)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	if err := requeued(ctx, tx, ids); err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, notifySQL, s.wake.id)
	return len(ids), err
}

// DeliveryPrune removes delivered deliveries completed before the cutoff,
// oldest ids first, with everything that hangs off them, in one
// transaction. Rows locked by anyone else are skipped, for the next run.
func (s *Store) DeliveryPrune(ctx context.Context, p storage.DeliveryPruneParams) (int, error) {
	const op = "delivery prune"
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT id FROM webhook_deliveries
			WHERE state = 'delivered' AND completed_at < $1
			ORDER BY state, id
			LIMIT $2
			FOR UPDATE SKIP LOCKED`, p.CompletedBefore, p.BatchSize())
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		n = len(ids)
		// Attempts and replay records reference the delivery, the
		// delivery references its event: remove them in that order, then
		// the events nothing references any more.
		_, err = tx.Exec(ctx, `
			WITH a AS (DELETE FROM webhook_delivery_attempts WHERE delivery_id = ANY($1::text[])),
			     r AS (DELETE FROM webhook_delivery_replays WHERE delivery_id = ANY($1::text[]))
			SELECT 1`, ids)
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `DELETE FROM webhook_deliveries WHERE id = ANY($1::text[]) RETURNING event_id`, ids)
		if err != nil {
			return err
		}
		events, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			DELETE FROM webhook_events AS e
			WHERE e.id = ANY($1::text[])
			  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries AS d WHERE d.event_id = e.id)`, events)
		return err
	})
	if err != nil {
		return 0, mapErr(op, err)
	}
	return n, nil
}
