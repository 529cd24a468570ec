package storage

import (
	"context"
	"fmt"
	"time"
)

// AccessKind says what a credential of the access table is.
type AccessKind string

// The kinds of credential. They share one table because they share one
// shape (a hash, a scope, an expiry) and one lookup (by hash); the kind
// keeps a secret of one kind from opening another: a portal link is never
// an API token.
const (
	// AccessAPIToken is a scoped API token, made by an admin.
	AccessAPIToken AccessKind = "token"
	// AccessPortalLink is a single-use, short-lived link that becomes a
	// portal session when it is opened.
	AccessPortalLink AccessKind = "portal_link"
	// AccessPortalSession is the cookie a redeemed portal link becomes.
	AccessPortalSession AccessKind = "portal_session"
)

// Valid reports whether k is one of the three kinds.
func (k AccessKind) Valid() bool {
	switch k {
	case AccessAPIToken, AccessPortalLink, AccessPortalSession:
		return true
	}
	return false
}

// AccessToken is a credential bound to a scope: a set of form ids. Only
// the SHA-256 of its secret is stored, so a copy of the database opens
// nothing; the secret is shown once, when it is made.
type AccessToken struct {
	ID   string
	Kind AccessKind
	// Name says what the token is for, for the admin who lists them.
	Name string
	// Hash is the SHA-256 of the secret; unique among every credential.
	Hash [32]byte
	// Forms is the scope: the form ids whose endpoints and deliveries the
	// credential reaches. Never empty.
	Forms    []string
	ReadOnly bool
	// ExpiresAt is when the credential stops opening anything. Required.
	ExpiresAt time.Time
	CreatedAt time.Time
	// RevokedAt, when set, is when an admin revoked it: an API token, or a
	// portal link and the session made from it.
	RevokedAt *time.Time
	// SessionTTL, for a portal link, is how long the session it becomes
	// lasts from the moment it is redeemed; zero for other kinds.
	SessionTTL time.Duration
	// UsedAt, for a portal link, is when it was redeemed: a link is
	// redeemed once.
	UsedAt *time.Time
	// LinkID, for a portal session, is the link it was made from, so that
	// revoking the link ends it; empty for other kinds and for sessions
	// made before links were remembered.
	LinkID string
}

// PortalLink is a portal link as an admin lists it: the link and, once it
// was used, when the session it became ends.
type PortalLink struct {
	AccessToken
	// SessionExpiresAt is when the link's session ends (or ended); nil
	// while the link is unused, or when its session was pruned.
	SessionExpiresAt *time.Time
}

// ActiveAt reports whether t opens anything at now: not revoked, not
// expired and, for a portal link, not used.
func (t AccessToken) ActiveAt(now time.Time) bool {
	return t.RevokedAt == nil && t.UsedAt == nil && now.Before(t.ExpiresAt)
}

// MaxAccessForms bounds how many form ids one scope names, and
// MaxAccessFormBytes the length of each, so one credential's row and the
// queries filtered by its scope stay small.
const (
	MaxAccessForms     = 100
	MaxAccessFormBytes = 200
	// MaxAccessNameBytes bounds a credential's name.
	MaxAccessNameBytes = 200
)

// Validate checks what every kind needs: a known kind, a non-empty scope
// of distinct, non-empty, bounded form ids, a bounded name and an expiry.
func (t AccessToken) Validate() error {
	if !t.Kind.Valid() {
		return fmt.Errorf("%w: access kind %q is not token, portal_link or portal_session", ErrInvalid, t.Kind)
	}
	if err := ValidateForms(t.Forms); err != nil {
		return err
	}
	if len(t.Name) > MaxAccessNameBytes {
		return fmt.Errorf("%w: the name is %d bytes long, the most is %d", ErrInvalid, len(t.Name), MaxAccessNameBytes)
	}
	if t.ExpiresAt.IsZero() {
		return fmt.Errorf("%w: an access credential needs an expiry", ErrInvalid)
	}
	if t.Kind == AccessPortalLink && t.SessionTTL <= 0 {
		return fmt.Errorf("%w: a portal link needs a positive session ttl", ErrInvalid)
	}
	return nil
}

// ValidateForms checks a scope: between 1 and MaxAccessForms form ids, each
// non-empty, at most MaxAccessFormBytes long, and none twice.
func ValidateForms(forms []string) error {
	if len(forms) == 0 {
		return fmt.Errorf("%w: a scope names at least one form id", ErrInvalid)
	}
	if len(forms) > MaxAccessForms {
		return fmt.Errorf("%w: a scope names %d form ids, the most is %d", ErrInvalid, len(forms), MaxAccessForms)
	}
	seen := make(map[string]bool, len(forms))
	for _, f := range forms {
		switch {
		case f == "":
			return fmt.Errorf("%w: a scope's form id is empty", ErrInvalid)
		case len(f) > MaxAccessFormBytes:
			return fmt.Errorf("%w: form id %.20q… is %d bytes long, the most is %d", ErrInvalid, f, len(f), MaxAccessFormBytes)
		case seen[f]:
			return fmt.Errorf("%w: form id %q is named twice in the scope", ErrInvalid, f)
		}
		seen[f] = true
	}
	return nil
}

