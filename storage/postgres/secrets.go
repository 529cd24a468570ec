package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/secretbox"
)

var _ storage.SecretsAtRest = (*Store)(nil)

func secretsKeyID(ctx context.Context, q queryRower) (string, error) {
	var id string
	err := q.QueryRow(ctx, `SELECT key_id FROM hymical_secrets_key`).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// SecretsKeyID is the id of the key the endpoint secrets are sealed under;
// "" while they are in plaintext.
func (s *Store) SecretsKeyID(ctx context.Context) (string, error) {
	id, err := secretsKeyID(ctx, s.pool)
	if err != nil {
		return "", mapErr("read the secrets key id", err)
	}
	return id, nil
}

// SecretsEncrypt seals every endpoint's secrets under to in one
// transaction and records to's key id; see storage.SecretsAtRest. Several
// processes starting with the same key at once queue on the table lock,
// and all but the first find the work done.
func (s *Store) SecretsEncrypt(ctx context.Context, to *secretbox.Box) (storage.SecretsEncryptResult, error) {
	const op = "encrypt endpoint secrets"
	if to == nil {
		return storage.SecretsEncryptResult{}, fmt.Errorf("postgres: %s: %w: no key to encrypt them with", op, storage.ErrInvalid)
	}
	var res storage.SecretsEncryptResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The mode conflicts with itself and with every write to the
		// endpoints, not with reads: encrypters queue, and no endpoint is
		// written under the old key while the rows are sealed again (a
		// claim's reads go on; its writes of endpoint health wait the
		// few milliseconds this takes).
		if _, err := tx.Exec(ctx, `LOCK TABLE webhook_endpoints IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		recorded, err := secretsKeyID(ctx, tx)
		if err != nil {
			return err
		}
		res = storage.SecretsEncryptResult{From: recorded, To: to.KeyID()}
		if recorded == to.KeyID() {
			return nil // done already, by this process or another
		}
		from, err := storage.SecretsFrom(recorded, s.secrets.Box)
		if err != nil {
			return err
		}
		// The record first: the trigger checks each row written against
		// the key it names, which must be the new one.
		if _, err := tx.Exec(ctx, `INSERT INTO hymical_secrets_key (id, key_id, changed_at) VALUES (true, $1, now())
			ON CONFLICT (id) DO UPDATE SET key_id = excluded.key_id, changed_at = excluded.changed_at`, to.KeyID()); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id, secrets, headers FROM webhook_endpoints ORDER BY id`)
		if err != nil {
			return err
		}
		type row struct{ id, secrets, headers string }
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			err := r.Scan(&x.id, &x.secrets, &x.headers)
			return x, err
		})
		if err != nil {
			return err
		}
		for _, r := range all {
			sealed, err := from.Reseal(r.id, r.secrets, to)
			if err != nil {
				return err
			}
			// Custom headers may be credentials too: they move to the
			// new key with the secrets, in the same transaction.
			headers, err := from.ResealHeaders(r.id, r.headers, to)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET secrets = $1, headers = $2 WHERE id = $3`, sealed, headers, r.id); err != nil {
				return err
			}
		}
		res.Endpoints = len(all)
		return nil
	})
	if err != nil {
		return storage.SecretsEncryptResult{}, mapErr(op, err)
	}
	return res, nil
}
