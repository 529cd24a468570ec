// Package access owns what a scoped credential may reach and how its
// secret is made and checked: a Scope (a set of form ids), the minting
// and hashing of API tokens, portal links and portal sessions, and the
// lookups that turn a presented secret into a credential. The store keeps
// only SHA-256 hashes; the secret exists in the caller's hands and in one
// answer.
//
// It decides nothing about HTTP: the API and the portal answer 401 for
// every ErrUnauthenticated, without saying which check failed, and 404 for
// what a Scope does not allow, so ids cannot be probed.
package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hymical/hymical/storage"
)

// Scope is what a scoped credential reaches: the endpoints whose form ids
// are a non-empty subset of Forms, and the deliveries to those endpoints.
// ReadOnly credentials change nothing.
type Scope struct {
	Forms    []string
	ReadOnly bool
}

// NewScope checks forms (storage.ValidateForms: between 1 and
// storage.MaxAccessForms distinct, non-empty ids of at most
// storage.MaxAccessFormBytes each) and returns the scope, its forms sorted
// so that two scopes of one set read the same.
func NewScope(forms []string, readOnly bool) (Scope, error) {
	if err := storage.ValidateForms(forms); err != nil {
		return Scope{}, fmt.Errorf("scope: %w", err)
	}
	sorted := slices.Clone(forms)
	slices.Sort(sorted)
	return Scope{Forms: sorted, ReadOnly: readOnly}, nil
}

// ScopeOf is the scope of a stored credential.
func ScopeOf(t storage.AccessToken) Scope {
	return Scope{Forms: slices.Clone(t.Forms), ReadOnly: t.ReadOnly}
}

// AllowsForm reports whether form is in the scope. An event of no form
// (form "") is in none.
func (s Scope) AllowsForm(form string) bool {
	return form != "" && slices.Contains(s.Forms, form)
}

// AllowsForms reports whether forms is a non-empty subset of the scope: an
// endpoint of every form (no form ids) is in no scope, so a scoped
// credential can neither see nor create one.
func (s Scope) AllowsForms(forms []string) bool {
	if len(forms) == 0 {
		return false
	}
	for _, f := range forms {
		if !s.AllowsForm(f) {
			return false
		}
	}
	return true
}

// AllowsEndpoint reports whether e is in the scope: its form ids are a
// non-empty subset of it. EndpointListParams.Forms is the same rule in SQL.
func (s Scope) AllowsEndpoint(e storage.Endpoint) bool { return s.AllowsForms(e.FormIDs) }

// The prefixes of minted secrets say what a secret is, so one pasted in
// the wrong place is recognised (and secret scanners can match them).
const (
	// TokenPrefix starts every scoped API token.
	TokenPrefix = "hymt_"
	// PortalLinkPrefix starts every portal link's secret.
	PortalLinkPrefix = "hympl_"
	// PortalSessionPrefix starts every portal session's secret (the cookie).
	PortalSessionPrefix = "hymps_"
)

// secretBytes is how much randomness a secret carries: 256 bits, so a
// guess is hopeless and the hash alone needs no salt.
const secretBytes = 32

// ErrUnauthenticated: the secret opens nothing. It is unknown, of another
// kind, expired, revoked or (for a link) already used; the caller answers
// all of them alike.
var ErrUnauthenticated = errors.New("the credential is unknown, expired or revoked")

