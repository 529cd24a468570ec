package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
const claimExpiredAndTake = `, expired AS (
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
)
SELECT ` + deliveryColumns + `, d.claim_token, ` + eventColumns + `, ` + epEndpointColumns + `
FROM claimed AS d
JOIN webhook_events AS e ON e.id = d.event_id
JOIN webhook_endpoints AS ep ON ep.id = d.endpoint_id
ORDER BY d.next_attempt_at, d.id`

// The claim with a share (see storage.ClaimShare) picks before it locks.
// pickWindowSQL walks a window of the oldest due rows ($2 of them, leaving
// out the endpoints in $7, among the first $8 due rows) and keeps each
// endpoint's first rows up to its room ($3, $4: endpoint ids and rooms;
// $5: the room of the rest), at most $6; it also says how many rows it
// walked and scanned, so the caller knows whether rows beyond the window
// or the scan were left unseen. pickByEndpointSQL looks endpoint by
// endpoint instead, one probe of webhook_deliveries_endpoint_due for each
// enabled endpoint with room or top-up ($5, $6: endpoint ids and top-ups;
// $7: only those with a top-up), when there are at most $8 enabled
// endpoints (0: however many), for when there are few, when the window was
// filled by rows of endpoints with too little room, or to find the
// top-ups; it returns the rows within each endpoint's room and those past
// it apart, oldest due first, and whether it looked. Both pick a prefix of
// each endpoint's due rows, so their union keeps each endpoint within its
// room, and both leave out the rows in $9: those an earlier round of the
// same claim found another transaction holding (see claimFair).
// claimPickedSQL then claims the picked rows that are still claimable,
// skipping those another claim holds, with the oldest expired leases, as
// claimSQL does.
const (
	pickWindowSQL = `
WITH room AS (
	SELECT * FROM unnest($3::text[], $4::integer[]) AS r(endpoint_id, room)
), scanned AS (
	SELECT id, endpoint_id, next_attempt_at FROM webhook_deliveries
	WHERE state = 'pending' AND NOT held AND next_attempt_at <= coalesce($1::timestamptz, now())
		AND id <> ALL($9::text[])
	ORDER BY next_attempt_at, id
	LIMIT $8
), walk AS (
	SELECT * FROM scanned WHERE endpoint_id <> ALL($7::text[])
	ORDER BY next_attempt_at, id
	LIMIT $2
), picked AS (
	SELECT w.id, w.next_attempt_at FROM (
		SELECT walk.*, row_number() OVER (PARTITION BY endpoint_id ORDER BY next_attempt_at, id) AS rn
		FROM walk) AS w
	LEFT JOIN room AS r ON r.endpoint_id = w.endpoint_id
	WHERE w.rn <= coalesce(r.room, $5)
	ORDER BY w.next_attempt_at, w.id
	LIMIT $6
)
SELECT coalesce((SELECT array_agg(id ORDER BY next_attempt_at, id) FROM picked), '{}'),
	(SELECT count(*) FROM walk), (SELECT count(*) FROM scanned)`
	pickByEndpointSQL = `
WITH few AS (
	SELECT $8::integer = 0 OR count(*) <= $8::integer AS ok
	FROM (SELECT 1 FROM webhook_endpoints WHERE disabled_at IS NULL LIMIT $8::integer + 1) AS e
), room AS (
	SELECT * FROM unnest($2::text[], $3::integer[]) AS r(endpoint_id, room)
), top AS (
	SELECT * FROM unnest($5::text[], $6::integer[]) AS t(endpoint_id, extra)
), found AS (
	SELECT c.id, c.next_attempt_at, c.rn <= coalesce(r.room, $4) AS within
	FROM webhook_endpoints AS ep
	LEFT JOIN room AS r ON r.endpoint_id = ep.id
	LEFT JOIN top AS t ON t.endpoint_id = ep.id
	CROSS JOIN LATERAL (
		SELECT d.id, d.next_attempt_at, row_number() OVER (ORDER BY d.next_attempt_at, d.id) AS rn
		FROM webhook_deliveries AS d
		WHERE d.endpoint_id = ep.id AND d.state = 'pending' AND NOT d.held
			AND d.next_attempt_at <= coalesce($1::timestamptz, now()) AND d.id <> ALL($9::text[])
		ORDER BY d.next_attempt_at, d.id
		LIMIT coalesce(r.room, $4) + coalesce(t.extra, 0)) AS c
	WHERE (SELECT ok FROM few) AND ep.disabled_at IS NULL AND coalesce(r.room, $4) + coalesce(t.extra, 0) > 0
		AND (NOT $7::boolean OR t.endpoint_id IS NOT NULL)
)
SELECT coalesce((SELECT array_agg(id ORDER BY next_attempt_at, id) FROM found WHERE within), '{}'),
	coalesce((SELECT array_agg(id ORDER BY next_attempt_at, id) FROM found WHERE NOT within), '{}'),
	(SELECT ok FROM few)`
	claimPickedSQL = `
WITH pending AS (
	SELECT id, next_attempt_at FROM webhook_deliveries
	WHERE id = ANY($4::text[])
		AND state = 'pending' AND NOT held AND next_attempt_at <= coalesce($1::timestamptz, now())
	ORDER BY next_attempt_at, id
	FOR UPDATE SKIP LOCKED
)` + claimExpiredAndTake
)

