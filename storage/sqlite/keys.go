package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hymical/hymical/storage"
)

// keyRecord is a row of webhook_idempotency_keys: what a keyed operation
// did, by ids, a count and a fingerprint, never a secret.
type keyRecord struct {
	operation       string
	requestHash     string
	endpointID      sql.NullString
	deliveryID      sql.NullString
	secretSHA256    sql.NullString
	secretsExpireAt sql.NullInt64
	replayed        sql.NullInt64
}

// heldKey reads the record of key if it was made within window before
// now; ok is false for a key never used or past its window, which the
// operation then takes over. The caller's IMMEDIATE transaction holds the
// write lock, so the key cannot be taken between this look and its write.
func heldKey(ctx context.Context, tx *sql.Tx, o storage.Once, now time.Time) (rec keyRecord, ok bool, err error) {
	var at int64
	err = tx.QueryRowContext(ctx, `SELECT operation, request_hash, endpoint_id, delivery_id, secret_sha256,
			secrets_expire_at, replayed, created_at
		FROM webhook_idempotency_keys WHERE key = ?`, o.IdempotencyKey).Scan(
		&rec.operation, &rec.requestHash, &rec.endpointID, &rec.deliveryID, &rec.secretSHA256,
		&rec.secretsExpireAt, &rec.replayed, &at)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return rec, false, nil
	case err != nil:
		return rec, false, err
	}
	return rec, at > micros(now.Add(-o.KeyWindow())), nil
}

// repeats checks a held key's record against this use of it
// (storage.KeyUse.Repeat).
func (rec keyRecord) repeats(operation, target, hash string) error {
	first := storage.KeyUse{Operation: rec.operation, RequestHash: rec.requestHash}
	switch rec.operation {
	case storage.OpEndpointRotateSecret:
		first.Target = rec.endpointID.String
	case storage.OpDeliveryReplay:
		first.Target = rec.deliveryID.String
	}
	return first.Repeat(storage.KeyUse{Operation: operation, Target: target, RequestHash: hash})
}

// recordKey writes the key with what its operation did, taking over a
// record past its window whole: no column of the old one is left behind.
func recordKey(ctx context.Context, tx *sql.Tx, key string, rec keyRecord, now time.Time) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO webhook_idempotency_keys (key, operation, request_hash, endpoint_id, delivery_id,
			secret_sha256, secrets_expire_at, replayed, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET operation = excluded.operation, request_hash = excluded.request_hash,
			endpoint_id = excluded.endpoint_id, delivery_id = excluded.delivery_id,
			secret_sha256 = excluded.secret_sha256, secrets_expire_at = excluded.secrets_expire_at,
			replayed = excluded.replayed, created_at = excluded.created_at`,
		key, rec.operation, rec.requestHash, rec.endpointID, rec.deliveryID,
		rec.secretSHA256, rec.secretsExpireAt, rec.replayed, micros(now))
	return err
}

func validString(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }

// EndpointRotateOnce writes the rotated endpoint and its key in one
// IMMEDIATE transaction, or answers a repeat from the key's record.
func (s *Store) EndpointRotateOnce(ctx context.Context, p storage.EndpointRotateParams) (storage.EndpointRotateResult, error) {
	op := "rotate endpoint secret once " + p.Endpoint.ID
	if err := p.Validate(); err != nil {
		return storage.EndpointRotateResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	e := p.Endpoint
	e.NormalizeControls()
	row, err := encodeEndpoint(e, s.secrets)
	if err != nil {
		return storage.EndpointRotateResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	var readAt any // NULL: unconditional
	if !e.UpdatedAt.IsZero() {
		readAt = micros(e.UpdatedAt)
	}
	now := s.now(p.Now)
	var (
		res      storage.EndpointRotateResult
		released bool
	)
	err = s.write(ctx, op, func(tx *sql.Tx) error {
		rec, held, err := heldKey(ctx, tx, p.Once, now)
		if err != nil {
			return err
		}
		if held {
			if err := rec.repeats(storage.OpEndpointRotateSecret, e.ID, p.RequestHash); err != nil {
				return err
			}
			cur, err := scanEndpoint(tx.QueryRowContext(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = ?`, e.ID), s.secrets)
			if err != nil {
				return err
			}
			if cur.DeletedAt != nil {
				return fmt.Errorf("%w: the idempotency key rotated the secret of endpoint %s, deleted since at %s",
					storage.ErrDeleted, e.ID, cur.DeletedAt.UTC().Format(time.RFC3339))
			}
			res = storage.EndpointRotateResult{Endpoint: cur, SecretSHA256: rec.secretSHA256.String, Duplicate: true}
			if rec.secretsExpireAt.Valid {
				at := fromMicros(rec.secretsExpireAt.Int64)
				res.PreviousSecretsExpireAt = &at
			}
			return nil
		}
		out, rel, err := s.updateEndpoint(ctx, tx, e, row, readAt)
		if err != nil {
			return err
		}
		released = rel
		res = storage.EndpointRotateResult{Endpoint: out, SecretSHA256: p.SecretSHA256, PreviousSecretsExpireAt: p.PreviousSecretsExpireAt}
		return recordKey(ctx, tx, p.IdempotencyKey, keyRecord{
			operation: storage.OpEndpointRotateSecret, requestHash: p.RequestHash,
			endpointID: validString(e.ID), secretSHA256: validString(p.SecretSHA256),
			secretsExpireAt: nullMicros(p.PreviousSecretsExpireAt),
		}, now)
	})
	if err != nil {
		return storage.EndpointRotateResult{}, err
	}
	if released {
		s.wake.Signal()
	}
	return res, nil
}

