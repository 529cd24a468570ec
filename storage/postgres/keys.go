package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// keyRecord is a row of webhook_idempotency_keys: what a keyed operation
// did, by ids, a count and a fingerprint, never a secret.
type keyRecord struct {
	operation       string
	requestHash     string
	endpointID      *string
	deliveryID      *string
	secretSHA256    *string
	secretsExpireAt *time.Time
	replayed        *int
}

// use is what a repeat of the record's key is checked against.
func (rec keyRecord) use() storage.KeyUse {
	u := storage.KeyUse{Operation: rec.operation, RequestHash: rec.requestHash}
	switch {
	case rec.operation == storage.OpEndpointRotateSecret && rec.endpointID != nil:
		u.Target = *rec.endpointID
	case rec.operation == storage.OpDeliveryReplay && rec.deliveryID != nil:
		u.Target = *rec.deliveryID
	}
	return u
}

// claimKey records the key with rec in tx, or takes over a record past
// its window whole, or returns errKeyTaken when the key is held. Its
// insert is ON CONFLICT, which waits for a concurrent transaction holding
// the same key and then sees its row: of operations racing with one key,
// exactly one claims it, and the others answer from its record once it
// commits (heldKey). Claiming first, before the operation's own locks,
// makes them queue on the key rather than on what they change.
func claimKey(ctx context.Context, tx pgx.Tx, key string, rec keyRecord, now time.Time, window time.Duration) error {
	var got string
	err := tx.QueryRow(ctx, `
		INSERT INTO webhook_idempotency_keys AS k (key, operation, request_hash, endpoint_id, delivery_id,
			secret_sha256, secrets_expire_at, replayed, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, coalesce($9::timestamptz, now()))
		ON CONFLICT (key) DO UPDATE SET operation = excluded.operation, request_hash = excluded.request_hash,
			endpoint_id = excluded.endpoint_id, delivery_id = excluded.delivery_id,
			secret_sha256 = excluded.secret_sha256, secrets_expire_at = excluded.secrets_expire_at,
			replayed = excluded.replayed, created_at = excluded.created_at
		WHERE k.created_at <= excluded.created_at - $10::bigint * interval '1 microsecond'
		RETURNING k.key`,
		key, rec.operation, rec.requestHash, rec.endpointID, rec.deliveryID, rec.secretSHA256,
		rec.secretsExpireAt, rec.replayed, dbNow(now), window.Microseconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return errKeyTaken // rolls the operation back
	}
	return err
}

// heldKey reads the record of a key claimKey found held, checked against
// this use of it.
func (s *Store) heldKey(ctx context.Context, key string, again storage.KeyUse) (keyRecord, error) {
	var rec keyRecord
	err := s.pool.QueryRow(ctx, `SELECT operation, request_hash, endpoint_id, delivery_id, secret_sha256,
			secrets_expire_at, replayed
		FROM webhook_idempotency_keys WHERE key = $1`, key).Scan(
		&rec.operation, &rec.requestHash, &rec.endpointID, &rec.deliveryID, &rec.secretSHA256,
		&rec.secretsExpireAt, &rec.replayed)
	if err != nil {
		return rec, err
	}
	return rec, rec.use().Repeat(again)
}

func ptr[T any](v T) *T { return &v }
