package storage

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hymical/hymical/sdk/boundtext"
)

// NewID mints an id written prefix + "_" + 32 lowercase hex digits. The
// first 12 digits are the milliseconds since the Unix epoch, so ids sort by
// creation time and serve as list cursors; the other 20 are random.
func NewID(prefix string) string {
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	if _, err := rand.Read(b[6:]); err != nil {
		// crypto/rand does not fail on supported platforms; if it ever
		// does, an id that is not unique would corrupt data.
		panic(fmt.Sprintf("storage: crypto/rand failed: %v", err))
	}
	return prefix + "_" + hex.EncodeToString(b[:])
}

// BoundError makes error text safe to store: valid UTF-8, no NUL bytes, and
// at most MaxErrorBytes.
func BoundError(s string) string { return boundtext.Bound(s, MaxErrorBytes) }

// Validate checks the claim parameters.
func (p DeliveryClaimParams) Validate() error {
	if p.Limit < 1 {
		return fmt.Errorf("%w: claim limit must be at least 1, got %d", ErrInvalid, p.Limit)
	}
	if p.Lease <= 0 {
		return fmt.Errorf("%w: claim lease must be positive, got %s", ErrInvalid, p.Lease)
	}
	if p.Share != nil {
		if p.Share.Default < 0 {
			return fmt.Errorf("%w: claim share default room must not be negative, got %d", ErrInvalid, p.Share.Default)
		}
		for id, r := range p.Share.Room {
			if r < 0 {
				return fmt.Errorf("%w: claim share room of endpoint %s must not be negative, got %d", ErrInvalid, id, r)
			}
		}
		for id, r := range p.Share.TopUp {
			if r < 0 {
				return fmt.Errorf("%w: claim share top-up of endpoint %s must not be negative, got %d", ErrInvalid, id, r)
			}
		}
	}
	return nil
}

func validateAttempt(deliveryID, token string, outcome OutcomeKind, httpStatus int) error {
	if deliveryID == "" {
		return fmt.Errorf("%w: delivery id is required", ErrInvalid)
	}
	if token == "" {
		return fmt.Errorf("%w: claim token is required", ErrInvalid)
	}
	if !outcome.Valid() {
		return fmt.Errorf("%w: outcome %q is not delivered, retryable or permanent", ErrInvalid, outcome)
	}
	if httpStatus != 0 && (httpStatus < 100 || httpStatus > 599) {
		return fmt.Errorf("%w: HTTP status %d is outside 100-599", ErrInvalid, httpStatus)
	}
	return nil
}

// Validate checks the completion parameters.
func (p DeliveryCompleteParams) Validate() error {
	if err := validateAttempt(p.DeliveryID, p.Token, p.Outcome, p.HTTPStatus); err != nil {
		return err
	}
	if p.RetryDelay < 0 {
		return fmt.Errorf("%w: retry delay must not be negative, got %s", ErrInvalid, p.RetryDelay)
	}
	if p.MaxCycleAttempts < 0 {
		return fmt.Errorf("%w: retry allowance must not be negative, got %d", ErrInvalid, p.MaxCycleAttempts)
	}
	return nil
}

// MaxCompleteBatch is the most entries one DeliveryCompleteBatch takes.
const MaxCompleteBatch = 1000

// ValidateCompleteBatch checks every entry of a batch and returns one error
// per entry (nil for a good one). A delivery named twice is refused from its
// second entry on: one claim ends once, and two outcomes for it in one
// transaction could only be a caller's mistake.
func ValidateCompleteBatch(ps []DeliveryCompleteParams) ([]error, error) {
	if len(ps) > MaxCompleteBatch {
		return nil, fmt.Errorf("%w: a completion batch holds at most %d entries, got %d: split it", ErrInvalid, MaxCompleteBatch, len(ps))
	}
	errs := make([]error, len(ps))
	seen := make(map[string]struct{}, len(ps))
	for i, p := range ps {
		if err := p.Validate(); err != nil {
			errs[i] = err
			continue
		}
		if _, dup := seen[p.DeliveryID]; dup {
			errs[i] = fmt.Errorf("%w: delivery %s appears more than once in one completion batch", ErrInvalid, p.DeliveryID)
			continue
		}
		seen[p.DeliveryID] = struct{}{}
	}
	return errs, nil
}

// Allowance is the retry allowance in force: MaxCycleAttempts or the default.
func (p DeliveryCompleteParams) Allowance() int {
	if p.MaxCycleAttempts == 0 {
		return DefaultMaxCycleAttempts
	}
	return p.MaxCycleAttempts
}

