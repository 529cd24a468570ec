package apiwire

import "time"

// Endpoint is an endpoint as GET /v1/endpoints/{id}, the list, PATCH,
// disable and enable answer it. It carries no secret value: Secrets says how
// many secrets sign and until when.
type Endpoint struct {
	ID string `json:"id"`
	// URL is where the endpoint sends, with its credentials (the whole
	// user:password@) and the values of its secret-named query and
	// fragment parameters (token, password, api_key, sig, …) replaced by
	// "[redacted]". The server keeps and sends to the URL as given.
	URL string `json:"url"`
	// URLMasked names what URL hides, in the order it appears: "userinfo",
	// "query:NAME" or "fragment:NAME" (a name may repeat). Left out when
	// nothing is hidden. A PATCH that sends URL back as shown keeps the
	// stored URL; to change a hidden part, send the whole real URL.
	URLMasked   []string          `json:"url_masked,omitempty"`
	Transport   string            `json:"transport"`
	EventTypes  []string          `json:"event_types"`
	FormIDs     []string          `json:"form_ids"`
	Config      map[string]string `json:"config"`
	Description string            `json:"description"`
	Disabled    bool              `json:"disabled"`
	DisabledAt  *time.Time        `json:"disabled_at"`
	// DisabledReason is operator, gone (the receiver answered 410) or
	// failing (every attempt failed for endpoints.disable_after_failing);
	// empty while enabled.
	DisabledReason string `json:"disabled_reason"`
	// FailingSince is when the current run of failed attempts began; null
	// once an attempt is delivered.
	FailingSince  *time.Time `json:"failing_since"`
	RateLimit     float64    `json:"rate_limit"`
	RateBurst     int        `json:"rate_burst"`
	MaxInFlight   int        `json:"max_in_flight"`
	Ordered       bool       `json:"ordered"`
	RetrySchedule []string   `json:"retry_schedule"`
	// SignatureScheme is "v1" (HMAC-SHA256) or "v1a" (Ed25519).
	SignatureScheme string `json:"signature_scheme"`
	// Secrets says how many secrets sign and until when, never their values.
	Secrets []SecretInfo `json:"secrets"`
	// Headers are the endpoint's custom headers, in the order they are
	// sent, each with its value replaced by HeaderValueMask: values are
	// often credentials, and no answer carries them.
	Headers []HeaderInfo `json:"headers"`
	// PublicKeys, for a v1a endpoint, is the whpk_ public key of every
	// active key, in the order of Secrets: what receivers verify with. A
	// public key is no secret, so every view shows them. Left out when
	// there are none.
	PublicKeys []string  `json:"public_keys,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// SecretInfo is what the API shows of one active signing secret: when it
// stops signing, and for v1a its public key. Never the secret's value.
type SecretInfo struct {
	// ExpiresAt is null for the current secret and set for a rotated-out
	// one still signing through its grace period.
	ExpiresAt *time.Time `json:"expires_at"`
	// PublicKey is the whpk_ key of a v1a secret; left out for v1.
	PublicKey string `json:"public_key,omitempty"`
}

// HeaderValueMask stands for a custom header's value in every answer. A
// PATCH that sends it back as a value keeps the stored value.
const HeaderValueMask = "[redacted]"

// HeaderInfo is what an answer shows of a custom header: its name, and
// HeaderValueMask for its value.
type HeaderInfo struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// EndpointHeader is a custom header in a create or a PATCH. On a PATCH, a
// Value left out, null or HeaderValueMask keeps the value the endpoint
// has for that name (ignoring case); on a create it must be given.
type EndpointHeader struct {
	Name  string  `json:"name"`
	Value *string `json:"value,omitempty"`
}

// EndpointCreated answers POST /v1/endpoints and
// POST /v1/endpoints/{id}/rotate-secret: the only responses that carry a
// secret value.
type EndpointCreated struct {
	Endpoint
	// Secret is the new whsec_ secret (v1) or whsk_ signing key (v1a),
	// shown this once.
	Secret string `json:"secret"`
	// PreviousSecretsExpireAt is set on rotation: when the secrets that
	// were active before stop signing. Left out on creation.
	PreviousSecretsExpireAt *time.Time `json:"previous_secrets_expire_at,omitempty"`
}

// EndpointList answers GET /v1/endpoints: a page of the endpoints that are
// not deleted, newest first.
type EndpointList struct {
	Endpoints []Endpoint `json:"endpoints"`
	// NextCursor is passed as ?cursor= for the next page; null on the last.
	NextCursor *string `json:"next_cursor"`
}

// EndpointDeleted answers DELETE /v1/endpoints/{id}.
type EndpointDeleted struct {
	ID        string    `json:"id"`
	DeletedAt time.Time `json:"deleted_at"`
	// FailedPending and FailedProcessing count the deliveries a forced
	// delete ended as failed, with the reason "endpoint deleted: …" on
	// each; a processing one's worker can still record its request as a
	// late attempt. Both are 0 for a delete that was not forced.
	FailedPending    int `json:"failed_pending"`
	FailedProcessing int `json:"failed_processing"`
}

// EndpointControls are the per-endpoint controls a create or a PATCH may
// set; a field left out (or null) keeps its value (on create: none).
type EndpointControls struct {
	// RateLimit is the most sends per second, across every server process;
	// 0 is no limit.
	RateLimit *float64 `json:"rate_limit,omitempty"`
	// RateBurst is the sends allowed at once after a quiet spell; 0 is the
	// rate, rounded up.
	RateBurst *int `json:"rate_burst,omitempty"`
	// MaxInFlight is the most sends under way at once; 0 is no cap.
	MaxInFlight *int `json:"max_in_flight,omitempty"`
	// Ordered sends one delivery at a time, in order.
	Ordered *bool `json:"ordered,omitempty"`
	// RetrySchedule is Go durations such as "30s" or "2h"; [] goes back
	// to the server's schedule.
	RetrySchedule *[]string `json:"retry_schedule,omitempty"`
}

// EndpointCreate is the body of POST /v1/endpoints.
type EndpointCreate struct {
	URL string `json:"url,omitempty"`
	// Transport names the plugin that sends; empty is "http".
	Transport   string            `json:"transport,omitempty"`
	EventTypes  []string          `json:"event_types,omitempty"`
	FormIDs     []string          `json:"form_ids,omitempty"`
	Config      map[string]string `json:"config,omitempty"`
	Description string            `json:"description,omitempty"`
	// SignatureScheme is "v1" (HMAC-SHA256, the default) or "v1a" (Ed25519).
	SignatureScheme string `json:"signature_scheme,omitempty"`
	// Headers are sent with every attempt, after the signature headers.
	Headers []EndpointHeader `json:"headers,omitempty"`
	EndpointControls
}

// EndpointPatch is the body of PATCH /v1/endpoints/{id}: a field left out
// (or null) keeps its value.
type EndpointPatch struct {
	URL         *string            `json:"url,omitempty"`
	Transport   *string            `json:"transport,omitempty"`
	EventTypes  *[]string          `json:"event_types,omitempty"`
	FormIDs     *[]string          `json:"form_ids,omitempty"`
	Config      *map[string]string `json:"config,omitempty"`
	Description *string            `json:"description,omitempty"`
	// Headers replaces the whole set of custom headers; [] removes them
	// all. See EndpointHeader for keeping a value unchanged.
	Headers *[]EndpointHeader `json:"headers,omitempty"`
	EndpointControls
}
