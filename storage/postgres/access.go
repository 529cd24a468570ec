package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

const accessColumns = `id, kind, name, hash, forms, read_only, expires_at, created_at, revoked_at,
	session_ttl_ms, used_at, coalesce(link_id, '')`

func scanAccess(row pgx.Row, more ...any) (storage.AccessToken, error) {
	var (
		t     storage.AccessToken
		hash  []byte
		ttlMS int64
	)
	if err := row.Scan(append([]any{&t.ID, &t.Kind, &t.Name, &hash, &t.Forms, &t.ReadOnly, &t.ExpiresAt, &t.CreatedAt,
		&t.RevokedAt, &ttlMS, &t.UsedAt, &t.LinkID}, more...)...); err != nil {
		return storage.AccessToken{}, err
	}
	if len(hash) != len(t.Hash) {
		return storage.AccessToken{}, fmt.Errorf("access %s: stored hash is %d bytes, want %d", t.ID, len(hash), len(t.Hash))
	}
	copy(t.Hash[:], hash)
	t.SessionTTL = time.Duration(ttlMS) * time.Millisecond
	t.ExpiresAt = t.ExpiresAt.UTC()
	t.CreatedAt = t.CreatedAt.UTC()
	t.RevokedAt = utcPtr(t.RevokedAt)
	t.UsedAt = utcPtr(t.UsedAt)
	return t, nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// insertAccess stores t as kind, minting its id when empty.
func insertAccess(ctx context.Context, q queryRower, kind storage.AccessKind, t storage.AccessToken) (storage.AccessToken, error) {
	t.Kind = kind
	if err := t.Validate(); err != nil {
		return storage.AccessToken{}, err
	}
	if t.ID == "" {
		t.ID = storage.NewID("acc")
	}
	return scanAccess(q.QueryRow(ctx, `
		INSERT INTO hymical_access (id, kind, name, hash, forms, read_only, expires_at, created_at, session_ttl_ms, link_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8::timestamptz, now()), $9, nullif($10, ''))
		RETURNING `+accessColumns,
		t.ID, string(t.Kind), t.Name, t.Hash[:], t.Forms, t.ReadOnly, t.ExpiresAt, dbNow(t.CreatedAt),
		t.SessionTTL.Milliseconds(), t.LinkID))
}

// TokenCreate stores an API token.
func (s *Store) TokenCreate(ctx context.Context, t storage.AccessToken) (storage.AccessToken, error) {
	out, err := insertAccess(ctx, s.pool, storage.AccessAPIToken, t)
	return out, mapErr("token create", err)
}

// TokenGetByHash reads an API token by the hash of its secret.
func (s *Store) TokenGetByHash(ctx context.Context, hash [32]byte) (storage.AccessToken, error) {
	t, err := scanAccess(s.pool.QueryRow(ctx, `SELECT `+accessColumns+` FROM hymical_access
		WHERE hash = $1 AND kind = 'token'`, hash[:]))
	return t, mapErr("token get", err)
}

// TokenList returns the API tokens that are not revoked, newest first.
func (s *Store) TokenList(ctx context.Context) ([]storage.AccessToken, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+accessColumns+` FROM hymical_access
		WHERE kind = 'token' AND revoked_at IS NULL ORDER BY created_at DESC, id DESC`)
	if err != nil {
		return nil, mapErr("token list", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.AccessToken, error) { return scanAccess(r) })
	if err != nil {
		return nil, mapErr("token list", err)
	}
	if out == nil {
		out = []storage.AccessToken{}
	}
	return out, nil
}

// TokenRevoke revokes an API token; a revoked one keeps its first RevokedAt.
func (s *Store) TokenRevoke(ctx context.Context, id string, now time.Time) (storage.AccessToken, error) {
	t, err := scanAccess(s.pool.QueryRow(ctx, `UPDATE hymical_access
		SET revoked_at = coalesce(revoked_at, $2::timestamptz, now())
		WHERE id = $1 AND kind = 'token' RETURNING `+accessColumns, id, dbNow(now)))
	return t, mapErr("token revoke "+id, err)
}

// PortalLinkCreate stores a portal link.
func (s *Store) PortalLinkCreate(ctx context.Context, link storage.AccessToken) (storage.AccessToken, error) {
	out, err := insertAccess(ctx, s.pool, storage.AccessPortalLink, link)
	return out, mapErr("portal link create", err)
}

// PortalLinkRedeem spends a link and makes its session. The UPDATE's
// condition on used_at is checked again under the row lock, so of two
// transactions racing for one link the second finds it used and matches
// nothing.
func (s *Store) PortalLinkRedeem(ctx context.Context, p storage.PortalLinkRedeemParams) (storage.AccessToken, error) {
	const op = "portal link redeem"
	var out storage.AccessToken
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		link, err := scanAccess(tx.QueryRow(ctx, `UPDATE hymical_access SET used_at = coalesce($2::timestamptz, now())
			WHERE hash = $1 AND kind = 'portal_link' AND used_at IS NULL AND revoked_at IS NULL
				AND expires_at > coalesce($2::timestamptz, now())
			RETURNING `+accessColumns, p.LinkHash[:], dbNow(p.Now)))
		if err != nil {
			return err // pgx.ErrNoRows becomes ErrNotFound
		}
		out, err = insertAccess(ctx, tx, storage.AccessPortalSession, storage.AccessToken{
			Name: link.Name, Hash: p.SessionHash, Forms: link.Forms, ReadOnly: link.ReadOnly,
			ExpiresAt: link.UsedAt.Add(link.SessionTTL), CreatedAt: *link.UsedAt, LinkID: link.ID,
		})
		return err
	})
	return out, mapErr(op, err)
}

