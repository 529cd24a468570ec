package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hymical/hymical/storage"
)

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

// attemptArgs are insertAttemptSQL's arguments for a.
func attemptArgs(a storage.Attempt) []any {
	return []any{a.DeliveryID, a.Number, string(a.Outcome), nullStatus(a.HTTPStatus), a.Error, boolInt(a.Late),
		micros(a.StartedAt), micros(a.FinishedAt), a.TraceID}
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

func insertAttempt(ctx context.Context, tx *sql.Tx, a storage.Attempt) error {
	_, err := tx.ExecContext(ctx, insertAttemptSQL, attemptArgs(a)...)
	return err
}
