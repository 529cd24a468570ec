package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hymical/hymical/storage"
)

// replaySet is the one definition of what replay does to a row: due now, a
// fresh retry cycle, attempts kept, no reason left from the last cycle.
const replaySet = `SET state = 'pending', next_attempt_at = :now, cycle_attempts = 0,
	completed_at = NULL, claim_token = NULL, claim_expires_at = NULL, held = 0, unsent_reason = ''`

// DeliveryReplay puts one terminal delivery back in the queue and writes the
// audit record and, with p.Idempotency, the key, in one IMMEDIATE
// transaction; a repeat of the key answers with the delivery as it is.
func (s *Store) DeliveryReplay(ctx context.Context, p storage.DeliveryReplayParams) (storage.DeliveryReplayResult, error) {
	op := "replay delivery " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.DeliveryReplayResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	key := p.Idempotency
	now := s.now(p.Now)
	var res storage.DeliveryReplayResult
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		if key != nil {
			rec, held, err := heldKey(ctx, tx, *key, now)
			if err != nil {
				return err
			}
			if held {
				if err := rec.repeats(storage.OpDeliveryReplay, p.DeliveryID, key.RequestHash); err != nil {
					return err
				}
				d, err := scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = ?`, p.DeliveryID))
				res = storage.DeliveryReplayResult{Delivery: d, Duplicate: true}
				return err
			}
		}
		d, err := replayOne(ctx, tx, p, micros(now))
		res = storage.DeliveryReplayResult{Delivery: d}
		if err != nil || key == nil {
			return err
		}
		return recordKey(ctx, tx, key.Key, keyRecord{
			operation: storage.OpDeliveryReplay, requestHash: key.RequestHash, deliveryID: validString(p.DeliveryID),
		}, now)
	})
	if err != nil {
		return storage.DeliveryReplayResult{}, err
	}
	if !res.Duplicate {
		// Due now, or, held at an ordered endpoint, another of its
		// deliveries may have been let go in its place.
		s.wake.Signal()
	}
	return res, nil
}

// DeliveryReplayMany replays up to p.BatchSize() terminal deliveries that
// match the filter, oldest first, each with its audit record, and, with
// p.Idempotency, records the key with their count in the same IMMEDIATE
// transaction; a repeat of the key answers with the first count.
func (s *Store) DeliveryReplayMany(ctx context.Context, p storage.DeliveryReplayManyParams) (storage.DeliveryReplayManyResult, error) {
	const op = "replay deliveries"
	if err := p.Validate(); err != nil {
		return storage.DeliveryReplayManyResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	key := p.Idempotency
	now := s.now(p.Now)
	var res storage.DeliveryReplayManyResult
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		if key != nil {
			rec, held, err := heldKey(ctx, tx, *key, now)
			if err != nil {
				return err
			}
			if held {
				if err := rec.repeats(storage.OpDeliveryReplayMany, "", key.RequestHash); err != nil {
					return err
				}
				res = storage.DeliveryReplayManyResult{Count: int(rec.replayed.Int64), Duplicate: true}
				return nil
			}
		}
		n, err := replayMany(ctx, tx, p, micros(now))
		if err != nil {
			return err
		}
		res = storage.DeliveryReplayManyResult{Count: n}
		if key == nil {
			return nil
		}
		return recordKey(ctx, tx, key.Key, keyRecord{
			operation: storage.OpDeliveryReplayMany, requestHash: key.RequestHash,
			replayed: sql.NullInt64{Int64: int64(n), Valid: true},
		}, now)
	})
	if err != nil {
		return storage.DeliveryReplayManyResult{}, err
	}
	if res.Count > 0 && !res.Duplicate {
		s.wake.Signal()
	}
	return res, nil
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