// portalLinkColumns are accessColumns of a link l, and when the session
// made from it ends.
const portalLinkColumns = `l.id, l.kind, l.name, l.hash, l.forms, l.read_only, l.expires_at, l.created_at, l.revoked_at,
	l.session_ttl_ms, l.used_at, coalesce(l.link_id, ''),
	(SELECT max(s.expires_at) FROM hymical_access s WHERE s.link_id = l.id AND s.kind = 'portal_session')`

func scanPortalLink(row pgx.Row) (storage.PortalLink, error) {
	var session *time.Time
	t, err := scanAccess(row, &session)
	if err != nil {
		return storage.PortalLink{}, err
	}
	return storage.PortalLink{AccessToken: t, SessionExpiresAt: utcPtr(session)}, nil
}

// PortalLinkList returns the portal links, newest first.
func (s *Store) PortalLinkList(ctx context.Context, p storage.PortalLinkListParams) ([]storage.PortalLink, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+portalLinkColumns+` FROM hymical_access l
		WHERE l.kind = 'portal_link'
			AND ($1 = '' OR (l.created_at, l.id) < (SELECT c.created_at, c.id FROM hymical_access c WHERE c.id = $1))
		ORDER BY l.created_at DESC, l.id DESC
		LIMIT $2`, p.Before, p.PageSize())
	if err != nil {
		return nil, mapErr("portal link list", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.PortalLink, error) { return scanPortalLink(r) })
	if err != nil {
		return nil, mapErr("portal link list", err)
	}
	if out == nil {
		out = []storage.PortalLink{}
	}
	return out, nil
}

// PortalLinkRevoke revokes a link, then its sessions, in one transaction.
// They are two statements on purpose: the first waits on the link's row
// lock for a redeem in flight, and the second, with a snapshot taken after
// that redeem committed, sees the session it made. (Under read committed
// one statement would not.) A redeem that comes after the first finds the
// link revoked.
func (s *Store) PortalLinkRevoke(ctx context.Context, id string, now time.Time) (storage.PortalLink, error) {
	var out storage.PortalLink
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// now() is the transaction's start, so both statements write one time.
		var found string
		if err := tx.QueryRow(ctx, `UPDATE hymical_access SET revoked_at = coalesce(revoked_at, $2::timestamptz, now())
			WHERE id = $1 AND kind = 'portal_link' RETURNING id`, id, dbNow(now)).Scan(&found); err != nil {
			return err // pgx.ErrNoRows becomes ErrNotFound
		}
		if _, err := tx.Exec(ctx, `UPDATE hymical_access SET revoked_at = coalesce(revoked_at, $2::timestamptz, now())
			WHERE link_id = $1 AND kind = 'portal_session'`, id, dbNow(now)); err != nil {
			return err
		}
		var err error
		out, err = scanPortalLink(tx.QueryRow(ctx, `SELECT `+portalLinkColumns+` FROM hymical_access l WHERE l.id = $1`, id))
		return err
	})
	return out, mapErr("portal link revoke "+id, err)
}

// PortalSessionGetByHash reads a portal session that has not expired.
func (s *Store) PortalSessionGetByHash(ctx context.Context, hash [32]byte, now time.Time) (storage.AccessToken, error) {
	t, err := scanAccess(s.pool.QueryRow(ctx, `SELECT `+accessColumns+` FROM hymical_access
		WHERE hash = $1 AND kind = 'portal_session' AND revoked_at IS NULL
			AND expires_at > coalesce($2::timestamptz, now())`, hash[:], dbNow(now)))
	return t, mapErr("portal session get", err)
}

// AccessPrune removes up to p.Limit credentials expired before the cutoff.
func (s *Store) AccessPrune(ctx context.Context, p storage.AccessPruneParams) (int, error) {
	if p.ExpiredBefore.IsZero() {
		return 0, fmt.Errorf("postgres: access prune: %w: a cutoff is required", storage.ErrInvalid)
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM hymical_access WHERE id IN (
		SELECT l.id FROM hymical_access l WHERE l.expires_at < $1
			AND NOT EXISTS (SELECT 1 FROM hymical_access s WHERE s.link_id = l.id AND s.expires_at >= $1)
		ORDER BY l.expires_at LIMIT $2)`,
		p.ExpiredBefore, p.PageSize())
	if err != nil {
		return 0, mapErr("access prune", err)
	}
	return int(tag.RowsAffected()), nil
}