// Validate checks the late attempt parameters.
func (p AttemptRecordLateParams) Validate() error {
	return validateAttempt(p.DeliveryID, p.Token, p.Outcome, p.HTTPStatus)
}

// Validate checks the release parameters.
func (p DeliveryReleaseParams) Validate() error {
	if p.DeliveryID == "" || p.Token == "" {
		return fmt.Errorf("%w: delivery id and claim token are required", ErrInvalid)
	}
	if p.Delay < 0 {
		return fmt.Errorf("%w: release delay must not be negative, got %s", ErrInvalid, p.Delay)
	}
	return nil
}

// Validate checks the parameters of a failure without a request.
func (p DeliveryFailParams) Validate() error {
	if p.DeliveryID == "" || p.Token == "" {
		return fmt.Errorf("%w: delivery id and claim token are required", ErrInvalid)
	}
	if strings.TrimSpace(p.Reason) == "" {
		return fmt.Errorf("%w: failing a delivery without a request needs a reason, for the operator who replays it", ErrInvalid)
	}
	return nil
}

// Validate checks the replay parameters.
func (p DeliveryReplayParams) Validate() error {
	if err := validKey(p.Idempotency); err != nil {
		return err
	}
	if p.DeliveryID == "" {
		return fmt.Errorf("%w: delivery id is required", ErrInvalid)
	}
	if strings.TrimSpace(p.Actor) == "" {
		return fmt.Errorf("%w: replay needs an actor for the audit record", ErrInvalid)
	}
	return nil
}

// Validate checks the bulk replay parameters.
func (p DeliveryReplayManyParams) Validate() error {
	if err := validKey(p.Idempotency); err != nil {
		return err
	}
	if !p.Filter.State.Terminal() {
		return fmt.Errorf("%w: bulk replay needs state delivered or failed, got %q", ErrInvalid, p.Filter.State)
	}
	if strings.TrimSpace(p.Actor) == "" {
		return fmt.Errorf("%w: replay needs an actor for the audit record", ErrInvalid)
	}
	if p.Limit < 0 {
		return fmt.Errorf("%w: limit must not be negative", ErrInvalid)
	}
	return nil
}

// Validate checks the prune parameters.
func (p DeliveryPruneParams) Validate() error {
	if p.CompletedBefore.IsZero() {
		return fmt.Errorf("%w: prune needs a cutoff time", ErrInvalid)
	}
	if p.Limit < 0 {
		return fmt.Errorf("%w: limit must not be negative", ErrInvalid)
	}
	return nil
}

// BatchSize is the most deliveries one prune call removes.
func (p DeliveryPruneParams) BatchSize() int {
	if p.Limit == 0 {
		return 1000
	}
	return p.Limit
}

// PageSize is the list page size in force.
func (p DeliveryListParams) PageSize() int {
	if p.Limit <= 0 {
		return 100
	}
	return min(p.Limit, 1000)
}

// PageSize is the endpoint page size in force.
func (p EndpointListParams) PageSize() int {
	if p.Limit <= 0 {
		return 100
	}
	return min(p.Limit, 1000)
}

// Validate checks an idempotency key and its request's fingerprint.
func (o Idempotency) Validate() error {
	if o.Key == "" {
		return fmt.Errorf("%w: a keyed operation needs an idempotency key; without one leave Idempotency nil", ErrInvalid)
	}
	if o.RequestHash == "" {
		return fmt.Errorf("%w: an idempotency key needs the fingerprint of its request", ErrInvalid)
	}
	if o.Window < 0 {
		return fmt.Errorf("%w: idempotency window must not be negative", ErrInvalid)
	}
	return nil
}

// KeyWindow is the idempotency window in force.
func (o Idempotency) KeyWindow() time.Duration {
	if o.Window == 0 {
		return DefaultIdempotencyWindow
	}
	return o.Window
}

// validKey checks an optional idempotency key.
func validKey(k *Idempotency) error {
	if k == nil {
		return nil
	}
	return k.Validate()
}

// Validate checks a create before anything is written.
func (p EndpointCreateParams) Validate() error {
	if err := validKey(p.Idempotency); err != nil {
		return err
	}
	return p.Endpoint.Validate()
}

// KeyUse is what a repeat of an idempotency key is checked against: the
// operation (one of the Op* names), its target (the endpoint or delivery
// in the request's path; "" when there is none) and the request's
// fingerprint.
type KeyUse struct{ Operation, Target, RequestHash string }

// Repeat checks again, a use of a key held within its window, against
// first, the use that recorded it: anything but the same operation on the
// same target with the same request is ErrKeyReused.
func (first KeyUse) Repeat(again KeyUse) error {
	if first != again {
		return ErrKeyReused
	}
	return nil
}

