package storage

import (
	"context"
	"fmt"
	"time"
)

// ConsoleSession is one operator's login to the console. It is kept in the
// store, not in a process, so that a login holds on every server sharing
// the database, behind a load balancer that does not pin a browser to one.
// Only the SHA-256 of the session id (the cookie) is stored, so a copy of
// the database opens no session. The CSRF token is stored as it is: it
// has to be compared with the form's, and without the cookie it opens
// nothing.
type ConsoleSession struct {
	// Hash is the SHA-256 of the session id; unique.
	Hash [32]byte
	// CSRF is the token every form of the session carries back.
	CSRF string
	// Operator is the name given at login, for the replay audit.
	Operator  string
	ExpiresAt time.Time
	CreatedAt time.Time
}

// Bounds of what one console session stores.
const (
	MaxConsoleCSRFBytes     = 200
	MaxConsoleOperatorBytes = 200
)

// Validate checks a session before it is stored.
func (s ConsoleSession) Validate() error {
	switch {
	case s.Hash == [32]byte{}:
		return fmt.Errorf("%w: a console session needs the hash of its id", ErrInvalid)
	case s.CSRF == "" || len(s.CSRF) > MaxConsoleCSRFBytes:
		return fmt.Errorf("%w: a console session's CSRF token must be 1 to %d bytes", ErrInvalid, MaxConsoleCSRFBytes)
	case len(s.Operator) > MaxConsoleOperatorBytes:
		return fmt.Errorf("%w: a console session's operator name must be at most %d bytes", ErrInvalid, MaxConsoleOperatorBytes)
	case s.ExpiresAt.IsZero():
		return fmt.Errorf("%w: a console session needs an expiry", ErrInvalid)
	}
	return nil
}

// ConsoleSessionCreateParams is a session to store, and the bound on how
// many live sessions are kept.
type ConsoleSessionCreateParams struct {
	Session ConsoleSession
	// Max is the most live sessions kept: storing one more removes, in the
	// same transaction, the expired sessions and the live ones closest to
	// expiry past Max, so a login loop cannot grow the table without end.
	// At least 1.
	Max int
	// Now is when the session is created (zero: the store's clock); it is
	// the session's CreatedAt when that is zero, and what "expired" means.
	Now time.Time
}

// ConsoleSessions keeps the console's logins.
type ConsoleSessions interface {
	// ConsoleSessionCreate stores p.Session, keeping at most p.Max live
	// sessions (see ConsoleSessionCreateParams). An invalid session or Max
	// is ErrInvalid; a hash already stored ErrConflict.
	ConsoleSessionCreate(ctx context.Context, p ConsoleSessionCreateParams) (ConsoleSession, error)
	// ConsoleSessionGet reads the session whose id hashes to hash;
	// ErrNotFound when there is none or it expired at now (zero: the
	// store's clock).
	ConsoleSessionGet(ctx context.Context, hash [32]byte, now time.Time) (ConsoleSession, error)
	// ConsoleSessionEnd removes the session whose id hashes to hash, on
	// logout. Ending one that is not there is not an error.
	ConsoleSessionEnd(ctx context.Context, hash [32]byte) error
}