// DeliveryReplayOnce replays the delivery and records its key in one
// IMMEDIATE transaction, or answers a repeat with the delivery as it is.
func (s *Store) DeliveryReplayOnce(ctx context.Context, p storage.DeliveryReplayOnceParams) (storage.DeliveryReplayResult, error) {
	op := "replay delivery once " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.DeliveryReplayResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	now := s.now(p.Now)
	var res storage.DeliveryReplayResult
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		rec, held, err := heldKey(ctx, tx, p.Once, now)
		if err != nil {
			return err
		}
		if held {
			if err := rec.repeats(storage.OpDeliveryReplay, p.DeliveryID, p.RequestHash); err != nil {
				return err
			}
			d, err := scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = ?`, p.DeliveryID))
			res = storage.DeliveryReplayResult{Delivery: d, Duplicate: true}
			return err
		}
		d, err := replayOne(ctx, tx, p.DeliveryReplayParams, micros(now))
		if err != nil {
			return err
		}
		res = storage.DeliveryReplayResult{Delivery: d}
		return recordKey(ctx, tx, p.IdempotencyKey, keyRecord{
			operation: storage.OpDeliveryReplay, requestHash: p.RequestHash, deliveryID: validString(p.DeliveryID),
		}, now)
	})
	if err != nil {
		return storage.DeliveryReplayResult{}, err
	}
	if !res.Duplicate {
		s.wake.Signal()
	}
	return res, nil
}

// DeliveryReplayManyOnce replays the matching deliveries and records the
// key with their count in one IMMEDIATE transaction, or answers a repeat
// with the first count.
func (s *Store) DeliveryReplayManyOnce(ctx context.Context, p storage.DeliveryReplayManyOnceParams) (storage.DeliveryReplayManyResult, error) {
	const op = "replay deliveries once"
	if err := p.Validate(); err != nil {
		return storage.DeliveryReplayManyResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	now := s.now(p.Now)
	var res storage.DeliveryReplayManyResult
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		rec, held, err := heldKey(ctx, tx, p.Once, now)
		if err != nil {
			return err
		}
		if held {
			if err := rec.repeats(storage.OpDeliveryReplayMany, "", p.RequestHash); err != nil {
				return err
			}
			res = storage.DeliveryReplayManyResult{Count: int(rec.replayed.Int64), Duplicate: true}
			return nil
		}
		n, err := replayMany(ctx, tx, p.DeliveryReplayManyParams, micros(now))
		if err != nil {
			return err
		}
		res = storage.DeliveryReplayManyResult{Count: n}
		return recordKey(ctx, tx, p.IdempotencyKey, keyRecord{
			operation: storage.OpDeliveryReplayMany, requestHash: p.RequestHash,
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
