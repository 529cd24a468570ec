package apiwire

import "time"

// TokenCreate is the body of POST /v1/tokens. Exactly one of ExpiresIn and
// ExpiresAt is required: a scoped token never lives forever.
type TokenCreate struct {
	// Name says what the token is for, for whoever lists them.
	Name string `json:"name"`
	// Forms is the scope: the form ids whose endpoints and deliveries the
	// token reaches.
	Forms []string `json:"forms"`
	// ExpiresIn is a Go duration ("720h") from now.
	ExpiresIn string `json:"expires_in,omitempty"`
	// ExpiresAt is an RFC 3339 time.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	ReadOnly  bool       `json:"read_only"`
}

// Token is a scoped token as GET /v1/tokens and DELETE /v1/tokens/{id}
// show it: never its secret, never its hash.
type Token struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Forms     []string   `json:"forms"`
	ReadOnly  bool       `json:"read_only"`
	ExpiresAt time.Time  `json:"expires_at"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// TokenCreated answers POST /v1/tokens: the token, and its secret, shown
// this once.
type TokenCreated struct {
	Token
	Secret string `json:"token"`
}

// TokenList answers GET /v1/tokens: the tokens not revoked, expired ones
// included, newest first.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// PortalSessionCreate is the body of POST /v1/portal/sessions.
type PortalSessionCreate struct {
	Forms []string `json:"forms"`
	// TTL is how long the portal session lasts once the link is opened, a
	// Go duration ("1h").
	TTL      string `json:"ttl"`
	ReadOnly bool   `json:"read_only"`
}

// PortalSession answers POST /v1/portal/sessions: a single-use link.
type PortalSession struct {
	// ID names the link: DELETE /v1/portal/sessions/{id} revokes it and
	// the session it became.
	ID string `json:"id"`
	// URL opens the portal once; a second use is refused.
	URL string `json:"url"`
	// ExpiresAt is when the link stops opening anything if it was not
	// opened; the session it becomes lasts TTL from its opening.
	ExpiresAt time.Time `json:"expires_at"`
}

// PortalLink is a portal link as GET /v1/portal/sessions and DELETE
// /v1/portal/sessions/{id} show it: never its secret, never its hash.
type PortalLink struct {
	ID       string   `json:"id"`
	Forms    []string `json:"forms"`
	ReadOnly bool     `json:"read_only"`
	// ExpiresAt is when the link stops opening anything if unused.
	ExpiresAt time.Time `json:"expires_at"`
	CreatedAt time.Time `json:"created_at"`
	// UsedAt is when the link was opened; null while unused.
	UsedAt *time.Time `json:"used_at"`
	// SessionExpiresAt is when the session the link became ends (or
	// ended); null while the link is unused.
	SessionExpiresAt *time.Time `json:"session_expires_at"`
	// RevokedAt is when an admin revoked the link and its session.
	RevokedAt *time.Time `json:"revoked_at"`
}

// PortalLinkList answers GET /v1/portal/sessions: a page of the portal
// links not yet pruned, used, expired and revoked ones included, newest
// first.
type PortalLinkList struct {
	Links []PortalLink `json:"links"`
	// NextCursor is passed as ?cursor= for the next page; null on the last.
	NextCursor *string `json:"next_cursor"`
}
