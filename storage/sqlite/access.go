package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hymical/hymical/storage"
)

const accessColumns = `id, kind, name, hash, forms, read_only, expires_at, created_at, revoked_at,
	session_ttl_ms, used_at`

func scanAccess(row rowScanner) (storage.AccessToken, error) {
	var (
		t                    storage.AccessToken
		kind, forms          string
		hash                 []byte
		readOnly             int
		expires, created, ms int64
		revoked, used        sql.NullInt64
	)
	if err := row.Scan(&t.ID, &kind, &t.Name, &hash, &forms, &readOnly, &expires, &created, &revoked, &ms, &used); err != nil {
		return storage.AccessToken{}, err
	}
	if len(hash) != len(t.Hash) {
		return storage.AccessToken{}, fmt.Errorf("access %s: stored hash is %d bytes, want %d", t.ID, len(hash), len(t.Hash))
	}
	if err := json.Unmarshal([]byte(forms), &t.Forms); err != nil {
		return storage.AccessToken{}, fmt.Errorf("access %s: forms: %w", t.ID, err)
	}
	copy(t.Hash[:], hash)
	t.Kind = storage.AccessKind(kind)
	t.ReadOnly = readOnly != 0
	t.ExpiresAt = fromMicros(expires)
	t.CreatedAt = fromMicros(created)
	t.RevokedAt = fromNullMicros(revoked)
	t.UsedAt = fromNullMicros(used)
	t.SessionTTL = time.Duration(ms) * time.Millisecond
	return t, nil
}

// insertAccess stores t as kind in the caller's write transaction,
// minting its id when empty.
func (s *Store) insertAccess(ctx context.Context, tx *sql.Tx, kind storage.AccessKind, t storage.AccessToken) (storage.AccessToken, error) {
	t.Kind = kind
	if err := t.Validate(); err != nil {
		return storage.AccessToken{}, err
	}
	if t.ID == "" {
		t.ID = storage.NewID("acc")
	}
	return scanAccess(tx.QueryRowContext(ctx, `
		INSERT INTO hymical_access (id, kind, name, hash, forms, read_only, expires_at, created_at, session_ttl_ms)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		RETURNING `+accessColumns,
		t.ID, string(t.Kind), t.Name, t.Hash[:], jsonList(t.Forms), boolInt(t.ReadOnly), micros(t.ExpiresAt),
		micros(s.now(t.CreatedAt)), t.SessionTTL.Milliseconds()))
}

func (s *Store) createAccess(ctx context.Context, op string, kind storage.AccessKind, t storage.AccessToken) (storage.AccessToken, error) {
	var out storage.AccessToken
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		var err error
		out, err = s.insertAccess(ctx, tx, kind, t)
		return err
	})
	return out, err
}

// TokenCreate stores an API token.
func (s *Store) TokenCreate(ctx context.Context, t storage.AccessToken) (storage.AccessToken, error) {
	return s.createAccess(ctx, "token create", storage.AccessAPIToken, t)
}

// TokenGetByHash reads an API token by the hash of its secret.
func (s *Store) TokenGetByHash(ctx context.Context, hash [32]byte) (storage.AccessToken, error) {
	t, err := scanAccess(s.reader.QueryRowContext(ctx, `SELECT `+accessColumns+` FROM hymical_access
		WHERE hash = ? AND kind = 'token'`, hash[:]))
	return t, s.mapErr("token get", err)
}

// TokenList returns the API tokens that are not revoked, newest first.
func (s *Store) TokenList(ctx context.Context) ([]storage.AccessToken, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+accessColumns+` FROM hymical_access
		WHERE kind = 'token' AND revoked_at IS NULL ORDER BY created_at DESC, id DESC`)
	if err != nil {
		return nil, s.mapErr("token list", err)
	}
	defer rows.Close()
	out := []storage.AccessToken{}
	for rows.Next() {
		t, err := scanAccess(rows)
		if err != nil {
			return nil, s.mapErr("token list", err)
		}
		out = append(out, t)
	}
	return out, s.mapErr("token list", rows.Err())
}

// TokenRevoke revokes an API token; a revoked one keeps its first RevokedAt.
func (s *Store) TokenRevoke(ctx context.Context, id string, now time.Time) (storage.AccessToken, error) {
	var out storage.AccessToken
	err := s.write(ctx, "token revoke "+id, func(tx *sql.Tx) error {
		var err error
		out, err = scanAccess(tx.QueryRowContext(ctx, `UPDATE hymical_access SET revoked_at = coalesce(revoked_at, ?)
			WHERE id = ? AND kind = 'token' RETURNING `+accessColumns, micros(s.now(now)), id))
		return err
	})
	return out, err
}

// PortalLinkCreate stores a portal link.
func (s *Store) PortalLinkCreate(ctx context.Context, link storage.AccessToken) (storage.AccessToken, error) {
	return s.createAccess(ctx, "portal link create", storage.AccessPortalLink, link)
}

// PortalLinkRedeem spends a link and makes its session, in one IMMEDIATE
// transaction: the one writer means a second redeem of the link sees it
// used.
func (s *Store) PortalLinkRedeem(ctx context.Context, p storage.PortalLinkRedeemParams) (storage.AccessToken, error) {
	now := s.now(p.Now)
	var out storage.AccessToken
	err := s.write(ctx, "portal link redeem", func(tx *sql.Tx) error {
		link, err := scanAccess(tx.QueryRowContext(ctx, `UPDATE hymical_access SET used_at = ?
			WHERE hash = ? AND kind = 'portal_link' AND used_at IS NULL AND revoked_at IS NULL AND expires_at > ?
			RETURNING `+accessColumns, micros(now), p.LinkHash[:], micros(now)))
		if err != nil {
			return err // sql.ErrNoRows becomes ErrNotFound
		}
		out, err = s.insertAccess(ctx, tx, storage.AccessPortalSession, storage.AccessToken{
			Name: link.Name, Hash: p.SessionHash, Forms: link.Forms, ReadOnly: link.ReadOnly,
			ExpiresAt: now.Add(link.SessionTTL), CreatedAt: now,
		})
		return err
	})
	return out, err
}

// PortalSessionGetByHash reads a portal session that has not expired.
func (s *Store) PortalSessionGetByHash(ctx context.Context, hash [32]byte, now time.Time) (storage.AccessToken, error) {
	t, err := scanAccess(s.reader.QueryRowContext(ctx, `SELECT `+accessColumns+` FROM hymical_access
		WHERE hash = ? AND kind = 'portal_session' AND revoked_at IS NULL AND expires_at > ?`,
		hash[:], micros(s.now(now))))
	return t, s.mapErr("portal session get", err)
}

// AccessPrune removes up to p.Limit credentials expired before the cutoff.
func (s *Store) AccessPrune(ctx context.Context, p storage.AccessPruneParams) (int, error) {
	if p.ExpiredBefore.IsZero() {
		return 0, fmt.Errorf("sqlite: access prune: %w: a cutoff is required", storage.ErrInvalid)
	}
	var n int64
	err := s.write(ctx, "access prune", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM hymical_access WHERE id IN (
			SELECT id FROM hymical_access WHERE expires_at < ? ORDER BY expires_at LIMIT ?)`,
			micros(p.ExpiredBefore), p.PageSize())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}
