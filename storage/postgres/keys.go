package postgres

import (
	"context"
	"errors"
	"fmt"
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

// EndpointRotateOnce claims the key, then writes the rotated endpoint as
// EndpointUpdate does, in one transaction; a key found held answers from
// its record with the endpoint as it is now.
func (s *Store) EndpointRotateOnce(ctx context.Context, p storage.EndpointRotateParams) (storage.EndpointRotateResult, error) {
	op := "endpoint rotate secret once " + p.Endpoint.ID
	if err := p.Validate(); err != nil {
		return storage.EndpointRotateResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	e := normalizeEndpoint(p.Endpoint)
	secrets, err := s.secrets.Encode(e.ID, e.Secrets)
	if err != nil {
		return storage.EndpointRotateResult{}, fmt.Errorf("postgres: %s: encode secrets: %w", op, err)
	}
	var readAt *time.Time
	if !e.UpdatedAt.IsZero() {
		readAt = &e.UpdatedAt
	}
	var (
		out      storage.Endpoint
		released bool
	)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := claimKey(ctx, tx, p.IdempotencyKey, keyRecord{
			operation: storage.OpEndpointRotateSecret, requestHash: p.RequestHash, endpointID: ptr(e.ID),
			secretSHA256: ptr(p.SecretSHA256), secretsExpireAt: p.PreviousSecretsExpireAt,
		}, p.Now, p.KeyWindow()); err != nil {
			return err
		}
		var err error
		out, released, err = s.updateEndpoint(ctx, tx, e, secrets, readAt)
		return err
	})
	if errors.Is(err, errKeyTaken) {
		rec, err := s.heldKey(ctx, p.IdempotencyKey, storage.KeyUse{Operation: storage.OpEndpointRotateSecret, Target: e.ID, RequestHash: p.RequestHash})
		if err != nil {
			return storage.EndpointRotateResult{}, mapErr(op, err)
		}
		cur, err := s.EndpointGet(ctx, e.ID)
		if err != nil {
			return storage.EndpointRotateResult{}, err
		}
		if cur.DeletedAt != nil {
			return storage.EndpointRotateResult{}, fmt.Errorf("postgres: %s: %w: the idempotency key rotated the secret of endpoint %s, deleted since at %s",
				op, storage.ErrDeleted, e.ID, cur.DeletedAt.UTC().Format(time.RFC3339))
		}
		res := storage.EndpointRotateResult{Endpoint: cur, PreviousSecretsExpireAt: rec.secretsExpireAt, Duplicate: true}
		if rec.secretSHA256 != nil {
			res.SecretSHA256 = *rec.secretSHA256
		}
		return res, nil
	}
	if err := s.updateError(ctx, op, err, e.ID, readAt); err != nil {
		return storage.EndpointRotateResult{}, err
	}
	if released {
		s.notified()
	}
	return storage.EndpointRotateResult{Endpoint: out, SecretSHA256: p.SecretSHA256, PreviousSecretsExpireAt: p.PreviousSecretsExpireAt}, nil
}

// DeliveryReplayOnce claims the key, then replays as DeliveryReplay does,
// in one transaction; a key found held answers with the delivery as it
// is now.
func (s *Store) DeliveryReplayOnce(ctx context.Context, p storage.DeliveryReplayOnceParams) (storage.DeliveryReplayResult, error) {
	op := "delivery replay once " + p.DeliveryID
	if err := p.Validate(); err != nil {
		return storage.DeliveryReplayResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var d storage.Delivery
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := claimKey(ctx, tx, p.IdempotencyKey, keyRecord{
			operation: storage.OpDeliveryReplay, requestHash: p.RequestHash, deliveryID: ptr(p.DeliveryID),
		}, p.Now, p.KeyWindow()); err != nil {
			return err
		}
		var err error
		d, err = s.replayOne(ctx, tx, p.DeliveryReplayParams)
		return err
	})
	if errors.Is(err, errKeyTaken) {
		if _, err := s.heldKey(ctx, p.IdempotencyKey, storage.KeyUse{Operation: storage.OpDeliveryReplay, Target: p.DeliveryID, RequestHash: p.RequestHash}); err != nil {
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

// DeliveryReplayManyOnce claims the key, replays as DeliveryReplayMany
// does and records the count, in one transaction; a key found held
// answers with the first count.
func (s *Store) DeliveryReplayManyOnce(ctx context.Context, p storage.DeliveryReplayManyOnceParams) (storage.DeliveryReplayManyResult, error) {
	const op = "delivery replay many once"
	if err := p.Validate(); err != nil {
		return storage.DeliveryReplayManyResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := claimKey(ctx, tx, p.IdempotencyKey, keyRecord{
			operation: storage.OpDeliveryReplayMany, requestHash: p.RequestHash, replayed: ptr(0),
		}, p.Now, p.KeyWindow()); err != nil {
			return err
		}
		var err error
		if n, err = s.replayMany(ctx, tx, p.DeliveryReplayManyParams); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE webhook_idempotency_keys SET replayed = $2 WHERE key = $1`, p.IdempotencyKey, n)
		return err
	})
	if errors.Is(err, errKeyTaken) {
		rec, err := s.heldKey(ctx, p.IdempotencyKey, storage.KeyUse{Operation: storage.OpDeliveryReplayMany, RequestHash: p.RequestHash})
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