// SecretFingerprint is the SHA-256 of a secret's value, in hex: what a
// keyed rotation records to find its secret again, in place of the secret.
func SecretFingerprint(s Secret) string {
	sum := sha256.Sum256([]byte(s.value))
	return hex.EncodeToString(sum[:])
}

// Validate checks a rotation before anything is written: the fingerprint
// must be that of a secret of the endpoint that signs from now on, so
// what a key records can only ever find that secret.
func (p EndpointRotateParams) Validate() error {
	if err := validKey(p.Idempotency); err != nil {
		return err
	}
	if p.Endpoint.ID == "" {
		return fmt.Errorf("%w: endpoint id is required", ErrInvalid)
	}
	if err := p.Endpoint.Validate(); err != nil {
		return err
	}
	for _, s := range p.Endpoint.Secrets {
		if s.ExpiresAt == nil && SecretFingerprint(s) == p.SecretSHA256 {
			return nil
		}
	}
	return fmt.Errorf("%w: secret_sha256 must be SecretFingerprint of the endpoint's new secret, one without an expiry", ErrInvalid)
}

// Validate checks the delete parameters.
func (p EndpointDeleteParams) Validate() error {
	if p.ID == "" {
		return fmt.Errorf("%w: endpoint id is required", ErrInvalid)
	}
	return nil
}

// BatchSize is the bulk replay cap in force.
func (p DeliveryReplayManyParams) BatchSize() int {
	if p.Limit == 0 {
		return 1000
	}
	return p.Limit
}

// Validate checks an endpoint before it is written.
func (e Endpoint) Validate() error {
	if strings.TrimSpace(e.Transport) == "" {
		return fmt.Errorf("%w: endpoint needs a transport", ErrInvalid)
	}
	if len(e.Secrets) == 0 {
		return fmt.Errorf("%w: endpoint needs at least one signing secret", ErrInvalid)
	}
	for _, s := range e.Secrets {
		if s.Reveal() == "" {
			return fmt.Errorf("%w: endpoint signing secret is empty", ErrInvalid)
		}
	}
	switch {
	case math.IsNaN(e.RateLimit) || math.IsInf(e.RateLimit, 0) || e.RateLimit < 0:
		return fmt.Errorf("%w: endpoint rate limit %v must be 0 (none) or a positive number of sends per second", ErrInvalid, e.RateLimit)
	case e.RateLimit > MaxRateLimit:
		return fmt.Errorf("%w: endpoint rate limit %v is above the most this server spaces sends for, %d per second; use 0 for no limit", ErrInvalid, e.RateLimit, MaxRateLimit)
	case e.RateBurst < 0 || e.RateBurst > MaxRateBurst:
		return fmt.Errorf("%w: endpoint rate burst %d must be between 0 (the rate, rounded up) and %d", ErrInvalid, e.RateBurst, MaxRateBurst)
	case e.RateBurst > 0 && e.RateLimit == 0:
		return fmt.Errorf("%w: endpoint rate burst %d needs a rate limit", ErrInvalid, e.RateBurst)
	case e.MaxInFlight < 0 || e.MaxInFlight > MaxInFlightCap:
		return fmt.Errorf("%w: endpoint max in flight %d must be between 0 (no cap) and %d", ErrInvalid, e.MaxInFlight, MaxInFlightCap)
	case len(e.RetrySchedule) > MaxRetrySchedule:
		return fmt.Errorf("%w: endpoint retry schedule has %d delays, at most %d are allowed", ErrInvalid, len(e.RetrySchedule), MaxRetrySchedule)
	}
	for i, d := range e.RetrySchedule {
		if d < time.Millisecond {
			return fmt.Errorf("%w: endpoint retry delay %d is %s, want at least 1ms", ErrInvalid, i+1, d)
		}
	}
	if err := validateHeaders(e.Headers); err != nil {
		return err
	}
	if e.DisabledAt != nil && e.DisabledReason != "" && !e.DisabledReason.Valid() {
		return fmt.Errorf("%w: endpoint disabled reason %q is not %s, %s or %s", ErrInvalid, e.DisabledReason,
			DisabledByOperator, DisabledGone, DisabledFailing)
	}
	return nil
}

// Bounds of the endpoint controls the store accepts; the server may set
// tighter ones.
const (
	MaxRateLimit     = 1_000_000
	MaxRateBurst     = 1_000_000
	MaxInFlightCap   = 100_000
	MaxRetrySchedule = 100
)