// Mint returns a fresh secret: prefix, then 32 random bytes in unpadded
// base64url.
func Mint(prefix string) string {
	b := make([]byte, secretBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// Hash is the SHA-256 of a secret, as the store keeps it.
func Hash(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// Store is what this package needs of the store.
type Store interface {
	TokenCreate(ctx context.Context, t storage.AccessToken) (storage.AccessToken, error)
	TokenGetByHash(ctx context.Context, hash [32]byte) (storage.AccessToken, error)
	PortalLinkCreate(ctx context.Context, link storage.AccessToken) (storage.AccessToken, error)
	PortalLinkRedeem(ctx context.Context, p storage.PortalLinkRedeemParams) (storage.AccessToken, error)
	PortalSessionGetByHash(ctx context.Context, hash [32]byte, now time.Time) (storage.AccessToken, error)
}

// NewToken mints an API token for scope, valid until expiresAt, and stores
// its hash. It returns the secret, to be shown once, and the stored token.
func NewToken(ctx context.Context, store Store, name string, scope Scope, expiresAt, now time.Time) (string, storage.AccessToken, error) {
	if !expiresAt.After(now) {
		return "", storage.AccessToken{}, fmt.Errorf("new token: %w: the expiry %s is not after now; give a time in the future",
			storage.ErrInvalid, expiresAt.UTC().Format(time.RFC3339))
	}
	secret := Mint(TokenPrefix)
	t, err := store.TokenCreate(ctx, storage.AccessToken{Name: name, Hash: Hash(secret), Forms: scope.Forms,
		ReadOnly: scope.ReadOnly, ExpiresAt: expiresAt, CreatedAt: now})
	if err != nil {
		return "", storage.AccessToken{}, fmt.Errorf("new token: %w", err)
	}
	return secret, t, nil
}

// Authenticate turns a presented API token into the stored token, refusing
// one that is malformed, unknown, expired at now or revoked with
// ErrUnauthenticated. Other errors are the store's (it may be down).
func Authenticate(ctx context.Context, store Store, secret string, now time.Time) (storage.AccessToken, error) {
	if !strings.HasPrefix(secret, TokenPrefix) {
		return storage.AccessToken{}, ErrUnauthenticated
	}
	t, err := store.TokenGetByHash(ctx, Hash(secret))
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return storage.AccessToken{}, ErrUnauthenticated
	case err != nil:
		return storage.AccessToken{}, fmt.Errorf("authenticate: %w", err)
	case !t.ActiveAt(now):
		return storage.AccessToken{}, ErrUnauthenticated
	}
	return t, nil
}

// NewPortalLink mints a single-use portal link for scope that can be
// redeemed for linkTTL after now, into a session that lasts sessionTTL
// from its redemption. It returns the link's secret and the stored link,
// whose id revokes it and its session.
func NewPortalLink(ctx context.Context, store Store, scope Scope, linkTTL, sessionTTL time.Duration, now time.Time) (string, storage.AccessToken, error) {
	if linkTTL <= 0 || sessionTTL <= 0 {
		return "", storage.AccessToken{}, fmt.Errorf("new portal link: %w: the link's ttl (%s) and the session's (%s) must both be positive",
			storage.ErrInvalid, linkTTL, sessionTTL)
	}
	secret := Mint(PortalLinkPrefix)
	link, err := store.PortalLinkCreate(ctx, storage.AccessToken{Hash: Hash(secret), Forms: scope.Forms,
		ReadOnly: scope.ReadOnly, ExpiresAt: now.Add(linkTTL), SessionTTL: sessionTTL, CreatedAt: now})
	if err != nil {
		return "", storage.AccessToken{}, fmt.Errorf("new portal link: %w", err)
	}
	return secret, link, nil
}

// RedeemPortalLink spends a portal link and returns the secret of the
// session it became (for the cookie) and the session. A link that is
// malformed, unknown, used or expired is ErrUnauthenticated.
func RedeemPortalLink(ctx context.Context, store Store, rawLink string, now time.Time) (string, storage.AccessToken, error) {
	if !strings.HasPrefix(rawLink, PortalLinkPrefix) {
		return "", storage.AccessToken{}, ErrUnauthenticated
	}
	secret := Mint(PortalSessionPrefix)
	sess, err := store.PortalLinkRedeem(ctx, storage.PortalLinkRedeemParams{LinkHash: Hash(rawLink), SessionHash: Hash(secret), Now: now})
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return "", storage.AccessToken{}, ErrUnauthenticated
	case err != nil:
		return "", storage.AccessToken{}, fmt.Errorf("redeem portal link: %w", err)
	}
	return secret, sess, nil
}

// PortalSession turns a session cookie's secret into the session, refusing
// one that is malformed, unknown, revoked or expired at now with
// ErrUnauthenticated.
func PortalSession(ctx context.Context, store Store, rawSession string, now time.Time) (storage.AccessToken, error) {
	if !strings.HasPrefix(rawSession, PortalSessionPrefix) {
		return storage.AccessToken{}, ErrUnauthenticated
	}
	sess, err := store.PortalSessionGetByHash(ctx, Hash(rawSession), now)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return storage.AccessToken{}, ErrUnauthenticated
	case err != nil:
		return storage.AccessToken{}, fmt.Errorf("portal session: %w", err)
	}
	return sess, nil
}