// pickFair chooses the pending rows a claim with a share takes. With few
// enabled endpoints (storage.ClaimProbeEndpoints) it looks endpoint by
// endpoint, one index probe each. With more, it looks first at a window of
// the oldest due rows, leaving out as it walks the endpoints without room
// (stepping over their rows piled up ahead, within a bounded scan); when
// that window was full, or its scan hit the bound, and still left the
// claim short, endpoint by endpoint, which finds the rest behind any
// backlog. What the rooms leave of the limit goes to the top-ups, found
// endpoint by endpoint too, in the same statement when the rooms needed it.
// Rows in skip are left out, as if they were not due.
func pickFair(ctx context.Context, tx pgx.Tx, p storage.DeliveryClaimParams, skip []string) ([]string, error) {
	sh := p.Share
	ids, rooms := make([]string, 0, len(sh.Room)), make([]int32, 0, len(sh.Room))
	noRoom := []string{}
	for id, r := range sh.Room {
		ids, rooms = append(ids, id), append(rooms, int32(r))
		if r == 0 {
			noRoom = append(noRoom, id)
		}
	}
	topIDs, tops := make([]string, 0, len(sh.TopUp)), make([]int32, 0, len(sh.TopUp))
	for id, n := range sh.TopUp {
		if n > 0 {
			topIDs, tops = append(topIDs, id), append(tops, int32(n))
		}
	}
	// byEndpoint looks endpoint by endpoint: at the top-ups only, or at
	// every enabled endpoint when there are at most maxEndpoints of them
	// (0: any number); looked reports whether it did.
	byEndpoint := func(topUpsOnly bool, maxEndpoints int) (within, past []string, looked bool, err error) {
		err = tx.QueryRow(ctx, pickByEndpointSQL, dbNow(p.Now), ids, rooms, sh.Default, topIDs, tops, topUpsOnly, maxEndpoints, skip).
			Scan(&within, &past, &looked)
		return within, past, looked, err
	}
	within, past, looked, err := byEndpoint(false, storage.ClaimProbeEndpoints)
	if err != nil || looked {
		return fairPick(within, past, p.Limit), err
	}

	window, bound := storage.ClaimWindow(p.Limit), storage.ClaimWindow(p.Limit)
	if len(noRoom) > 0 {
		bound = storage.ClaimSkipScan(p.Limit)
	}
	var (
		picked          []string
		walked, scanned int
	)
	if err := tx.QueryRow(ctx, pickWindowSQL, dbNow(p.Now), window, ids, rooms, sh.Default, p.Limit, noRoom, bound, skip).
		Scan(&picked, &walked, &scanned); err != nil {
		return nil, err
	}
	// The window saw every due row it could when fewer than the window
	// passed the skip and the scan reached the end of the due rows before
	// its bound.
	sawAll := walked < window && scanned < bound
	if len(picked) == p.Limit || sawAll && len(topIDs) == 0 {
		return picked, nil
	}
	if within, past, _, err = byEndpoint(sawAll, 0); err != nil {
		return nil, err
	}
	// Looked at endpoint by endpoint, every endpoint's rows within its
	// room are found, the window's among them: each is a prefix of its
	// endpoint's due rows. Looked at for the top-ups only, the window's
	// are those within the rooms.
	if sawAll {
		within = picked
	}
	return fairPick(within, past, p.Limit), nil
}

