package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/secretbox"
)

var _ storage.SecretsAtRest = (*Store)(nil)

func secretsKeyID(ctx context.Context, q querier) (string, error) {
	var id string
	err := q.QueryRowContext(ctx, `SELECT key_id FROM hymical_secrets_key WHERE id = 1`).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// SecretsKeyID is the id of the key the endpoint secrets are sealed under;
// "" while they are in plaintext.
func (s *Store) SecretsKeyID(ctx context.Context) (string, error) {
	id, err := secretsKeyID(ctx, s.reader)
	if err != nil {
		return "", s.mapErr("read the secrets key id", err)
	}
	return id, nil
}

// SecretsEncrypt seals every endpoint's secrets under to in one writer
// transaction and records to's key id; see storage.SecretsAtRest.
func (s *Store) SecretsEncrypt(ctx context.Context, to *secretbox.Box) (storage.SecretsEncryptResult, error) {
	const op = "encrypt endpoint secrets"
	if to == nil {
		return storage.SecretsEncryptResult{}, fmt.Errorf("sqlite: %s: %w: no key to encrypt them with", op, storage.ErrInvalid)
	}
	var res storage.SecretsEncryptResult
	err := s.write(ctx, op, func(tx *sql.Tx) error {
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
		rows, err := tx.QueryContext(ctx, `SELECT id, secrets, headers FROM webhook_endpoints ORDER BY id`)
		if err != nil {
			return err
		}
		type row struct{ id, secrets, headers string }
		var all []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.secrets, &r.headers); err != nil {
				rows.Close()
				return err
			}
			all = append(all, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		// The record first: the triggers check each row written against
		// the key it names, which must be the new one.
		if _, err := tx.ExecContext(ctx, `INSERT INTO hymical_secrets_key (id, key_id, changed_at) VALUES (1, ?, ?)
			ON CONFLICT (id) DO UPDATE SET key_id = excluded.key_id, changed_at = excluded.changed_at`,
			to.KeyID(), micros(s.now(time.Time{}))); err != nil {
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
			if _, err := tx.ExecContext(ctx, `UPDATE webhook_endpoints SET secrets = ?, headers = ? WHERE id = ?`, sealed, headers, r.id); err != nil {
				return err
			}
		}
		res.Endpoints = len(all)
		return nil
	})
	if err != nil {
		return storage.SecretsEncryptResult{}, err
	}
	return res, nil
}
