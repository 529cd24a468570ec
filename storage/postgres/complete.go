package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

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

// deliveryExists tells a missing delivery from a fenced UPDATE that matched
// nothing.
func deliveryExists(ctx context.Context, tx pgx.Tx, id string) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_deliveries WHERE id = $1)`, id).Scan(&ok)
	return ok, err
}

const insertAttemptSQL = `
INSERT INTO webhook_delivery_attempts AS a (delivery_id, number, outcome, http_status, error, late,
	started_at, finished_at, trace_id)
VALUES ($1, $2, $3, $4, $5, $6, coalesce($7::timestamptz, now()), coalesce($8::timestamptz, now()), $9)
RETURNING ` + attemptColumns
