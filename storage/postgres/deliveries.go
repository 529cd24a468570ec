package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// claimSQL claims in one statement: the CTE picks due rows and locks them,
// skipping rows another claimer has locked, so concurrent claimers neither
// wait nor overlap; only the picked rows are written. A lease is "expired"
// strictly after claim_expires_at, a pending row is due at next_attempt_at.
const claimSQL = `
WITH due AS (
	SELECT id FROM webhook_deliveries
	WHERE (state = 'pending' AND next_attempt_at <= coalesce($1::timestamptz, now()))
	   OR (state = 'processing' AND claim_expires_at < coalesce($1::timestamptz, now()))
	ORDER BY next_attempt_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), claimed AS (
	UPDATE webhook_deliveries AS d
	SET state = 'processing',
		claim_expires_at = coalesce($1::timestamptz, now()) + $3::bigint * interval '1 microsecond',
		claim_token = gen_random_uuid()::text
	FROM due
	WHERE d.id = due.id
	RETURNING d.*
)
SELECT ` + deliveryColumns + `, d.claim_token, ` + eventColumns + `
FROM claimed AS d JOIN webhook_events AS e ON e.id = d.event_id
ORDER BY d.next_attempt_at, d.id`

// DeliveryClaim claims up to p.Limit claimable deliveries, oldest due first,
// each with a fresh random token and the event it carries.
func (s *Store) DeliveryClaim(ctx context.Context, p storage.DeliveryClaimParams) ([]storage.Claim, error) {
	const op = "delivery claim"
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	rows, err := s.pool.Query(ctx, claimSQL, dbNow(p.Now), p.Limit, p.Lease.Microseconds())
	if err != nil {
		return nil, mapErr(op, err)
	}
	claims, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Claim, error) {
		var c storage.Claim
		var ev eventScan
		err := r.Scan(append(append(deliveryDest(&c.Delivery), &c.Token), ev.dest()...)...)
		c.Event = ev.event()
		return c, err
	})
	if err != nil {
		return nil, mapErr(op, err)
	}
	if claims == nil {
		claims = []storage.Claim{}
	}
	return claims, nil
}

// completeSQL is the owner's transition, fenced on the token. Every owner
// attempt raises both counters; the allowance is measured against
// cycle_attempts after this attempt.
const completeSQL = `
UPDATE webhook_deliveries AS d
SET attempts = d.attempts + 1,
	cycle_attempts = d.cycle_attempts + 1,
	state = CASE
		WHEN $3::text = 'delivered' THEN 'delivered'
		WHEN $3::text = 'permanent' THEN 'failed'
		WHEN d.cycle_attempts + 1 >= $4::integer THEN 'failed'
		ELSE 'pending'
	END,
	next_attempt_at = CASE
		WHEN $3::text = 'retryable' AND d.cycle_attempts + 1 < $4::integer
		THEN coalesce($5::timestamptz, now()) + $6::bigint * interval '1 microsecond'
		ELSE d.next_attempt_at
	END,
	completed_at = CASE
		WHEN $3::text = 'retryable' AND d.cycle_attempts + 1 < $4::integer THEN NULL
		ELSE coalesce($5::timestamptz, now())
	END,
	claim_token = NULL,
	claim_expires_at = NULL
WHERE d.id = $1 AND d.claim_token = $2
RETURNING ` + deliveryColumns

const insertAttemptSQL = `
INSERT INTO webhook_delivery_attempts AS a (delivery_id, number, outcome, http_status, error, late,
	started_at, finished_at, trace_id)
VALUES ($1, $2, $3, $4, $5, $6, coalesce($7::timestamptz, now()), coalesce($8::timestamptz, now()), $9)
RETURNING ` + attemptColumns