// PortalLinkRedeemParams turns a portal link into a session.
type PortalLinkRedeemParams struct {
	// LinkHash is the SHA-256 of the link's secret.
	LinkHash [32]byte
	// SessionHash is the SHA-256 of the new session's secret.
	SessionHash [32]byte
	// Now is when the link is opened; zero means the store's clock.
	Now time.Time
}

// PortalLinkListParams pages through the portal links, newest first: a
// product may make one each time a customer opens its page, and they are
// kept a week after they expire, so they are read a page at a time.
type PortalLinkListParams struct {
	// Before is a cursor: the ID of the last link of the previous page. A
	// link pruned since ends the list.
	Before string
	// Limit is the page size; zero means 100.
	Limit int
}

// PageSize is Limit, or 100 when zero.
func (p PortalLinkListParams) PageSize() int {
	if p.Limit <= 0 {
		return 100
	}
	return p.Limit
}

// AccessPruneParams removes credentials that can no longer open anything.
type AccessPruneParams struct {
	// ExpiredBefore is the cutoff: credentials that expired before it go,
	// whatever their kind, revoked or used or not. Required.
	ExpiredBefore time.Time
	// Limit caps how many rows one call removes; zero means 1000.
	Limit int
}

// PageSize is Limit, or 1000 when zero.
func (p AccessPruneParams) PageSize() int {
	if p.Limit <= 0 {
		return 1000
	}
	return p.Limit
}

// Access keeps the scoped credentials: API tokens, portal links and
// portal sessions. Secrets are never handed to it, only their SHA-256.
// Whether a credential opens anything at a moment (revoked, expired) is
// the caller's call for API tokens, which it reads whole; the portal
// methods decide in SQL, since a link must be spent once.
type Access interface {
	// TokenCreate stores an API token (Kind is set to AccessAPIToken); ID
	// and CreatedAt are set when empty. An invalid token is ErrInvalid, a
	// hash already stored ErrConflict.
	TokenCreate(ctx context.Context, t AccessToken) (AccessToken, error)
	// TokenGetByHash reads the API token whose secret hashes to hash,
	// revoked and expired ones too; ErrNotFound when there is none (a
	// portal credential with that hash is none).
	TokenGetByHash(ctx context.Context, hash [32]byte) (AccessToken, error)
	// TokenList returns the API tokens that are not revoked, expired ones
	// included so an admin sees them, newest first.
	TokenList(ctx context.Context) ([]AccessToken, error)
	// TokenRevoke revokes the API token id at now (zero: the store's
	// clock) and returns it. Revoking a revoked token changes nothing and
	// returns it with its first RevokedAt; an unknown id is ErrNotFound.
	TokenRevoke(ctx context.Context, id string, now time.Time) (AccessToken, error)
	// PortalLinkCreate stores a portal link (Kind is set to
	// AccessPortalLink), as TokenCreate does.
	PortalLinkCreate(ctx context.Context, link AccessToken) (AccessToken, error)
	// PortalLinkRedeem spends the link whose secret hashes to p.LinkHash
	// and, in the same transaction, creates the session it becomes: the
	// link's scope and read-only flag, expiring SessionTTL after p.Now,
	// stored under p.SessionHash, with LinkID the link's id. A link that is
	// unknown, already used, revoked or expired is ErrNotFound, and nothing is written. Of concurrent redeems
	// of one link, exactly one succeeds.
	PortalLinkRedeem(ctx context.Context, p PortalLinkRedeemParams) (AccessToken, error)
	// PortalLinkList returns a page of the portal links not yet pruned,
	// used, expired and revoked ones included, newest first, each with
	// when its session ends.
	PortalLinkList(ctx context.Context, p PortalLinkListParams) ([]PortalLink, error)
	// PortalLinkRevoke revokes the portal link id and every session made
	// from it at now (zero: the store's clock), in one transaction, and
	// returns the link. Revoking again changes nothing and returns the
	// first RevokedAt; an unknown id, or the id of another kind of
	// credential, is ErrNotFound. A revoked link is not redeemed and a
	// revoked session not read back, by any store on the database.
	PortalLinkRevoke(ctx context.Context, id string, now time.Time) (PortalLink, error)
	// PortalSessionGetByHash reads the portal session whose secret hashes
	// to hash; ErrNotFound when there is none, it was revoked, or it
	// expired at now (zero: the store's clock).
	PortalSessionGetByHash(ctx context.Context, hash [32]byte, now time.Time) (AccessToken, error)
	// AccessPrune removes up to p.Limit credentials that expired before
	// p.ExpiredBefore and returns how many it removed. A portal link stays
	// while a session made from it does, so it can still be listed and
	// revoked.
	AccessPrune(ctx context.Context, p AccessPruneParams) (int, error)
}
