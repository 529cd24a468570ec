package storage

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"time"
)

// DeliveryState is where a delivery stands in the state machine.
type DeliveryState string

const (
	StatePending    DeliveryState = "pending"
	StateProcessing DeliveryState = "processing"
	StateDelivered  DeliveryState = "delivered"
	StateFailed     DeliveryState = "failed"
)

// Terminal reports whether the worker must never revisit a delivery in s.
func (s DeliveryState) Terminal() bool { return s == StateDelivered || s == StateFailed }

// Valid reports whether s is one of the four states.
func (s DeliveryState) Valid() bool {
	switch s {
	case StatePending, StateProcessing, StateDelivered, StateFailed:
		return true
	}
	return false
}

// OutcomeKind is what one request produced, as the transport reported it.
type OutcomeKind string

const (
	// OutcomeDelivered: the receiver accepted the message.
	OutcomeDelivered OutcomeKind = "delivered"
	// OutcomeRetryable: the request failed in a way another try may fix.
	OutcomeRetryable OutcomeKind = "retryable"
	// OutcomePermanent: the request failed in a way no retry will fix.
	OutcomePermanent OutcomeKind = "permanent"
)

// Valid reports whether k is one of the three outcome kinds.
func (k OutcomeKind) Valid() bool {
	switch k {
	case OutcomeDelivered, OutcomeRetryable, OutcomePermanent:
		return true
	}
	return false
}

// DefaultMaxCycleAttempts is the retry allowance: how many requests one cycle
// of a delivery may make before a retryable failure becomes failed.
const DefaultMaxCycleAttempts = 5

// MaxErrorBytes bounds the error text stored with an attempt.
const MaxErrorBytes = 1024

// Sentinel errors. Backends map their native errors onto these; callers check
// them with errors.Is.
var (
	// ErrNotFound: no row has the given id.
	ErrNotFound = errors.New("not found")
	// ErrClaimLost: the claim token no longer matches the row, because the
	// lease expired and another worker claimed it, or the claim already ended.
	// Nothing was changed.
	ErrClaimLost = errors.New("claim lost: the delivery no longer carries this claim token")
	// ErrClaimHeld: a late attempt was recorded under the token the row still
	// carries; the owner must complete, not record late.
	ErrClaimHeld = errors.New("claim still held: this token is the current claim, complete the delivery instead")
	// ErrNotTerminal: replay was asked for a delivery that is pending or processing.
	ErrNotTerminal = errors.New("delivery is not terminal: only delivered or failed deliveries can be replayed")
	// ErrConflict: a unique value (an id, an idempotency key) is taken.
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the parameters break a rule of the state machine.
	ErrInvalid = errors.New("invalid parameters")
	// ErrSchemaUnknown: the database carries a schema version this build does not know.
	ErrSchemaUnknown = errors.New("database schema version is newer than this build knows")
	// ErrNoSpace: a write failed because the database has no room left to
	// grow (SQLite: SQLITE_FULL, the disk under the file is full or its page
	// limit is reached; PostgreSQL: 53100 disk_full). Nothing of the write
	// was kept; the same write succeeds once space is freed.
	ErrNoSpace = errors.New("the database is out of space")
	// ErrResources: the database refused an operation for want of a
	// resource other than disk space: on PostgreSQL memory, connections or
	// a configured limit (SQLSTATE class 53); on SQLite the write lock,
	// which another process held past the busy timeout. Nothing of it was
	// kept; it may succeed when retried.
	ErrResources = errors.New("the database is short of resources")
	// ErrUnavailable: the database could not be reached, or dropped the
	// connection, before the operation finished: it is stopped, restarting,
	// shutting down, or the network to it failed (PostgreSQL: a refused or
	// reset connection, an end of stream, SQLSTATE class 08, 57P01 to
	// 57P03, a pool already closed). What the operation wrote is either
	// not kept or kept whole (a transaction commits or it does not); a
	// write that is sent again once the database is back is stored, or
	// answered as the repeat it is when it carries an idempotency key.
	ErrUnavailable = errors.New("the database is not reachable")
	// ErrDeleted: the endpoint was deleted. Its row and history stay
	// readable, but it takes no change, no new delivery and no replay.
	ErrDeleted = errors.New("the endpoint was deleted")
	// ErrEndpointBusy: a delete without Force found the endpoint still has
	// pending or processing deliveries. Nothing was changed.
	ErrEndpointBusy = errors.New("the endpoint has pending or processing deliveries")
	// ErrKeyReused: an idempotency key came back with a request other than
	// the one it was first used with. Nothing was written.
	ErrKeyReused = errors.New("the idempotency key was first used with a different request")
)