// DeliveryComplete records the owner's attempt and moves the delivery on,
// fenced on p.Token. On storage.ErrClaimLost nothing is written.
func (s *Store) DeliveryComplete(ctx context.Context, p storage.DeliveryCompleteParams) (storage.Delivery, storage.Attempt, error) {
	op := "delivery complete " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.Delivery{}, storage.Attempt{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	started, finished := p.StartedAt, p.FinishedAt
	if started.IsZero() {
		started = p.Now
	}
	if finished.IsZero() {
		finished = p.Now
	}
	var d storage.Delivery
	var a storage.Attempt
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		d, err = scanDelivery(tx.QueryRow(ctx, completeSQL, p.DeliveryID, p.Token, string(p.Outcome),
			p.Allowance(), dbNow(p.Now), p.RetryDelay.Microseconds()))
		if errors.Is(err, pgx.ErrNoRows) {
			return fenceMiss(ctx, tx, p.DeliveryID, storage.ErrClaimLost)
		}
		if err != nil {
			return err
		}
		// The UPDATE holds the row lock until commit, so no late worker can
		// take this number in between.
		a, err = scanAttempt(tx.QueryRow(ctx, insertAttemptSQL, d.ID, d.Attempts, string(p.Outcome),
			nullStatus(p.HTTPStatus), storage.BoundError(p.Error), false,
			dbNow(started), dbNow(finished), p.TraceID))
		return err
	})
	if err != nil {
		return storage.Delivery{}, storage.Attempt{}, mapErr(op, err)
	}
	return d, a, nil
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
// no counter changed. Fenced on the token.
func (s *Store) DeliveryRelease(ctx context.Context, p storage.DeliveryReleaseParams) (storage.Delivery, error) {
	op := "delivery release " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.Delivery{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var d storage.Delivery
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		d, err = scanDelivery(tx.QueryRow(ctx, `
			UPDATE webhook_deliveries AS d
			SET state = 'pending',
				next_attempt_at = coalesce($3::timestamptz, now()) + $4::bigint * interval '1 microsecond',
				claim_token = NULL,
				claim_expires_at = NULL
			WHERE d.id = $1 AND d.claim_token = $2
			RETURNING `+deliveryColumns,
			p.DeliveryID, p.Token, dbNow(p.Now), p.Delay.Microseconds()))
		if errors.Is(err, pgx.ErrNoRows) {
			return fenceMiss(ctx, tx, p.DeliveryID, storage.ErrClaimLost)
		}
		return err
	})
	if err != nil {
		return storage.Delivery{}, mapErr(op, err)
	}
	return d, nil
}

// replaySet is the row change every replay makes: due now, a fresh retry
// cycle, attempts kept.
const replaySet = `
	SET state = 'pending',
		next_attempt_at = coalesce($2::timestamptz, now()),
		cycle_attempts = 0,
		completed_at = NULL,
		claim_token = NULL,
		claim_expires_at = NULL`

// DeliveryReplay moves one terminal delivery back to pending and writes who
// did it. storage.ErrNotTerminal for a pending or processing delivery.
func (s *Store) DeliveryReplay(ctx context.Context, p storage.DeliveryReplayParams) (storage.Delivery, error) {
	op := "delivery replay " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.Delivery{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var d storage.Delivery
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Lock first, so two operators replaying at once cannot both see
		// the terminal state: the second waits and then sees pending.
		var prev storage.DeliveryState
		err := tx.QueryRow(ctx, `SELECT state FROM webhook_deliveries WHERE id = $1 FOR UPDATE`, p.DeliveryID).Scan(&prev)
		if err != nil {
			return err
		}
		if !prev.Terminal() {
			return fmt.Errorf("%w (it is %s)", storage.ErrNotTerminal, prev)
		}
		d, err = scanDelivery(tx.QueryRow(ctx, `UPDATE webhook_deliveries AS d`+replaySet+`
			WHERE d.id = $1 RETURNING `+deliveryColumns, p.DeliveryID, dbNow(p.Now)))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO webhook_delivery_replays (delivery_id, actor, previous_state, replayed_at)
			VALUES ($1, $2, $3, coalesce($4::timestamptz, now()))`,
			p.DeliveryID, p.Actor, string(prev), dbNow(p.Now))
		return err
	})
	if err != nil {
		return storage.Delivery{}, mapErr(op, err)
	}
	return d, nil
}

// DeliveryReplayMany replays up to p.BatchSize() terminal deliveries that
// match p.Filter, oldest first, in one statement, and returns how many.
// Rows another transaction has locked are skipped, not waited for.
func (s *Store) DeliveryReplayMany(ctx context.Context, p storage.DeliveryReplayManyParams) (int, error) {
	const op = "delivery replay many"
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("postgres: %s: %w", op, err)
	}
	// $1 actor, $2 now, $3 limit; the filter's arguments follow.
	w := newWhere(p.Actor, dbNow(p.Now), p.BatchSize())
	w.filter(p.Filter)
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
)
INSERT INTO webhook_delivery_replays (delivery_id, actor, previous_state, replayed_at)
SELECT id, $1, previous_state, coalesce($2::timestamptz, now()) FROM replayed`
	tag, err := s.pool.Exec(ctx, sql, w.args...)
	if err != nil {
		return 0, mapErr(op, err)
	}
	return int(tag.RowsAffected()), nil
}