// fairPick is what a claim of limit takes of the rows within the rooms and
// those past them, each oldest due first: the rooms' first, then the
// top-ups' to the limit.
func fairPick(within, past []string, limit int) []string {
	within = within[:min(len(within), limit)]
	return append(within, past[:min(len(past), limit-len(within))]...)
}

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

// maxPickRounds bounds how often one claim with a share picks again after
// finding picked rows held by other transactions. Each round leaves out
// the rows the last one found held, so it only repeats while other claims
// keep taking what this one picked; past the bound the claim returns what
// it has, and the claimer comes back.
const maxPickRounds = 4

// claimFair claims with a share: it picks (pickFair), then locks what it
// picked, skipping rows another transaction holds (another process's claim
// under way). Those count as taken by it: when some were held and the
// claim is still short, it picks again without them, each endpoint's room
// less what this claim already took of it, so an endpoint's next due rows
// go out instead and the claim does not come back short while rows are
// due.
func claimFair(ctx context.Context, tx pgx.Tx, p storage.DeliveryClaimParams, codec storage.SecretsCodec, endpoints map[string]storage.Endpoint) ([]storage.Claim, error) {
	var (
		claims []storage.Claim
		skip   = []string{}
		// fromPick holds the claimed rows that were picked: those that
		// count against a room, where an expired lease does not.
		fromPick = map[string]bool{}
	)
	round := p
	for range maxPickRounds {
		picked, err := pickFair(ctx, tx, round, skip)
		if err != nil {
			return nil, err
		}
		rows, err := tx.Query(ctx, claimPickedSQL, dbNow(p.Now), round.Limit, p.Lease.Microseconds(), picked)
		if err != nil {
			return nil, err
		}
		got, err := collectClaims(rows, codec, endpoints)
		if err != nil {
			return nil, err
		}
		claims = append(claims, got...)
		taken := make(map[string]bool, len(got))
		for _, c := range got {
			taken[c.Delivery.ID] = true
		}
		held := 0
		for _, id := range picked {
			if taken[id] {
				fromPick[id] = true
			} else {
				skip = append(skip, id)
				held++
			}
		}
		// A full claim, or one that found none of its picks held, took
		// all there was to take.
		if len(claims) >= p.Limit || held == 0 {
			break
		}
		round.Limit = p.Limit - len(claims)
		round.Share = shareLeft(p.Share, fromPick, claims)
	}
	slices.SortFunc(claims, func(a, b storage.Claim) int {
		return cmp.Or(a.Delivery.NextAttemptAt.Compare(b.Delivery.NextAttemptAt), strings.Compare(a.Delivery.ID, b.Delivery.ID))
	})
	return claims, nil
}

// shareLeft is what is left of share once claims are taken: each endpoint's
// room less the claims of it that were picked (fromPick), then its top-up
// less what they took past the room. Expired leases a claim took were not
// picked, and take nothing from a room, as in the first round.
func shareLeft(share *storage.ClaimShare, fromPick map[string]bool, claims []storage.Claim) *storage.ClaimShare {
	used := map[string]int{}
	for _, c := range claims {
		if fromPick[c.Delivery.ID] {
			used[c.Delivery.EndpointID]++
		}
	}
	left := &storage.ClaimShare{Default: share.Default, Room: maps.Clone(share.Room), TopUp: maps.Clone(share.TopUp)}
	if left.Room == nil {
		left.Room = map[string]int{}
	}
	for id, n := range used {
		room := share.RoomOf(id)
		left.Room[id] = max(0, room-n)
		if top, ok := share.TopUp[id]; ok {
			left.TopUp[id] = max(0, top-max(0, n-room))
		}
	}
	return left
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