// Secret is an endpoint's signing secret: a v1 HMAC secret written "whsec_"
// + base64, or a v1a Ed25519 signing key written "whsk_" + base64; the
// prefix says which. Its String and LogValue hide the value so it never
// reaches a log by accident; Reveal is the one way to read it.
type Secret struct {
	value string
	// ExpiresAt, when set, is when a rotated-out secret stops signing.
	ExpiresAt *time.Time
}

// NewSecret wraps a secret value.
func NewSecret(value string, expiresAt *time.Time) Secret {
	return Secret{value: value, ExpiresAt: expiresAt}
}

// Reveal returns the secret value, for signing and for showing it once at creation.
func (s Secret) Reveal() string { return s.value }

// String keeps the prefix, which tells the scheme and is no secret.
func (s Secret) String() string {
	if len(s.value) >= len("whsk_") && s.value[:len("whsk_")] == "whsk_" {
		return "whsk_[redacted]"
	}
	return "whsec_[redacted]"
}

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return "storage.Secret{" + s.String() + "}" }

// MarshalJSON refuses to put the value into JSON by accident.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// ActiveAt reports whether the secret still signs at t.
func (s Secret) ActiveAt(t time.Time) bool { return s.ExpiresAt == nil || t.Before(*s.ExpiresAt) }

// Endpoint is a registered destination.
type Endpoint struct {
	ID string
	// Transport names the plugin that sends to this endpoint, e.g. "http".
	Transport string
	// URL is the target for URL-shaped transports; others read Config.
	URL string
	// Config is transport-specific settings, handed to the plugin as is.
	Config map[string]string
	// EventTypes the endpoint subscribes to; empty means every type.
	EventTypes []string
	// FormIDs the endpoint subscribes to; empty means every form.
	FormIDs []string
	// Secrets sign every message; during a rotation more than one is active.
	Secrets     []Secret
	Description string
	// DisabledAt, when set, pauses the endpoint: nothing is sent to it, and
	// its pending deliveries, those of events that arrive meanwhile
	// included, are held until it is enabled again.
	DisabledAt *time.Time
	// DisabledReason says who or what disabled it: one of the Disabled*
	// reasons. Empty while enabled.
	DisabledReason DisabledReason
	// FailingSince is when the current run of failed attempts to the
	// endpoint began; nil once an attempt is delivered, and when the
	// endpoint is enabled again. The store keeps it as attempts complete;
	// writes of the field through EndpointUpdate are ignored.
	FailingSince *time.Time
	// RateLimit is the most sends per second to the endpoint, across every
	// process sharing the store; 0 means no limit.
	RateLimit float64
	// RateBurst is how many sends may go at once after a quiet spell; 0
	// means the default, RateLimit rounded up (at least 1).
	RateBurst int
	// MaxInFlight is the most sends to the endpoint under way at once,
	// across every process; 0 means no limit.
	MaxInFlight int
	// Ordered makes deliveries go one at a time in the order they were
	// queued: a delivery is not claimed while an earlier one to the
	// endpoint is pending or processing.
	Ordered bool
	// RetrySchedule is the delay before each retry, overriding the
	// server's; its length plus one is the retry allowance. Empty means the
	// server's schedule.
	RetrySchedule []time.Duration
	// Headers are sent with every attempt, after the signature headers,
	// in this order. Their values are sealed at rest like Secrets.
	Headers   []Header
	CreatedAt time.Time
	UpdatedAt time.Time
	// DeletedAt, when set, is when the endpoint was deleted (EndpointDelete).
	// Only EndpointGet returns a deleted endpoint; writes of the field
	// through EndpointCreate or EndpointUpdate are ignored.
	DeletedAt *time.Time
}

// DisabledReason says who or what disabled an endpoint.
type DisabledReason string

// The reasons an endpoint is disabled.
const (
	// DisabledByOperator: an operator disabled it through the API, CLI or console.
	DisabledByOperator DisabledReason = "operator"
	// DisabledGone: the receiver answered 410 Gone.
	DisabledGone DisabledReason = "gone"
	// DisabledFailing: every attempt to it failed for longer than the
	// configured span.
	DisabledFailing DisabledReason = "failing"
)

// Valid reports whether r is one of the three reasons.
func (r DisabledReason) Valid() bool {
	switch r {
	case DisabledByOperator, DisabledGone, DisabledFailing:
		return true
	}
	return false
}

// Burst is the burst in force: RateBurst, or RateLimit rounded up.
func (e Endpoint) Burst() int {
	if e.RateBurst > 0 {
		return e.RateBurst
	}
	return max(1, int(math.Ceil(e.RateLimit)))
}

// Limited reports whether claims of the endpoint's deliveries must be
// admitted against a shared rate or in-flight budget.
func (e Endpoint) Limited() bool { return e.RateLimit > 0 || e.MaxInFlight > 0 }

