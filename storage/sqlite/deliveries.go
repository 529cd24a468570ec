package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hymical/hymical/storage"
)

const deliveryColumns = `id, endpoint_id, event_id, state, attempts, cycle_attempts,
	next_attempt_at, claim_expires_at, created_at, completed_at, held, unsent_reason`

// claimable is the one definition of a claimable row, over :now.
const claimable = `((state = 'pending' AND held = 0 AND next_attempt_at <= :now)
	OR (state = 'processing' AND claim_expires_at < :now))`

func scanDelivery(r rowScanner, extra ...any) (storage.Delivery, error) {
	var (
		d                      storage.Delivery
		state                  string
		next, created          int64
		claimExpires, complete sql.NullInt64
		held                   int64
	)
	dest := append([]any{&d.ID, &d.EndpointID, &d.EventID, &state, &d.Attempts, &d.CycleAttempts,
		&next, &claimExpires, &created, &complete, &held, &d.UnsentReason}, extra...)
	if err := r.Scan(dest...); err != nil {
		return storage.Delivery{}, err
	}
	d.State = storage.DeliveryState(state)
	d.NextAttemptAt = fromMicros(next)
	d.ClaimExpiresAt = fromNullMicros(claimExpires)
	d.CreatedAt = fromMicros(created)
	d.CompletedAt = fromNullMicros(complete)
	d.Held = held != 0
	return d, nil
}

