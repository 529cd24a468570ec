package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// DeliveryReplay moves one terminal delivery back to pending and writes who
// did it, in one transaction that first claims p.Idempotency's key when
// there is one; a key found held answers with the delivery as it is now.
// storage.ErrNotTerminal for a pending or processing delivery.
func (s *Store) DeliveryReplay(ctx context.Context, p storage.DeliveryReplayParams) (storage.DeliveryReplayResult, error) {
	op := "delivery replay " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.DeliveryReplayResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	key := p.Idempotency
	var d storage.Delivery
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if key != nil {
			if err := claimKey(ctx, tx, key.Key, keyRecord{
				operation: storage.OpDeliveryReplay, requestHash: key.RequestHash, deliveryID: ptr(p.DeliveryID),
			}, p.Now, key.KeyWindow()); err != nil {
				return err
			}
		}
		var err error
		d, err = s.replayOne(ctx, tx, p)
		return err
	})
	if errors.Is(err, errKeyTaken) {
		if _, err := s.heldKey(ctx, key.Key, storage.KeyUse{Operation: storage.OpDeliveryReplay, Target: p.DeliveryID, RequestHash: key.RequestHash}); err != nil {
			return storage.DeliveryReplayResult{}, mapErr(op, err)
		}
		d, err := s.DeliveryGet(ctx, p.DeliveryID)
		if err != nil {
			return storage.DeliveryReplayResult{}, err
		}
		return storage.DeliveryReplayResult{Delivery: d, Duplicate: true}, nil
	}
	if err != nil {
		return storage.DeliveryReplayResult{}, mapErr(op, err)
	}
	s.notified()
	return storage.DeliveryReplayResult{Delivery: d}, nil
}

// DeliveryReplayMany replays up to p.BatchSize() terminal deliveries that
// match p.Filter, oldest first, in one statement, and returns how many.
// Rows another transaction has locked are skipped, not waited for. With
// p.Idempotency it claims the key first and records the count, in the
// same transaction; a key found held answers with the first count.
func (s *Store) DeliveryReplayMany(ctx context.Context, p storage.DeliveryReplayManyParams) (storage.DeliveryReplayManyResult, error) {
	const op = "delivery replay many"
	if err := p.Validate(); err != nil {
		return storage.DeliveryReplayManyResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	key := p.Idempotency
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if key != nil {
			if err := claimKey(ctx, tx, key.Key, keyRecord{
				operation: storage.OpDeliveryReplayMany, requestHash: key.RequestHash, replayed: ptr(0),
			}, p.Now, key.KeyWindow()); err != nil {
				return err
			}
		}
		var err error
		if n, err = s.replayMany(ctx, tx, p); err != nil || key == nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE webhook_idempotency_keys SET replayed = $2 WHERE key = $1`, key.Key, n)
		return err
	})
	if errors.Is(err, errKeyTaken) {
		rec, err := s.heldKey(ctx, key.Key, storage.KeyUse{Operation: storage.OpDeliveryReplayMany, RequestHash: key.RequestHash})
		if err != nil {
			return storage.DeliveryReplayManyResult{}, mapErr(op, err)
		}
		res := storage.DeliveryReplayManyResult{Duplicate: true}
		if rec.replayed != nil {
			res.Count = *rec.replayed
		}
		return res, nil
	}
	if err != nil {
		return storage.DeliveryReplayManyResult{}, mapErr(op, err)
	}
	if n > 0 {
		s.notified()
	}
	return storage.DeliveryReplayManyResult{Count: n}, nil
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
