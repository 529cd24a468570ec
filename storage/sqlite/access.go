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
	session_ttl_ms, used_at, coalesce(link_id, '')`

func scanAccess(row rowScanner) (storage.AccessToken, error) {
	var (
		t                    storage.AccessToken
		kind, forms          string
		hash                 []byte
		readOnly             int
		expires, created, ms int64
		revoked, used        sql.NullInt64
	)
	if err := row.Scan(&t.ID, &kind, &t.Name, &hash, &forms, &readOnly, &expires, &created, &revoked, &ms, &used, &t.LinkID); err != nil {
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
		INSERT INTO hymical_access (id, kind, name, hash, forms, read_only, expires_at, created_at, session_ttl_ms, link_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, nullif(?, ''))
		RETURNING `+accessColumns,
		t.ID, string(t.Kind), t.Name, t.Hash[:], jsonList(t.Forms), boolInt(t.ReadOnly), micros(t.ExpiresAt),
		micros(s.now(t.CreatedAt)), t.SessionTTL.Milliseconds(), t.LinkID))
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
			ExpiresAt: now.Add(link.SessionTTL), CreatedAt: now, LinkID: link.ID,
		})
		return err
	})
	return out, err
}

// portalLinkColumns are accessColumns of a link l, and when the session
// made from it ends.
const portalLinkColumns = `l.id, l.kind, l.name, l.hash, l.forms, l.read_only, l.expires_at, l.created_at, l.revoked_at,
	l.session_ttl_ms, l.used_at, coalesce(l.link_id, ''),
	(SELECT max(s.expires_at) FROM hymical_access s WHERE s.link_id = l.id AND s.kind = 'portal_session')`

func scanPortalLink(row rowScanner) (storage.PortalLink, error) {
	var session sql.NullInt64
	t, err := scanAccess(scanFunc(func(dest ...any) error { return row.Scan(append(dest, &session)...) }))
	if err != nil {
		return storage.PortalLink{}, err
	}
	return storage.PortalLink{AccessToken: t, SessionExpiresAt: fromNullMicros(session)}, nil
}

// scanFunc lets scanAccess read a row that carries more columns after its
// own.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

// PortalLinkList returns the portal links, newest first.
func (s *Store) PortalLinkList(ctx context.Context, p storage.PortalLinkListParams) ([]storage.PortalLink, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+portalLinkColumns+` FROM hymical_access l
		WHERE l.kind = 'portal_link'
			AND (? = '' OR (l.created_at, l.id) < (SELECT c.created_at, c.id FROM hymical_access c WHERE c.id = ?))
		ORDER BY l.created_at DESC, l.id DESC
		LIMIT ?`, p.Before, p.Before, p.PageSize())
	if err != nil {
		return nil, s.mapErr("portal link list", err)
	}
	defer rows.Close()
	out := []storage.PortalLink{}
	for rows.Next() {
		l, err := scanPortalLink(rows)
		if err != nil {
			return nil, s.mapErr("portal link list", err)
		}
		out = append(out, l)
	}
	return out, s.mapErr("portal link list", rows.Err())
}

// PortalLinkRevoke revokes a link and its sessions in one write
// transaction; the one writer means no redeem slips a session in between.
func (s *Store) PortalLinkRevoke(ctx context.Context, id string, now time.Time) (storage.PortalLink, error) {
	at := micros(s.now(now))
	var out storage.PortalLink
	err := s.write(ctx, "portal link revoke "+id, func(tx *sql.Tx) error {
		var found string
		if err := tx.QueryRowContext(ctx, `UPDATE hymical_access SET revoked_at = coalesce(revoked_at, ?)
			WHERE id = ? AND kind = 'portal_link' RETURNING id`, at, id).Scan(&found); err != nil {
			return err // sql.ErrNoRows becomes ErrNotFound
		}
		if _, err := tx.ExecContext(ctx, `UPDATE hymical_access SET revoked_at = coalesce(revoked_at, ?)
			WHERE link_id = ? AND kind = 'portal_session'`, at, id); err != nil {
			return err
		}
		var err error
		out, err = scanPortalLink(tx.QueryRowContext(ctx, `SELECT `+portalLinkColumns+` FROM hymical_access l
			WHERE l.id = ?`, id))
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
			SELECT l.id FROM hymical_access l WHERE l.expires_at < ?
				AND NOT EXISTS (SELECT 1 FROM hymical_access s WHERE s.link_id = l.id AND s.expires_at >= ?)
			ORDER BY l.expires_at LIMIT ?)`,
			micros(p.ExpiredBefore), micros(p.ExpiredBefore), p.PageSize())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}