// Matches reports whether an event of eventType for formID fans out to e.
// An empty formID (an event not about a form) matches only endpoints that
// name no forms. A disabled endpoint still matches: its delivery is created
// held, so nothing is lost while it is paused.
func (e Endpoint) Matches(eventType, formID string) bool {
	if len(e.EventTypes) > 0 && !contains(e.EventTypes, eventType) {
		return false
	}
	if len(e.FormIDs) > 0 && !contains(e.FormIDs, formID) {
		return false
	}
	return true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Event is one thing that happened, with the exact body every delivery of it
// carries.
type Event struct {
	ID   string
	Type string
	// FormID and SubmissionID are set for submission events; receivers
	// dedupe on SubmissionID.
	FormID       string
	SubmissionID string
	// Payload is the JSON body sent to receivers, stored byte for byte so
	// every attempt and every replay signs the same bytes.
	Payload json.RawMessage
	// IdempotencyKey, when set, makes a second EventCreate with the same key
	// return the first event instead of creating another.
	IdempotencyKey string
	// TraceParent is the W3C trace context of the request that created the
	// event, so attempts hours later can link back to it.
	TraceParent string
	// EndpointID, when set, sends the event to that endpoint only, whatever
	// the subscriptions of the others: operator notifications use it.
	EndpointID string
	CreatedAt  time.Time
}

// Delivery is one event on its way to one endpoint.
type Delivery struct {
	ID         string
	EndpointID string
	EventID    string
	State      DeliveryState
	// Attempts counts every request the delivery ever produced, late ones
	// included. It only rises.
	Attempts int
	// CycleAttempts counts the owner's requests since the delivery last
	// entered the queue; the retry allowance is measured against it.
	CycleAttempts int
	// Held marks a pending delivery that is not claimable for now: its
	// endpoint is disabled, or it waits behind an earlier delivery to an
	// ordered endpoint.
	Held           bool
	NextAttemptAt  time.Time
	ClaimExpiresAt *time.Time
	CreatedAt      time.Time
	CompletedAt    *time.Time
	// UnsentReason says why a claim of the delivery ended without a
	// request: released unspent while its transport plugin was not
	// running, or failed because no request could be made (the transport
	// is unknown, the transport refused the target, the message could not
	// be signed). Bounded to MaxErrorBytes. It is cleared when the owner
	// records an attempt and by replay; empty when nothing was left unsent.
	UnsentReason string
}

// Attempt is one request that really went out.
type Attempt struct {
	DeliveryID string
	// Number is the lifetime attempt number, unique per delivery.
	Number  int
	Outcome OutcomeKind
	// HTTPStatus is 0 when the transport had no HTTP status to report.
	HTTPStatus int
	// Error is bounded to MaxErrorBytes.
	Error string
	// Late marks a request made by a worker whose claim had been superseded.
	Late       bool
	StartedAt  time.Time
	FinishedAt time.Time
	TraceID    string
}

// Replay is the audit record of an operator putting a delivery back in the queue.
type Replay struct {
	DeliveryID    string
	Actor         string
	PreviousState DeliveryState
	ReplayedAt    time.Time
}

// Claim is a delivery this worker now owns, with the token that proves it,
// the event it carries and the endpoint it goes to, as they were read in the
// claim's transaction.
type Claim struct {
	Delivery Delivery
	Event    Event
	Endpoint Endpoint
	Token    string
}

// Worker is a running server process, as it registers itself.
type Worker struct {
	ID            string
	Build         string
	SchemaVersion int
	Host          string
	StartedAt     time.Time
	HeartbeatAt   time.Time
}

// EventCreateResult is the event and the deliveries it fanned out to.
type EventCreateResult struct {
	Event      Event
	Deliveries []Delivery
	// Duplicate is true when the idempotency key was seen before: Event and
	// Deliveries are the ones created then, and nothing new was written.
	Duplicate bool
}

// DeliveryClaimParams asks for a batch of claimable deliveries.
type DeliveryClaimParams struct {
	// Limit is the most deliveries to claim; at least 1.
	Limit int
	// Lease is how long the claim holds; positive.
	Lease time.Duration
	// Share, when set, bounds how many pending deliveries of each endpoint
	// this claim takes: the worker's fair share between endpoints. Nil
	// takes the oldest due, whoever they go to.
	Share *ClaimShare
	// Now overrides the store's clock; zero means the store's clock.
	Now time.Time
}

// ClaimShare is how many pending deliveries a claim may take of each
// endpoint. With a share, a claim still takes the oldest due first, but
// none of an endpoint past its room: the deliveries of other endpoints
// behind them are found however many of the capped one's are due first.
// Leases that expired are claimed regardless: they are few, and their
// sends are already owed.
type ClaimShare struct {
	// Default is the room of an endpoint not in Room; 0 takes none of it.
	Default int
	// Room gives the endpoints it names a room of their own; 0 takes none.
	Room map[string]int
	// TopUp lets the endpoints it names take this many more past their
	// room, only for what of the limit the rooms leave: the claim first
	// takes every endpoint's oldest due up to its room, then fills the
	// rest with the next oldest due of these. So an endpoint that filled
	// its room may use every sender when nothing else is due, in the same
	// claim that looks for anything else due first.
	TopUp map[string]int
	// Idle, when set, gives the room and top-up of an endpoint that
	// neither Room nor TopUp names, in place of Default (ok false: the
	// default). It is asked only of the endpoints a claim looks at, so a
	// worker can leave the endpoints it knows but that hold nothing out
	// of the maps, and a claim's share costs the endpoints in flight, not
	// every endpoint known. With Default 0 a claim looks only at the
	// endpoints the maps name.
	Idle func(endpointID string) (room, topUp int, ok bool)
}

// RoomOf is the room of the endpoint with id.
func (s *ClaimShare) RoomOf(id string) int {
	if r, ok := s.Room[id]; ok {
		return r
	}
	if _, named := s.TopUp[id]; !named && s.Idle != nil {
		if r, _, ok := s.Idle(id); ok {
			return r
		}
	}
	return s.Default
}

// TopUpOf is the top-up of the endpoint with id.
func (s *ClaimShare) TopUpOf(id string) int {
	if t, ok := s.TopUp[id]; ok {
		return t
	}
	if _, named := s.Room[id]; !named && s.Idle != nil {
		if _, t, ok := s.Idle(id); ok {
			return t
		}
	}
	return 0
}

// Most is the most a claim with s takes of the endpoint with id: its room
// and its top-up.
func (s *ClaimShare) Most(id string) int { return s.RoomOf(id) + s.TopUpOf(id) }

// DeliveryCompleteParams ends a claim with the outcome of the owner's request.
type DeliveryCompleteParams struct {
	DeliveryID string
	Token      string
	Outcome    OutcomeKind
	HTTPStatus int
	Error      string
	StartedAt  time.Time
	FinishedAt time.Time
	TraceID    string
	// RetryDelay is how long after Now a retryable failure is due again;
	// ignored for other outcomes.
	RetryDelay time.Duration
	// MaxCycleAttempts is the retry allowance; zero means DefaultMaxCycleAttempts.
	MaxCycleAttempts int
	Now              time.Time
}

// DeliveryCompleteResult is what one entry of DeliveryCompleteBatch did.
type DeliveryCompleteResult struct {
	Delivery Delivery
	Attempt  Attempt
	// Err, when set, is this entry's own answer: ErrClaimLost, ErrNotFound
	// or ErrInvalid. Nothing of the entry was written; the others were.
	Err error
}

// AttemptRecordLateParams records a request made under a superseded claim.
type AttemptRecordLateParams struct {
	DeliveryID string
	// Token is the claim token the request was sent under. It must not be
	// the token the row carries now.
	Token      string
	Outcome    OutcomeKind
	HTTPStatus int
	Error      string
	StartedAt  time.Time
	FinishedAt time.Time
	TraceID    string
}

// DeliveryReleaseParams gives a claim back without a request having been
// made, so no attempt is spent: shutdown before send, a deferral, or a
// condition that passes, such as a transport plugin that is not running.
type DeliveryReleaseParams struct {
	DeliveryID string
	Token      string
	// Delay is how long after Now the delivery is due again; zero means now.
	Delay time.Duration
	// Reason, when set, says why no request was made and becomes the
	// delivery's UnsentReason (bounded to MaxErrorBytes). Empty leaves the
	// delivery's UnsentReason as it was.
	Reason string
	Now    time.Time
}

// DeliveryFailParams ends a claim as failed without a request having been
// made, for a condition no retry will fix by itself: the transport is
// unknown, the transport refused the target before sending, the message
// cannot be signed. No attempt is recorded and no counter changes.
type DeliveryFailParams struct {
	DeliveryID string
	Token      string
	// Reason says why, for the operator who will fix it and replay;
	// required. It becomes the delivery's UnsentReason, bounded to
	// MaxErrorBytes.
	Reason string
	Now    time.Time
}

// DeliveryReplayParams puts one terminal delivery back in the queue.
type DeliveryReplayParams struct {
	DeliveryID string
	// Actor says who replayed, for the audit record; required.
	Actor string
	Now   time.Time
	// Idempotency, when set, makes the replay happen at most once per key:
	// the key is recorded in the same transaction with the delivery's id.
	Idempotency *Idempotency
}

// DeliveryFilter selects deliveries; zero fields select everything.
type DeliveryFilter struct {
	State         DeliveryState
	EndpointID    string
	EventID       string
	FormID        string
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// Forms, when non-nil, is a scope: only deliveries to the endpoints in
	// it, those whose form ids are a non-empty subset of it (the rule of
	// EndpointListParams.Forms), whatever the event's form. So a scope
	// sees its endpoints' test deliveries, and not the deliveries of its
	// forms' events to an endpoint of every form or of a form outside it.
	// A non-nil empty list matches nothing.
	Forms []string
	// ExceptEndpointID, when set, leaves out the deliveries to that
	// endpoint: a scope's lists leave out the operator endpoint's, as its
	// reads by id do, whatever forms it names.
	ExceptEndpointID string
}

// DeliveryListParams pages through deliveries, newest first.
type DeliveryListParams struct {
	Filter DeliveryFilter
	// Before is a cursor: the ID of the last delivery of the previous page.
	Before string
	// Limit is the page size; zero means 100.
	Limit int
}

// DeliveryReplayManyParams replays every terminal delivery matching Filter.
type DeliveryReplayManyParams struct {
	// Filter.State must be delivered or failed.
	Filter DeliveryFilter
	Actor  string
	// Limit caps how many are replayed in one call; zero means 1000.
	Limit int
	Now   time.Time
	// Idempotency, when set, makes the bulk replay happen at most once per
	// key: the key is recorded in the same transaction with the count.
	Idempotency *Idempotency
}

// DeliveryPruneParams removes delivered deliveries that finished long ago.
type DeliveryPruneParams struct {
	// CompletedBefore is the cutoff: delivered deliveries completed before
	// it go, with their attempts and replay records. Required.
	CompletedBefore time.Time
	// Limit caps how many deliveries one call removes, so one transaction
	// stays short; zero means 1000.
	Limit int
}

// DeliveryStats are counts for dashboards and metrics.
type DeliveryStats struct {
	ByState map[DeliveryState]int64
	// Due counts deliveries claimable now.
	Due int64
	// Held counts pending deliveries that are not claimable however due
	// they are: their endpoint is disabled, or they wait their turn at an
	// ordered endpoint.
	Held int64
	// OldestDue is since when the longest-waiting claimable delivery has
	// been due: a pending one's next attempt time, or the expiry of a
	// processing one's lease. Zero when none is due. Its age is what an
	// operator alerts on: a queue that drains keeps it young, however
	// deep the queue is.
	OldestDue time.Time
}

// EndpointListParams pages through the endpoints that are not deleted,
// newest first.
type EndpointListParams struct {
	// Before is a cursor: the ID of the last endpoint of the previous page.
	Before string
	// Limit is the page size; zero means 100.
	Limit int
	// Forms, when non-nil, is a scope: only endpoints whose form ids are a
	// non-empty subset of it. An endpoint of every form (no form ids) is in
	// no scope, nor is one that also names a form outside it.
	Forms []string
}

// DefaultIdempotencyWindow is how long an idempotency key of a keyed
// operation (EndpointCreate, EndpointRotate, DeliveryReplay and
// DeliveryReplayMany with Idempotency set) answers with what it first did.
const DefaultIdempotencyWindow = 24 * time.Hour

// Idempotency is the key of an operation that is not an ingest, and what
// a repeat of it is checked against. An operation's params take it as an
// optional field: nil is the operation unkeyed. The keys of every such
// operation share one space, so callers scope them (e.g. "endpoint:" +
// key); a key first used by another operation, or on another target, is
// ErrKeyReused. A key records only ids, counts and fingerprints of what
// the operation did, never a secret: a repeat reads its answer again.
type Idempotency struct {
	// Key makes a second call with the same key within Window answer with
	// what the first did instead of doing it again; required.
	Key string
	// RequestHash fingerprints the request the key came with; a later
	// call with the same key and another fingerprint is ErrKeyReused.
	// Required.
	RequestHash string
	// Window is how long the key holds; zero means
	// DefaultIdempotencyWindow. An older key is taken over by the new
	// call as if it had never been used.
	Window time.Duration
}

// The operations a key can be recorded for, as the key's record names them.
const (
	OpEndpointCreate       = "endpoint.create"
	OpEndpointRotateSecret = "endpoint.rotate_secret"
	OpDeliveryReplay       = "delivery.replay"
	OpDeliveryReplayMany   = "delivery.replay_many"
)

// EndpointCreateParams creates an endpoint, at most once per idempotency
// key when one is given.
type EndpointCreateParams struct {
	Endpoint Endpoint
	// Idempotency, when set, records the key in the create's transaction.
	Idempotency *Idempotency
	// Now dates the key's record; zero means the database's clock.
	Now time.Time
}

// EndpointCreateResult is the endpoint a create made or, for a repeat of
// a keyed one, found.
type EndpointCreateResult struct {
	// Endpoint is the endpoint as created, its fields promoted so that a
	// caller without a key reads the result as the endpoint.
	Endpoint
	// Duplicate is true when the key was used before within its window:
	// Endpoint is the one created then, read now, and nothing was written.
	Duplicate bool
}

// EndpointRotateParams writes an endpoint whose secrets were rotated, at
// most once per idempotency key when one is given.
type EndpointRotateParams struct {
	// Endpoint is the endpoint as rotated, with UpdatedAt as read: it is
	// written as EndpointUpdate writes it, conditional on that version.
	Endpoint Endpoint
	// SecretSHA256 is SecretFingerprint of the new secret, which must be
	// one of Endpoint's secrets without an expiry. Only this is recorded
	// with the key, never the secret.
	SecretSHA256 string
	// PreviousSecretsExpireAt is when the secrets that were active before
	// stop signing; nil when there were none. Recorded, to answer again.
	PreviousSecretsExpireAt *time.Time
	// Idempotency, when set, records the key in the rotation's transaction.
	Idempotency *Idempotency
	// Now dates the key's record; zero means the database's clock.
	Now time.Time
}

// EndpointRotateResult is what a rotation did or, for a repeat of a keyed
// one, did the first time.
type EndpointRotateResult struct {
	// Endpoint is the endpoint as written or, for a repeat, read now.
	Endpoint Endpoint
	// SecretSHA256 and PreviousSecretsExpireAt are those of the first
	// rotation. A repeat finds the new secret on Endpoint by its
	// fingerprint, if it is still there.
	SecretSHA256            string
	PreviousSecretsExpireAt *time.Time
	// Duplicate is true when the key was used before within its window:
	// nothing was written.
	Duplicate bool
}

// DeliveryReplayResult is the delivery a replay replayed.
type DeliveryReplayResult struct {
	// Delivery is the delivery as replayed or, for a repeat, read now
	// (which may be processing, or finished again). Its fields are
	// promoted, as EndpointCreateResult's are.
	Delivery
	// Duplicate is true when the key was used before within its window:
	// nothing was written, no audit record either.
	Duplicate bool
}

// DeliveryReplayManyResult says how many deliveries a bulk replay
// replayed.
type DeliveryReplayManyResult struct {
	// Count is how many were replayed, the first time for a repeat.
	Count int
	// Duplicate is true when the key was used before within its window:
	// nothing was replayed again.
	Duplicate bool
}

// EndpointDeletedReason is the UnsentReason of the deliveries a forced
// delete ended.
const EndpointDeletedReason = "endpoint deleted: it was deleted while this delivery was pending or processing, so no further attempt is made"

// EndpointDeleteParams deletes an endpoint.
type EndpointDeleteParams struct {
	ID string
	// Force deletes an endpoint that still has pending or processing
	// deliveries: each ends failed with EndpointDeletedReason. A
	// processing one's claim is taken away, so the worker holding it can
	// only record its request as a late attempt. Without Force such an
	// endpoint is refused with ErrEndpointBusy.
	Force bool
	// UpdatedAt, when set, is the endpoint's UpdatedAt as the caller read
	// it: the delete applies only if nobody changed the endpoint since,
	// else ErrConflict, as for EndpointUpdate. A caller that decided from
	// what it read (a scoped token may delete only an endpoint of its
	// forms) so deletes the endpoint it decided on.
	UpdatedAt time.Time
	Now       time.Time
}

// EndpointDeleteResult says what a delete found and did.
type EndpointDeleteResult struct {
	// Endpoint is the endpoint as deleted, DeletedAt set.
	Endpoint Endpoint
	// Pending and Processing count the endpoint's deliveries in those
	// states when the delete ran: ended as failed with Force, left as they
	// were (and the delete refused) without.
	Pending, Processing int
}

// MigrateParams says how far to migrate.
type MigrateParams struct {
	// To is the version to stop at; zero means the newest this build has.
	To int
}

// MigrateResult says what a migration run did.
type MigrateResult struct {
	From int
	To   int
	// Applied names each migration applied, as "0002_claim_token".
	Applied []string
}

// Store is the contract every backend implements: the union of the
// roles below, for the assembly that opens it. Each method is one
// transaction: it either happens whole or not at all. Everything else takes
// only the roles it uses, so that, for example, the API cannot claim.
type Store interface {
	Endpoints
	Events
	Claiming
	Deliveries
	Replays
	Fleet
	Access
	ConsoleSessions
	Close() error
}

// LastErrorWindow is how many of an endpoint's newest deliveries
// EndpointLastErrors looks at: enough that a failing endpoint's recent
// failures are among them, few enough that a page of endpoints is a few
// thousand index reads at most.
const LastErrorWindow = 50

// Endpoints is the endpoint registry: what receives deliveries and how.
type Endpoints interface {
	// EndpointCreate inserts p.Endpoint; ID and timestamps are set when
	// empty. With p.Idempotency, the first create with a key inserts the
	// endpoint and records the key in the same transaction; a repeat within
	// the key's window with the same RequestHash writes nothing and returns
	// the first endpoint as it is now, Duplicate set (ErrDeleted if it was
	// deleted since), with another RequestHash ErrKeyReused. Concurrent
	// creates with one key make one endpoint.
	EndpointCreate(ctx context.Context, p EndpointCreateParams) (EndpointCreateResult, error)
	// EndpointRotate is EndpointUpdate of an endpoint whose secrets were
	// rotated, conditional on p.Endpoint.UpdatedAt as EndpointUpdate is. With
	// p.Idempotency the key is recorded in the same transaction with the new
	// secret's fingerprint (never the secret): a repeat within the key's
	// window with the same RequestHash, for the same endpoint, writes
	// nothing and returns the endpoint as it is now with what the first
	// rotation recorded (ErrDeleted if it was deleted since); with another
	// RequestHash, endpoint or operation, ErrKeyReused. A conflicting
	// change is ErrConflict, and the key stays unrecorded. Concurrent
	// rotations with one key rotate once.
	EndpointRotate(ctx context.Context, p EndpointRotateParams) (EndpointRotateResult, error)
	// EndpointGet reads an endpoint, a deleted one too (DeletedAt set).
	EndpointGet(ctx context.Context, id string) (Endpoint, error)
	// EndpointList returns every endpoint that is not deleted, by id.
	EndpointList(ctx context.Context) ([]Endpoint, error)
	// EndpointListPage returns a page of the endpoints that are not
	// deleted, newest (highest id) first.
	EndpointListPage(ctx context.Context, p EndpointListParams) ([]Endpoint, error)
	// EndpointLastErrors returns, for each of ids whose endpoint is failing
	// (FailingSince set), why its newest delivery that fell short did: the
	// delivery's unsent reason if it has one, or else its latest attempt's
	// error if that attempt failed. Only the endpoint's LastErrorWindow
	// newest deliveries are looked at, so the read stays bounded however
	// many it has; an endpoint with nothing to show there is left out, as
	// are healthy, unknown and deleted-but-healthy ones. One read for all
	// of ids. The text is as stored: masking is the caller's.
	EndpointLastErrors(ctx context.Context, ids []string) (map[string]string, error)
	// EndpointDelete soft-deletes an endpoint: DeletedAt is set, it leaves
	// lists and fan-out, and it takes no more changes (ErrDeleted), while
	// its deliveries, attempts and replays stay readable. With pending or
	// processing deliveries it is refused with ErrEndpointBusy unless
	// p.Force, which fails them with EndpointDeletedReason (a processing
	// one's claim is fenced: its worker can only record a late attempt).
	// No event fans out to it once it returns, however the two race, and
	// none of its deliveries can be replayed. Deleting it again is
	// ErrDeleted.
	EndpointDelete(ctx context.Context, p EndpointDeleteParams) (EndpointDeleteResult, error)
	// EndpointUpdate replaces every mutable field of the endpoint with e's.
	// When e.UpdatedAt is set (as read), the update applies only if nobody
	// changed the endpoint since, and otherwise returns ErrConflict: a
	// secret rotation racing another change on another process must not
	// silently drop a secret somebody was already shown. A deleted
	// endpoint is ErrDeleted.
	EndpointUpdate(ctx context.Context, e Endpoint) (Endpoint, error)
}

// Events takes submissions in: an event and, in the same transaction, its deliveries.
type Events interface {
	// EventCreate inserts the event and, in the same transaction, one pending
	// delivery due now for every endpoint that Matches it.
	EventCreate(ctx context.Context, ev Event) (EventCreateResult, error)
	EventGet(ctx context.Context, id string) (Event, error)
}

// Claiming is the worker's side of the state machine: claim due
// deliveries, end each claim fenced on its token, and hear when work is due.
// Nothing outside the worker holds it.
type Claiming interface {
	// DeliveryClaim claims up to Limit claimable deliveries, oldest due first.
	// Each claimed row gets a fresh token. Rows that are not claimable are
	// not written.
	DeliveryClaim(ctx context.Context, p DeliveryClaimParams) ([]Claim, error)
	// DeliveryComplete records the owner's attempt and moves the delivery,
	// fenced on the token. On ErrClaimLost nothing is written.
	DeliveryComplete(ctx context.Context, p DeliveryCompleteParams) (Delivery, Attempt, error)
	// DeliveryCompleteBatch is DeliveryComplete for many claims in one
	// transaction, each entry fenced on its own token. Results come in the
	// order of ps, each with its own Err. The error returned is the
	// transaction's: when it is set, nothing at all was written.
	DeliveryCompleteBatch(ctx context.Context, ps []DeliveryCompleteParams) ([]DeliveryCompleteResult, error)
	// DeliveryRelease gives a claim back unspent, fenced on the token:
	// pending, due after p.Delay, no counter changed, no attempt written,
	// UnsentReason set when p.Reason is. On ErrClaimLost nothing is written.
	DeliveryRelease(ctx context.Context, p DeliveryReleaseParams) (Delivery, error)
	// DeliveryFail ends a claim as failed without a request, fenced on the
	// token: failed, completed now, UnsentReason set, no counter changed,
	// no attempt written; an ordered endpoint's next delivery may then go.
	// On ErrClaimLost nothing is written. Replay puts it back as it does
	// any failed delivery.
	DeliveryFail(ctx context.Context, p DeliveryFailParams) (Delivery, error)
	// AttemptRecordLate records a superseded worker's request: next lifetime
	// number, attempts raised, late, nothing else changed.
	AttemptRecordLate(ctx context.Context, p AttemptRecordLateParams) (Attempt, error)
	// Wakeups subscribes to wake-ups until ctx ends: the channel receives a
	// value soon after a write commits that made a delivery claimable now
	// (an event created, a claim released, a delivery replayed, held
	// deliveries let go by enabling their endpoint or by an ordered
	// endpoint's turn passing on), and, for a write of this Store that made
	// one due later (a retry's backoff, a release with a delay, a rate
	// limit's deferral), when that time comes. Values are coalesced: one
	// stands for every wake-up since the last was received. Nothing is
	// promised beyond that: a claimer still polls, for leases that expire
	// and for writes whose wake-up it could not hear. A backend that serves
	// several processes wakes the claimers of every process on the
	// database for writes that make a delivery due now.
	Wakeups(ctx context.Context) <-chan struct{}
}

// Deliveries reads deliveries and their history; it changes nothing.
type Deliveries interface {
	DeliveryGet(ctx context.Context, id string) (Delivery, error)
	DeliveryList(ctx context.Context, p DeliveryListParams) ([]Delivery, error)
	DeliveryStats(ctx context.Context, now time.Time) (DeliveryStats, error)
	// AttemptList returns a delivery's attempts in number order.
	AttemptList(ctx context.Context, deliveryID string) ([]Attempt, error)
	// AttemptLatest returns, for each of deliveryIDs that has attempts, its
	// attempt of the highest number, keyed by delivery id; a delivery
	// with none, or that does not exist, is left out. One read serves a
	// whole page of a list.
	AttemptLatest(ctx context.Context, deliveryIDs []string) (map[string]Attempt, error)
	// ReplayList returns a delivery's replay audit records, oldest first.
	ReplayList(ctx context.Context, deliveryID string) ([]Replay, error)
}

// Replays is the operator's deliberate act: a terminal delivery back to
// pending, with an audit record.
type Replays interface {
	// DeliveryReplay moves a terminal delivery back to pending, due now, with
	// cycle_attempts 0 and attempts kept, and writes the audit record. A
	// delivery of a deleted endpoint is refused with ErrDeleted. With
	// p.Idempotency, a repeat within the key's window with the same
	// RequestHash, for the same delivery, writes nothing and returns the
	// delivery as it is now, Duplicate set; with another RequestHash,
	// delivery or operation, ErrKeyReused. A refused replay records no key.
	// Concurrent replays with one key replay once.
	DeliveryReplay(ctx context.Context, p DeliveryReplayParams) (DeliveryReplayResult, error)
	// DeliveryReplayMany replays terminal deliveries matching a filter and
	// returns how many it replayed, leaving out those of deleted endpoints.
	// With p.Idempotency, a repeat within the key's window with the same
	// RequestHash replays nothing and returns the first count, Duplicate
	// set; with another, ErrKeyReused. Concurrent bulk replays with one key
	// replay once.
	DeliveryReplayMany(ctx context.Context, p DeliveryReplayManyParams) (DeliveryReplayManyResult, error)
}

// Fleet is what the processes sharing one database keep there: who is
// live, which schema, and how long finished work is kept.
type Fleet interface {
	// WorkerHeartbeat registers w or refreshes its heartbeat.
	WorkerHeartbeat(ctx context.Context, w Worker) error
	// WorkerList returns workers whose heartbeat is at or after since.
	WorkerList(ctx context.Context, since time.Time) ([]Worker, error)
	WorkerDeregister(ctx context.Context, id string) error
	// DeliveryPrune removes up to p.Limit delivered deliveries completed
	// before p.CompletedBefore, their attempts and replay records, and the
	// events left with no delivery, and returns how many deliveries it
	// removed. Failed deliveries are kept: they wait for an operator.
	DeliveryPrune(ctx context.Context, p DeliveryPruneParams) (int, error)
	// Migrate applies the embedded migrations up to p.To (zero: all), each in
	// its own transaction with its version recorded. It returns
	// ErrSchemaUnknown when the database is already past what this build has.
	Migrate(ctx context.Context, p MigrateParams) (MigrateResult, error)
	// SchemaVersion is the migration version the database is at; 0 when
	// nothing has been applied.
	SchemaVersion(ctx context.Context) (int, error)
}