// NormalizeControls is how every store writes an endpoint's state fields: a
// disabled endpoint without a reason was disabled by an operator, an
// enabled one has none.
func (e *Endpoint) NormalizeControls() {
	switch {
	case e.DisabledAt == nil:
		e.DisabledReason = ""
	case e.DisabledReason == "":
		e.DisabledReason = DisabledByOperator
	}
}

// EncodeRetrySchedule is the one encoding of a retry schedule in a column:
// a JSON array of whole microseconds.
func EncodeRetrySchedule(delays []time.Duration) string {
	us := make([]int64, len(delays))
	for i, d := range delays {
		us[i] = d.Microseconds()
	}
	b, _ := json.Marshal(us) // an []int64 always marshals
	return string(b)
}

// DecodeRetrySchedule reads what EncodeRetrySchedule wrote; nil for none.
func DecodeRetrySchedule(s string) ([]time.Duration, error) {
	var us []int64
	if err := json.Unmarshal([]byte(s), &us); err != nil {
		return nil, fmt.Errorf("decode retry schedule: %w", err)
	}
	if len(us) == 0 {
		return nil, nil
	}
	out := make([]time.Duration, len(us))
	for i, v := range us {
		out[i] = time.Duration(v) * time.Microsecond
	}
	return out, nil
}

// FanOut picks the endpoints an event goes to: the one it names, or every
// one whose subscriptions match. endpoints must hold every endpoint (not
// deleted) that can match: at least those FanOutKeys leads to.
func FanOut(endpoints []Endpoint, ev Event) ([]Endpoint, error) {
	if ev.EndpointID != "" {
		for _, e := range endpoints {
			if e.ID == ev.EndpointID {
				return []Endpoint{e}, nil
			}
		}
		return nil, fmt.Errorf("%w: the event is addressed to endpoint %s, which does not exist; create the endpoint or leave the event unaddressed",
			ErrInvalid, ev.EndpointID)
	}
	var out []Endpoint
	for _, e := range endpoints {
		if e.Matches(ev.Type, ev.FormID) {
			out = append(out, e)
		}
	}
	return out, nil
}

// FanOutKeys says which endpoints can match a batch of events, so a store
// reads only those for FanOut: the endpoints listed under one of forms,
// those of every form (no form ids), and the endpoints named in addressed.
// An event addressed to an endpoint goes there alone, so its form is not
// looked up. An event with no form id contributes "": only an endpoint
// listing "" itself is found under it, as Matches would have it. Each key
// appears once; neither list is nil.
func FanOutKeys(events []Event) (forms, addressed []string) {
	forms, addressed = []string{}, []string{}
	for _, ev := range events {
		if ev.EndpointID != "" {
			if !contains(addressed, ev.EndpointID) {
				addressed = append(addressed, ev.EndpointID)
			}
			continue
		}
		if !contains(forms, ev.FormID) {
			forms = append(forms, ev.FormID)
		}
	}
	return forms, addressed
}

// Validate checks an event before it is written.
func (ev Event) Validate() error {
	if strings.TrimSpace(ev.Type) == "" {
		return fmt.Errorf("%w: event needs a type", ErrInvalid)
	}
	if !json.Valid(ev.Payload) {
		// Say why: a payload nested deeper than encoding/json's limit of
		// 10000 levels is well-formed but not valid here.
		why := "it does not parse"
		var syn *json.SyntaxError
		if errors.As(json.Unmarshal(ev.Payload, new(json.RawMessage)), &syn) {
			why = fmt.Sprintf("%s, at byte %d of the payload", strings.TrimPrefix(syn.Error(), "json: "), syn.Offset)
		}
		return fmt.Errorf("%w: event payload is not valid JSON (%s)", ErrInvalid, why)
	}
	return nil
}

type storedSecret struct {
	Value     string     `json:"value"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// EncodeSecrets is the one place secret values are serialised, for the
// endpoint's secrets column.
func EncodeSecrets(secrets []Secret) (string, error) {
	out := make([]storedSecret, len(secrets))
	for i, s := range secrets {
		out[i] = storedSecret{Value: s.value, ExpiresAt: s.ExpiresAt}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

// DecodeSecrets reads what EncodeSecrets wrote.
func DecodeSecrets(text string) ([]Secret, error) {
	var in []storedSecret
	if err := json.Unmarshal([]byte(text), &in); err != nil {
		return nil, fmt.Errorf("decode endpoint secrets: %w", err)
	}
	out := make([]Secret, len(in))
	for i, s := range in {
		out[i] = Secret{value: s.Value, ExpiresAt: s.ExpiresAt}
	}
	return out, nil
}
