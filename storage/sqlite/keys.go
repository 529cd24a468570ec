package sqlite

import (
	"context"
	"database/sql"
	"errors"
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
func heldKey(ctx context.Context, tx *sql.Tx, o storage.Idempotency, now time.Time) (rec keyRecord, ok bool, err error) {
	var at int64
	err = tx.QueryRowContext(ctx, `SELECT operation, request_hash, endpoint_id, delivery_id, secret_sha256,
			secrets_expire_at, replayed, created_at
		FROM webhook_idempotency_keys WHERE key = ?`, o.Key).Scan(
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