func collectDeliveries(rows *sql.Rows) ([]storage.Delivery, error) {
	defer rows.Close()
	out := []storage.Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// deliveryExists tells ErrNotFound apart from a fence that did not match.
func deliveryExists(ctx context.Context, tx *sql.Tx, id string) (bool, error) {
	return rowExists(tx.QueryRowContext(ctx, deliveryExistsSQL, id))
}

// rowExists reads the answer of deliveryExistsSQL.
func rowExists(r *sql.Row) (bool, error) {
	var one int
	err := r.Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func collectStrings(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func jsonList(values []string) string {
	b, _ := json.Marshal(values) // a []string always marshals
	return string(b)
}

// claimSQL claims in one statement. Each branch of the union walks its
// partial index in (next_attempt_at, id) order and stops at the limit, so a
// claim reads about limit rows however large the backlog; the merge keeps
// the oldest due. Expired leases are found among processing rows, which are
// never more than the deliveries in flight. INDEXED BY names the indexes,
// because without statistics SQLite's planner prefers the (state, id) index
// and sorts every pending row, which is the very cost this avoids.
const claimSQL = `
	UPDATE webhook_deliveries
	SET state = 'processing',
		claim_expires_at = :now + :lease,
		claim_token = lower(hex(randomblob(16)))
	WHERE id IN (
		SELECT id FROM (
			SELECT id, next_attempt_at FROM (
				SELECT id, next_attempt_at FROM webhook_deliveries INDEXED BY webhook_deliveries_pending_order
				WHERE state = 'pending' AND held = 0 AND next_attempt_at <= :now
				ORDER BY next_attempt_at, id LIMIT :limit)
			UNION ALL
			SELECT id, next_attempt_at FROM (
				SELECT id, next_attempt_at FROM webhook_deliveries INDEXED BY webhook_deliveries_processing_order
				WHERE state = 'processing' AND claim_expires_at < :now
				ORDER BY next_attempt_at, id LIMIT :limit))
		ORDER BY next_attempt_at, id LIMIT :limit)
	RETURNING ` + deliveryColumns + `, claim_token`

// claimFairSQL claims the pending rows pickFair chose (:picked, a JSON list
// of ids) and the oldest expired leases, oldest due first.
const claimFairSQL = `
	UPDATE webhook_deliveries
	SET state = 'processing',
		claim_expires_at = :now + :lease,
		claim_token = lower(hex(randomblob(16)))
	WHERE id IN (
		SELECT id FROM (
			SELECT id, next_attempt_at FROM webhook_deliveries
			WHERE id IN (SELECT value FROM json_each(:picked))
				AND state = 'pending' AND held = 0 AND next_attempt_at <= :now
			UNION ALL
			SELECT id, next_attempt_at FROM (
				SELECT id, next_attempt_at FROM webhook_deliveries INDEXED BY webhook_deliveries_processing_order
				WHERE state = 'processing' AND claim_expires_at < :now
				ORDER BY next_attempt_at, id LIMIT :limit))
		ORDER BY next_attempt_at, id LIMIT :limit)
	RETURNING ` + deliveryColumns + `, claim_token`

// The statements of a claim with a share (see storage.PickShare): the due
// queue heads in order, from the first or after a cursor, leaving out the
// endpoints in :exclude or, with :only, all but those in :include (one
// more than asked: the cutoff); one endpoint's first claimable rows,
// whenever due; and a head moved on.
const (
	headsWhere = `next_due_at IS NOT NULL AND next_due_at <= :now
			AND endpoint_id NOT IN (SELECT value FROM json_each(:exclude))
			AND (:only = 0 OR endpoint_id IN (SELECT value FROM json_each(:include)))`
	headsFirstSQL = `SELECT endpoint_id, next_due_at, head_id
		FROM webhook_endpoint_queues INDEXED BY webhook_endpoint_queues_due
		WHERE ` + headsWhere + `
		ORDER BY next_due_at, head_id LIMIT :n`
	headsAfterSQL = `SELECT endpoint_id, next_due_at, head_id
		FROM webhook_endpoint_queues INDEXED BY webhook_endpoint_queues_due
		WHERE ` + headsWhere + ` AND (next_due_at, head_id) > (:after_due, :after_id)
		ORDER BY next_due_at, head_id LIMIT :n`
	probeSQL = `SELECT id, next_attempt_at
		FROM webhook_deliveries INDEXED BY webhook_deliveries_endpoint_due
		WHERE endpoint_id = :endpoint AND state = 'pending' AND held = 0
		ORDER BY next_attempt_at, id LIMIT :n`
	moveHeadSQL = `UPDATE webhook_endpoint_queues SET next_due_at = :due, head_id = :head WHERE endpoint_id = :endpoint`
)

// headSource reads heads and rows for storage.PickShare in a claim's
// transaction: the single writer's, so nothing changes under it.
type headSource struct {
	first, after, probe *sql.Stmt
	now                 int64
}

func (h *headSource) Now() int64 { return h.now }

func (h *headSource) Heads(ctx context.Context, after *storage.DueHead, n int, exclude, include []string) ([]storage.DueHead, *storage.DueHead, error) {
	if exclude == nil {
		exclude = []string{} // not null: NOT IN a null list leaves out every row
	}
	args := []any{sql.Named("now", h.now), sql.Named("exclude", jsonList(exclude)),
		sql.Named("only", include != nil), sql.Named("include", jsonList(include)), sql.Named("n", n+1)}
	st := h.first
	if after != nil {
		st = h.after
		args = append(args, sql.Named("after_due", after.Due), sql.Named("after_id", after.ID))
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var heads []storage.DueHead
	for rows.Next() {
		var d storage.DueHead
		if err := rows.Scan(&d.EndpointID, &d.Due, &d.ID); err != nil {
			return nil, nil, err
		}
		heads = append(heads, d)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(heads) > n {
		return heads[:n], &heads[n], nil
	}
	return heads, nil, nil
}

func (h *headSource) Probe(ctx context.Context, endpoints []string, counts []int) (map[string][]storage.DueRow, error) {
	out := make(map[string][]storage.DueRow, len(endpoints))
	for i, endpoint := range endpoints {
		rows, err := h.probe.QueryContext(ctx, sql.Named("endpoint", endpoint), sql.Named("n", counts[i]))
		if err != nil {
			return nil, err
		}
		var got []storage.DueRow
		for rows.Next() {
			var r storage.DueRow
			if err := rows.Scan(&r.ID, &r.Due); err != nil {
				rows.Close()
				return nil, err
			}
			got = append(got, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out[endpoint] = got
	}
	return out, nil
}

const endpointsByIDSQL = `SELECT ` + endpointColumns + ` FROM webhook_endpoints
	WHERE id IN (SELECT value FROM json_each(?))`

// DeliveryClaim claims up to p.Limit claimable deliveries in one writer
// transaction, each with its event and its endpoint, and returns those the
// endpoints' controls admit (see admitClaims). The single writer connection
// (and, across processes, SQLite's write lock) is what keeps two claimers
// from picking the same row and two processes from overspending one
// endpoint's budget.
func (s *Store) DeliveryClaim(ctx context.Context, p storage.DeliveryClaimParams) ([]storage.Claim, error) {
	const op = "claim deliveries"
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	queries := []string{claimSQL, eventsByIDSQL, endpointsByIDSQL}
	if p.Share != nil {
		queries = []string{claimFairSQL, eventsByIDSQL, endpointsByIDSQL, headsFirstSQL, headsAfterSQL, probeSQL, moveHeadSQL}
	}
	st, err := s.prepare(ctx, queries...)
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	nowTime := s.now(p.Now)
	now := micros(nowTime)
	claims := []storage.Claim{}
	var later []time.Duration
	err = s.write(ctx, op, func(tx *sql.Tx) error {
		args := []any{sql.Named("now", now), sql.Named("lease", p.Lease.Microseconds()), sql.Named("limit", p.Limit)}
		var pick storage.SharePick
		if p.Share != nil {
			var err error
			pick, err = storage.PickShare(ctx, &headSource{
				first: tx.StmtContext(ctx, st[3]),
				after: tx.StmtContext(ctx, st[4]),
				probe: tx.StmtContext(ctx, st[5]),
				now:   now,
			}, p.Share, p.Limit)
			if err != nil {
				return err
			}
			args = append(args, sql.Named("picked", jsonList(pick.IDs)))
		}
		rows, err := tx.StmtContext(ctx, st[0]).QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c storage.Claim
			if c.Delivery, err = scanDelivery(rows, &c.Token); err != nil {
				return err
			}
			claims = append(claims, c)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		if p.Share != nil {
			claimed := make(map[string]bool, len(claims))
			for _, c := range claims {
				claimed[c.Delivery.ID] = true
			}
			move := tx.StmtContext(ctx, st[6])
			for _, m := range pick.Moves() {
				var due, head any // none: NULL
				if h := m.Head(claimed); h != nil {
					due, head = h.Due, h.ID
				}
				if _, err := move.ExecContext(ctx, sql.Named("due", due), sql.Named("head", head), sql.Named("endpoint", m.EndpointID)); err != nil {
					return err
				}
			}
		}
		if len(claims) == 0 {
			return nil
		}
		// RETURNING comes in no promised order.
		sort.Slice(claims, func(i, j int) bool {
			a, b := claims[i].Delivery, claims[j].Delivery
			if !a.NextAttemptAt.Equal(b.NextAttemptAt) {
				return a.NextAttemptAt.Before(b.NextAttemptAt)
			}
			return a.ID < b.ID
		})
		eventIDs := make([]string, len(claims))
		endpointIDs := make([]string, len(claims))
		for i, c := range claims {
			eventIDs[i] = c.Delivery.EventID
			endpointIDs[i] = c.Delivery.EndpointID
		}
		events, err := eventsByID(ctx, tx.StmtContext(ctx, st[1]), eventIDs)
		if err != nil {
			return err
		}
		endpoints, err := endpointsByID(ctx, tx.StmtContext(ctx, st[2]), endpointIDs, s.secrets)
		if err != nil {
			return err
		}
		for i := range claims {
			c := &claims[i]
			var ok bool
			if c.Event, ok = events[c.Delivery.EventID]; !ok {
				return fmt.Errorf("event %s of delivery %s is missing", c.Delivery.EventID, c.Delivery.ID)
			}
			if c.Endpoint, ok = endpoints[c.Delivery.EndpointID]; !ok {
				return fmt.Errorf("endpoint %s of delivery %s is missing", c.Delivery.EndpointID, c.Delivery.ID)
			}
		}
		claims, later, err = admitClaims(ctx, tx, claims, nowTime)
		return err
	})
	if err != nil {
		return nil, err
	}
	// What the endpoints' budgets put back is due later: wake up for it
	// then rather than find it by polling.
	for _, d := range later {
		s.wake.SignalAfter(d)
	}
	return claims, nil
}

// endpointsByID reads the endpoints named in ids (repeats allowed) with
// the prepared endpointsByIDSQL, their secrets opened by codec.
func endpointsByID(ctx context.Context, st *sql.Stmt, ids []string, codec storage.SecretsCodec) (map[string]storage.Endpoint, error) {
	rows, err := st.QueryContext(ctx, jsonList(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]storage.Endpoint{}
	for rows.Next() {
		e, err := scanEndpoint(rows, codec)
		if err != nil {
			return nil, err
		}
		out[e.ID] = e
	}
	return out, rows.Err()
}

// completeSQL is the owner's transition, fenced on the token. Both
// counters rise: the owner spends from the cycle. A request went out, so
// the reason an earlier claim sent none is cleared. In SET, column names
// read the row as it was before the update.
const completeSQL = `
	UPDATE webhook_deliveries
	SET attempts = attempts + 1,
		cycle_attempts = cycle_attempts + 1,
		state = CASE
			WHEN :outcome = 'delivered' THEN 'delivered'
			WHEN :outcome = 'permanent' THEN 'failed'
			WHEN cycle_attempts + 1 >= :allowance THEN 'failed'
			ELSE 'pending' END,
		next_attempt_at = CASE
			WHEN :outcome = 'retryable' AND cycle_attempts + 1 < :allowance THEN :now + :delay
			ELSE next_attempt_at END,
		completed_at = CASE
			WHEN :outcome = 'retryable' AND cycle_attempts + 1 < :allowance THEN NULL
			ELSE :now END,
		held = CASE
			WHEN :outcome = 'retryable' AND cycle_attempts + 1 < :allowance THEN
				(SELECT disabled_at IS NOT NULL FROM webhook_endpoints AS ep WHERE ep.id = endpoint_id)
			ELSE 0 END,
		unsent_reason = '',
		claim_token = NULL,
		claim_expires_at = NULL
	WHERE id = :id AND claim_token = :token
	RETURNING ` + deliveryColumns

const insertAttemptSQL = `
	INSERT INTO webhook_delivery_attempts
		(delivery_id, number, outcome, http_status, error, late, started_at, finished_at, trace_id)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

const deliveryExistsSQL = `SELECT 1 FROM webhook_deliveries WHERE id = ?`

// DeliveryComplete records the owner's attempt and moves the delivery, fenced
// on the claim token.
func (s *Store) DeliveryComplete(ctx context.Context, p storage.DeliveryCompleteParams) (storage.Delivery, storage.Attempt, error) {
	op := "complete delivery " + p.DeliveryID
	res, err := s.DeliveryCompleteBatch(ctx, []storage.DeliveryCompleteParams{p})
	if err != nil {
		return storage.Delivery{}, storage.Attempt{}, err
	}
	if err := res[0].Err; err != nil {
		return storage.Delivery{}, storage.Attempt{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return res[0].Delivery, res[0].Attempt, nil
}

// DeliveryCompleteBatch completes many claims in one writer transaction,
// each entry fenced on its own token as DeliveryComplete is. It keeps the
// endpoints' FailingSince and lets an ordered endpoint's next delivery go
// once the one under way is done.
func (s *Store) DeliveryCompleteBatch(ctx context.Context, ps []storage.DeliveryCompleteParams) ([]storage.DeliveryCompleteResult, error) {
	const op = "complete deliveries"
	errs, err := storage.ValidateCompleteBatch(ps)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	st, err := s.prepare(ctx, completeSQL, insertAttemptSQL, deliveryExistsSQL, endpointControlsSQL)
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	var out []storage.DeliveryCompleteResult
	released := false
	err = s.write(ctx, op, func(tx *sql.Tx) error {
		out = make([]storage.DeliveryCompleteResult, len(ps))
		update, insert, exists := tx.StmtContext(ctx, st[0]), tx.StmtContext(ctx, st[1]), tx.StmtContext(ctx, st[2])
		failing := map[string]*failingUpdate{}
		for i, p := range ps {
			if errs[i] != nil {
				out[i].Err = errs[i]
				continue
			}
			d, a, err := completeOne(ctx, s.now(p.Now), p, update, insert, exists)
			switch {
			case errors.Is(err, storage.ErrClaimLost) || errors.Is(err, storage.ErrNotFound):
				out[i].Err = err
			case err != nil:
				return err
			default:
				out[i].Delivery, out[i].Attempt = d, a
				f := failing[d.EndpointID]
				if f == nil {
					f = &failingUpdate{}
					failing[d.EndpointID] = f
				}
				f.add(a)
			}
		}
		if len(failing) == 0 {
			return nil
		}
		ids := make([]string, 0, len(failing))
		for id := range failing {
			ids = append(ids, id)
		}
		controls, err := scanControls(tx.StmtContext(ctx, st[3]).QueryContext(ctx, jsonList(ids)))
		if err != nil {
			return err
		}
		if err := recordFailing(ctx, tx, failing, controls); err != nil {
			return err
		}
		released, err = promoteAll(ctx, tx, controls)
		return err
	})
	if err != nil {
		return nil, err
	}
	if released {
		s.wake.Signal()
	}
	for i, r := range out {
		if r.Err == nil && r.Delivery.State == storage.StatePending && !r.Delivery.Held {
			s.wake.SignalAfter(ps[i].RetryDelay)
		}
	}
	return out, nil
}

// completeOne is one entry of a completion batch, inside its transaction.
func completeOne(ctx context.Context, now time.Time, p storage.DeliveryCompleteParams, update, insert, exists *sql.Stmt) (storage.Delivery, storage.Attempt, error) {
	a := storage.Attempt{
		DeliveryID: p.DeliveryID,
		Outcome:    p.Outcome,
		HTTPStatus: p.HTTPStatus,
		Error:      storage.BoundError(p.Error),
		StartedAt:  orNow(p.StartedAt, now),
		FinishedAt: orNow(p.FinishedAt, now),
		TraceID:    p.TraceID,
	}
	d, err := scanDelivery(update.QueryRowContext(ctx,
		sql.Named("outcome", string(p.Outcome)),
		sql.Named("allowance", p.Allowance()),
		sql.Named("now", micros(now)),
		sql.Named("delay", p.RetryDelay.Microseconds()),
		sql.Named("id", p.DeliveryID),
		sql.Named("token", p.Token)))
	if errors.Is(err, sql.ErrNoRows) {
		ok, err := rowExists(exists.QueryRowContext(ctx, p.DeliveryID))
		switch {
		case err != nil:
			return d, a, err
		case !ok:
			return d, a, storage.ErrNotFound
		}
		return d, a, storage.ErrClaimLost
	}
	if err != nil {
		return d, a, err
	}
	a.Number = d.Attempts
	_, err = insert.ExecContext(ctx, attemptArgs(a)...)
	return d, a, err
}

// orNow is t at the store's precision, or now when t is zero.
func orNow(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t.UTC().Truncate(time.Microsecond)
}

func insertAttempt(ctx context.Context, tx *sql.Tx, a storage.Attempt) error {
	_, err := tx.ExecContext(ctx, insertAttemptSQL, attemptArgs(a)...)
	return err
}

// attemptArgs are insertAttemptSQL's arguments for a.
func attemptArgs(a storage.Attempt) []any {
	return []any{a.DeliveryID, a.Number, string(a.Outcome), nullStatus(a.HTTPStatus), a.Error, boolInt(a.Late),
		micros(a.StartedAt), micros(a.FinishedAt), a.TraceID}
}

// AttemptRecordLate records a request made under a superseded claim. It
// takes the next lifetime number from the stored row, under the writer's
// lock, and changes nothing else on the row.
func (s *Store) AttemptRecordLate(ctx context.Context, p storage.AttemptRecordLateParams) (storage.Attempt, error) {
	op := "record late attempt for delivery " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.Attempt{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	a := storage.Attempt{
		DeliveryID: p.DeliveryID,
		Outcome:    p.Outcome,
		HTTPStatus: p.HTTPStatus,
		Error:      storage.BoundError(p.Error),
		Late:       true,
		StartedAt:  p.StartedAt.UTC().Truncate(time.Microsecond),
		FinishedAt: p.FinishedAt.UTC().Truncate(time.Microsecond),
		TraceID:    p.TraceID,
	}
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `
			UPDATE webhook_deliveries SET attempts = attempts + 1
			WHERE id = ? AND (claim_token IS NULL OR claim_token <> ?)
			RETURNING attempts`, p.DeliveryID, p.Token).Scan(&a.Number)
		if errors.Is(err, sql.ErrNoRows) {
			exists, err := deliveryExists(ctx, tx, p.DeliveryID)
			if err != nil {
				return err
			}
			if !exists {
				return storage.ErrNotFound
			}
			return storage.ErrClaimHeld
		}
		if err != nil {
			return err
		}
		return insertAttempt(ctx, tx, a)
	})
	if err != nil {
		return storage.Attempt{}, err
	}
	return a, nil
}

// DeliveryRelease gives a claim back without spending an attempt, keeping
// the reason when one is given.
func (s *Store) DeliveryRelease(ctx context.Context, p storage.DeliveryReleaseParams) (storage.Delivery, error) {
	op := "release delivery " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.Delivery{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	now := micros(s.now(p.Now))
	d, err := s.deliveryFenced(ctx, op, p.DeliveryID, `
			UPDATE webhook_deliveries
			SET state = 'pending', next_attempt_at = :next, claim_token = NULL, claim_expires_at = NULL,
				held = (SELECT disabled_at IS NOT NULL FROM webhook_endpoints AS ep WHERE ep.id = endpoint_id),
				unsent_reason = CASE WHEN :reason = '' THEN unsent_reason ELSE :reason END
			WHERE id = :id AND claim_token = :token
			RETURNING `+deliveryColumns, nil,
		sql.Named("next", now+p.Delay.Microseconds()), sql.Named("reason", storage.BoundError(p.Reason)),
		sql.Named("id", p.DeliveryID), sql.Named("token", p.Token))
	if err == nil && !d.Held {
		s.wake.SignalAfter(p.Delay)
	}
	return d, err
}

// DeliveryFail ends a claim as failed without a request: no attempt, no
// counter changed, the reason kept. An ordered endpoint's next delivery may
// then go, as after any failure. Fenced on the token.
func (s *Store) DeliveryFail(ctx context.Context, p storage.DeliveryFailParams) (storage.Delivery, error) {
	op := "fail delivery " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.Delivery{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	now := micros(s.now(p.Now))
	// An ordered endpoint's next delivery may go, as after any failure.
	released := false
	promote := func(tx *sql.Tx, d storage.Delivery) error {
		controls, err := endpointControls(ctx, tx, []string{d.EndpointID})
		if err != nil {
			return err
		}
		released, err = promoteAll(ctx, tx, controls)
		return err
	}
	d, err := s.deliveryFenced(ctx, op, p.DeliveryID, `
			UPDATE webhook_deliveries
			SET state = 'failed', completed_at = ?, claim_token = NULL, claim_expires_at = NULL,
				held = 0, unsent_reason = ?
			WHERE id = ? AND claim_token = ?
			RETURNING `+deliveryColumns, promote,
		now, storage.BoundError(p.Reason), p.DeliveryID, p.Token)
	if err == nil && released {
		s.wake.Signal()
	}
	return d, err
}

// deliveryFenced runs update, an UPDATE of one delivery fenced on its claim
// token that returns the row, then, when set, after in the same write. A
// fence that matches no row is ErrNotFound or ErrClaimLost, and nothing is
// written.
func (s *Store) deliveryFenced(ctx context.Context, op, id, update string, after func(*sql.Tx, storage.Delivery) error, args ...any) (storage.Delivery, error) {
	var d storage.Delivery
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		var err error
		d, err = scanDelivery(tx.QueryRowContext(ctx, update, args...))
		if errors.Is(err, sql.ErrNoRows) {
			return fenceMiss(ctx, tx, id)
		}
		if err != nil || after == nil {
			return err
		}
		return after(tx, d)
	})
	if err != nil {
		return storage.Delivery{}, err
	}
	return d, nil
}

// fenceMiss explains a fenced UPDATE that matched no row: the id does not
// exist (ErrNotFound), or the token is not the row's (ErrClaimLost).
func fenceMiss(ctx context.Context, tx *sql.Tx, id string) error {
	exists, err := deliveryExists(ctx, tx, id)
	if err != nil {
		return err
	}
	if !exists {
		return storage.ErrNotFound
	}
	return storage.ErrClaimLost
}

// replaySet is the one definition of what replay does to a row: due now, a
// fresh retry cycle, attempts kept, no reason left from the last cycle.
const replaySet = `SET state = 'pending', next_attempt_at = :now, cycle_attempts = 0,
	completed_at = NULL, claim_token = NULL, claim_expires_at = NULL, held = 0, unsent_reason = ''`

// requeued holds the deliveries in ids that just re-entered the queue if
// their endpoint is disabled or ordered, and lets each ordered endpoint's
// next delivery go if none of it is under way or due.
func requeued(ctx context.Context, tx *sql.Tx, ids []string) error {
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT endpoint_id FROM webhook_deliveries
		WHERE id IN (SELECT value FROM json_each(?))`, jsonList(ids))
	if err != nil {
		return err
	}
	endpointIDs, err := collectStrings(rows)
	if err != nil {
		return err
	}
	controls, err := endpointControls(ctx, tx, endpointIDs)
	if err != nil {
		return err
	}
	var holdable []string
	for id, c := range controls {
		if c.holdable() {
			holdable = append(holdable, id)
		}
	}
	if len(holdable) == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET held = 1
		WHERE id IN (SELECT value FROM json_each(?)) AND endpoint_id IN (SELECT value FROM json_each(?))`,
		jsonList(ids), jsonList(holdable)); err != nil {
		return err
	}
	_, err = promoteAll(ctx, tx, controls)
	return err
}

// DeliveryReplay puts one terminal delivery back in the queue and writes the
// audit record.
func (s *Store) DeliveryReplay(ctx context.Context, p storage.DeliveryReplayParams) (storage.Delivery, error) {
	op := "replay delivery " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.Delivery{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	now := micros(s.now(p.Now))
	var d storage.Delivery
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		var err error
		d, err = replayOne(ctx, tx, p, now)
		return err
	})
	if err != nil {
		return storage.Delivery{}, err
	}
	// Due now, or, held at an ordered endpoint, another of its deliveries
	// may have been let go in its place.
	s.wake.Signal()
	return d, nil
}

// replayOne is DeliveryReplay's write, in tx.
func replayOne(ctx context.Context, tx *sql.Tx, p storage.DeliveryReplayParams, now int64) (storage.Delivery, error) {
	// Read then write is safe here: the IMMEDIATE transaction holds the
	// write lock, so the state cannot change in between.
	var prev, endpointID string
	var deleted sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT d.state, d.endpoint_id, ep.deleted_at
		FROM webhook_deliveries AS d JOIN webhook_endpoints AS ep ON ep.id = d.endpoint_id
		WHERE d.id = ?`, p.DeliveryID).Scan(&prev, &endpointID, &deleted); err != nil {
		return storage.Delivery{}, err // sql.ErrNoRows becomes ErrNotFound
	}
	if !storage.DeliveryState(prev).Terminal() {
		return storage.Delivery{}, fmt.Errorf("%w: it is %s", storage.ErrNotTerminal, prev)
	}
	if deleted.Valid {
		return storage.Delivery{}, fmt.Errorf("%w: endpoint %s, which the delivery goes to, was deleted at %s",
			storage.ErrDeleted, endpointID, fromMicros(deleted.Int64).Format(time.RFC3339))
	}
	if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries `+replaySet+` WHERE id = :id`,
		sql.Named("now", now), sql.Named("id", p.DeliveryID)); err != nil {
		return storage.Delivery{}, err
	}
	if err := requeued(ctx, tx, []string{p.DeliveryID}); err != nil {
		return storage.Delivery{}, err
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO webhook_delivery_replays (delivery_id, actor, previous_state, replayed_at)
		VALUES (?, ?, ?, ?)`, p.DeliveryID, p.Actor, prev, now); err != nil {
		return storage.Delivery{}, err
	}
	return scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = ?`, p.DeliveryID))
}

// DeliveryReplayMany replays up to p.BatchSize() terminal deliveries that
// match the filter, oldest first, each with its audit record.
func (s *Store) DeliveryReplayMany(ctx context.Context, p storage.DeliveryReplayManyParams) (int, error) {
	const op = "replay deliveries"
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	now := micros(s.now(p.Now))
	var n int
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		var err error
		n, err = replayMany(ctx, tx, p, now)
		return err
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		s.wake.Signal()
	}
	return n, nil
}

// replayMany is DeliveryReplayMany's write, in tx; it returns how many it
// replayed.
func replayMany(ctx context.Context, tx *sql.Tx, p storage.DeliveryReplayManyParams, now int64) (int, error) {
	where, args := filterSQL(p.Filter)
	// The selection cannot change under us: this transaction holds the
	// write lock from its first statement.
	rows, err := tx.QueryContext(ctx, `
		SELECT id FROM webhook_deliveries
		WHERE `+where+`
			AND endpoint_id NOT IN (SELECT id FROM webhook_endpoints WHERE deleted_at IS NOT NULL)
		ORDER BY id
		LIMIT :limit`,
		append(args, sql.Named("limit", p.BatchSize()))...)
	if err != nil {
		return 0, err
	}
	ids, err := collectStrings(rows)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	idList := sql.Named("ids", jsonList(ids))
	// The audit record goes first, while the row still shows the state
	// it is leaving.
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO webhook_delivery_replays (delivery_id, actor, previous_state, replayed_at)
		SELECT id, :actor, state, :now FROM webhook_deliveries
		WHERE id IN (SELECT value FROM json_each(:ids))
		ORDER BY id`,
		sql.Named("actor", p.Actor), sql.Named("now", now), idList); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `
		UPDATE webhook_deliveries `+replaySet+`
		WHERE id IN (SELECT value FROM json_each(:ids))`,
		sql.Named("now", now), idList)
	if err != nil {
		return 0, err
	}
	updated, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return int(updated), requeued(ctx, tx, ids)
}

// filterSQL writes f as a WHERE condition over webhook_deliveries with named
// arguments. Every field is optional.
func filterSQL(f storage.DeliveryFilter) (string, []any) {
	conds := []string{"1 = 1"}
	var args []any
	if f.State != "" {
		conds = append(conds, "state = :f_state")
		args = append(args, sql.Named("f_state", string(f.State)))
	}
	if f.EndpointID != "" {
		conds = append(conds, "endpoint_id = :f_endpoint")
		args = append(args, sql.Named("f_endpoint", f.EndpointID))
	}
	if f.EventID != "" {
		conds = append(conds, "event_id = :f_event")
		args = append(args, sql.Named("f_event", f.EventID))
	}
	if f.FormID != "" {
		conds = append(conds, "event_id IN (SELECT id FROM webhook_events WHERE form_id = :f_form)")
		args = append(args, sql.Named("f_form", f.FormID))
	}
	if !f.CreatedAfter.IsZero() {
		conds = append(conds, "created_at > :f_after")
		args = append(args, sql.Named("f_after", micros(f.CreatedAfter)))
	}
	if !f.CreatedBefore.IsZero() {
		conds = append(conds, "created_at < :f_before")
		args = append(args, sql.Named("f_before", micros(f.CreatedBefore)))
	}
	return strings.Join(conds, " AND "), args
}

func validateFilter(f storage.DeliveryFilter) error {
	if f.State != "" && !f.State.Valid() {
		return fmt.Errorf("%w: state %q is not pending, processing, delivered or failed", storage.ErrInvalid, f.State)
	}
	return nil
}

// DeliveryGet reads one delivery.
func (s *Store) DeliveryGet(ctx context.Context, id string) (storage.Delivery, error) {
	d, err := scanDelivery(s.reader.QueryRowContext(ctx,
		`SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = ?`, id))
	if err != nil {
		return storage.Delivery{}, s.mapErr("get delivery "+id, err)
	}
	return d, nil
}

// DeliveryList pages through deliveries matching the filter, newest (largest
// id) first; p.Before is the id of the last delivery of the previous page.
func (s *Store) DeliveryList(ctx context.Context, p storage.DeliveryListParams) ([]storage.Delivery, error) {
	const op = "list deliveries"
	if err := validateFilter(p.Filter); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	where, args := filterSQL(p.Filter)
	if p.Before != "" {
		where += " AND id < :before"
		args = append(args, sql.Named("before", p.Before))
	}
	args = append(args, sql.Named("limit", p.PageSize()))
	rows, err := s.reader.QueryContext(ctx, `
		SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE `+where+`
		ORDER BY id DESC
		LIMIT :limit`, args...)
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	out, err := collectDeliveries(rows)
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	return out, nil
}

// DeliveryStats counts deliveries by state, every state present, and how
// many are claimable at now (the Go clock when zero), in one snapshot.
func (s *Store) DeliveryStats(ctx context.Context, now time.Time) (storage.DeliveryStats, error) {
	var pending, processing, delivered, failed, due, held int64
	err := s.reader.QueryRowContext(ctx, `
		SELECT
			coalesce(sum(state = 'pending'), 0),
			coalesce(sum(state = 'processing'), 0),
			coalesce(sum(state = 'delivered'), 0),
			coalesce(sum(state = 'failed'), 0),
			coalesce(sum(`+claimable+`), 0),
			coalesce(sum(state = 'pending' AND held = 1), 0)
		FROM webhook_deliveries`, sql.Named("now", micros(s.now(now)))).
		Scan(&pending, &processing, &delivered, &failed, &due, &held)
	if err != nil {
		return storage.DeliveryStats{}, s.mapErr("delivery stats", err)
	}
	return storage.DeliveryStats{
		ByState: map[storage.DeliveryState]int64{
			storage.StatePending:    pending,
			storage.StateProcessing: processing,
			storage.StateDelivered:  delivered,
			storage.StateFailed:     failed,
		},
		Due:  due,
		Held: held,
	}, nil
}

// AttemptList returns a delivery's attempts in number order; ErrNotFound when
// the delivery does not exist.
func (s *Store) AttemptList(ctx context.Context, deliveryID string) ([]storage.Attempt, error) {
	op := "list attempts of delivery " + deliveryID
	out := []storage.Attempt{}
	err := s.read(ctx, op, func(tx *sql.Tx) error {
		exists, err := deliveryExists(ctx, tx, deliveryID)
		if err != nil {
			return err
		}
		if !exists {
			return storage.ErrNotFound
		}
		rows, err := tx.QueryContext(ctx, `
			SELECT delivery_id, number, outcome, http_status, error, late, started_at, finished_at, trace_id
			FROM webhook_delivery_attempts WHERE delivery_id = ? ORDER BY number`, deliveryID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				a                 storage.Attempt
				outcome           string
				status            sql.NullInt64
				late              int64
				started, finished int64
			)
			if err := rows.Scan(&a.DeliveryID, &a.Number, &outcome, &status, &a.Error, &late,
				&started, &finished, &a.TraceID); err != nil {
				return err
			}
			a.Outcome = storage.OutcomeKind(outcome)
			a.HTTPStatus = int(status.Int64)
			a.Late = late != 0
			a.StartedAt = fromMicros(started)
			a.FinishedAt = fromMicros(finished)
			out = append(out, a)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReplayList returns a delivery's replay audit records, oldest first;
// ErrNotFound when the delivery does not exist.
func (s *Store) ReplayList(ctx context.Context, deliveryID string) ([]storage.Replay, error) {
	op := "list replays of delivery " + deliveryID
	out := []storage.Replay{}
	err := s.read(ctx, op, func(tx *sql.Tx) error {
		exists, err := deliveryExists(ctx, tx, deliveryID)
		if err != nil {
			return err
		}
		if !exists {
			return storage.ErrNotFound
		}
		rows, err := tx.QueryContext(ctx, `
			SELECT delivery_id, actor, previous_state, replayed_at
			FROM webhook_delivery_replays WHERE delivery_id = ? ORDER BY id`, deliveryID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				r    storage.Replay
				prev string
				at   int64
			)
			if err := rows.Scan(&r.DeliveryID, &r.Actor, &prev, &at); err != nil {
				return err
			}
			r.PreviousState = storage.DeliveryState(prev)
			r.ReplayedAt = fromMicros(at)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeliveryPrune removes delivered deliveries completed before the cutoff,
// oldest ids first, with everything that hangs off them, in one writer
// transaction.
func (s *Store) DeliveryPrune(ctx context.Context, p storage.DeliveryPruneParams) (int, error) {
	const op = "prune deliveries"
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	var n int
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		// The doomed rows go into a temporary table so that every delete
		// below names exactly the same set.
		if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS prune_ids (id TEXT PRIMARY KEY, event_id TEXT NOT NULL)`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM prune_ids`); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `
			INSERT INTO prune_ids (id, event_id)
			SELECT id, event_id FROM webhook_deliveries
			WHERE state = 'delivered' AND completed_at < ?
			ORDER BY state, id
			LIMIT ?`, micros(p.CompletedBefore), p.BatchSize())
		if err != nil {
			return err
		}
		affected, err := res.RowsAffected()
		if err != nil || affected == 0 {
			return err
		}
		n = int(affected)
		// Attempts and replay records reference the delivery, the
		// delivery references its event: remove them in that order, then
		// the events nothing references any more.
		for _, q := range []string{
			`DELETE FROM webhook_delivery_attempts WHERE delivery_id IN (SELECT id FROM prune_ids)`,
			`DELETE FROM webhook_delivery_replays WHERE delivery_id IN (SELECT id FROM prune_ids)`,
			`DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM prune_ids)`,
			`DELETE FROM webhook_events WHERE id IN (SELECT event_id FROM prune_ids)
				AND NOT EXISTS (SELECT 1 FROM webhook_deliveries AS d WHERE d.event_id = webhook_events.id)`,
			`DELETE FROM prune_ids`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
