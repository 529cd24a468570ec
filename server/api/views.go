package api

import (
	"time"

	"github.com/hymical/hymical/internal/redact"
	"github.com/hymical/hymical/sdk/webhook"

	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/storage"
)

// The JSON the API answers with. Each view is built from a storage type by
// one function, so what a field means is decided in one place, and no view
// has a field that could carry a secret value except the one-time Secret of
// endpointCreated.

type endpointView struct {
	ID          string            `json:"id"`
	URL         string            `json:"url"`
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
	SignatureScheme webhook.Scheme `json:"signature_scheme"`
	// Secrets says how many secrets sign and until when, never their values.
	Secrets []secretView `json:"secrets"`
	// PublicKeys, for a v1a endpoint, is the whpk_ public key of every
	// active key, in the order of Secrets: what receivers verify with. A
	// public key is no secret, so every view shows them.
	PublicKeys []string  `json:"public_keys,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

type secretView struct {
	// ExpiresAt is null for the current secret and set for a rotated-out
	// one still signing through its grace period.
	ExpiresAt *time.Time `json:"expires_at"`
	// PublicKey is the whpk_ key of a v1a secret.
	PublicKey string `json:"public_key,omitempty"`
}

// endpointCreated is the answer to creation and rotation: the only
// responses that carry a secret value.
type endpointCreated struct {
	endpointView
	Secret string `json:"secret"`
	// PreviousSecretsExpireAt is set on rotation: when the secrets that
	// were active before stop signing.
	PreviousSecretsExpireAt *time.Time `json:"previous_secrets_expire_at,omitempty"`
}

func viewEndpoint(e storage.Endpoint, now time.Time) endpointView {
	v := endpointView{
		ID: e.ID, URL: e.URL, Transport: e.Transport,
		// Config is shown, but a password in a broker URL or a
		// secret-named setting is not.
		EventTypes: nonNil(e.EventTypes), FormIDs: nonNil(e.FormIDs), Config: redact.Map(e.Config),
		Description: e.Description, Disabled: e.DisabledAt != nil, DisabledAt: utcPtr(e.DisabledAt),
		DisabledReason: e.DisabledReason, FailingSince: utcPtr(e.FailingSince),
		RateLimit: e.RateLimit, RateBurst: e.RateBurst, MaxInFlight: e.MaxInFlight, Ordered: e.Ordered,
		RetrySchedule: durations(e.RetrySchedule),
		Secrets:       []secretView{},
		CreatedAt:     e.CreatedAt.UTC(), UpdatedAt: e.UpdatedAt.UTC(),
	}
	if v.Config == nil {
		v.Config = map[string]string{}
	}
	v.SignatureScheme = endpoint.Scheme(e)
	for _, s := range e.Secrets {
		if !s.ActiveAt(now) {
			continue
		}
		sv := secretView{ExpiresAt: utcPtr(s.ExpiresAt)}
		if webhook.KeyScheme(s.Reveal()) == webhook.SchemeV1a {
			// A key that does not parse shows no public key; the worker
			// names the problem in the attempt's error.
			if pk, err := webhook.PublicKey(s.Reveal()); err == nil {
				sv.PublicKey = pk
				v.PublicKeys = append(v.PublicKeys, pk)
			}
		}
		v.Secrets = append(v.Secrets, sv)
	}
	return v
}

type deliveryView struct {
	ID            string                `json:"id"`
	EndpointID    string                `json:"endpoint_id"`
	EventID       string                `json:"event_id"`
	State         storage.DeliveryState `json:"state"`
	Attempts      int                   `json:"attempts"`
	CycleAttempts int                   `json:"cycle_attempts"`
	NextAttemptAt time.Time             `json:"next_attempt_at"`
	// LeaseExpiresAt is when the current claim ends; null unless processing.
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	// Held is true for a pending delivery held back: its endpoint is
	// disabled, or it waits its turn at an ordered endpoint.
	Held        bool       `json:"held"`
	CreatedAt   time.Time  `json:"created_at"`
	CompletedAt *time.Time `json:"completed_at"`
}

func viewDelivery(d storage.Delivery) deliveryView {
	return deliveryView{
		ID: d.ID, EndpointID: d.EndpointID, EventID: d.EventID, State: d.State,
		Attempts: d.Attempts, CycleAttempts: d.CycleAttempts,
		NextAttemptAt:  d.NextAttemptAt.UTC(),
		LeaseExpiresAt: utcPtr(d.ClaimExpiresAt), Held: d.Held,
		CreatedAt: d.CreatedAt.UTC(), CompletedAt: utcPtr(d.CompletedAt),
	}
}

// deliveryDetail is one delivery with its event and its attempt history.
type deliveryDetail struct {
	deliveryView
	Event       eventView     `json:"event"`
	AttemptList []attemptView `json:"attempt_history"`
}

type eventView struct {
	ID           string    `json:"id"`
	Type         string    `json:"type"`
	FormID       string    `json:"form_id,omitempty"`
	SubmissionID string    `json:"submission_id,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
}

func viewEvent(ev storage.Event) eventView {
	return eventView{ID: ev.ID, Type: ev.Type, FormID: ev.FormID, SubmissionID: ev.SubmissionID, CreatedAt: ev.CreatedAt.UTC()}
}

type attemptView struct {
	Number  int                 `json:"number"`
	Outcome storage.OutcomeKind `json:"outcome"`
	// HTTPStatus is null when the transport had no status to report.
	HTTPStatus *int      `json:"http_status"`
	Error      string    `json:"error"`
	Late       bool      `json:"late"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	TraceID    string    `json:"trace_id"`
}

func viewAttempts(as []storage.Attempt) []attemptView {
	out := make([]attemptView, 0, len(as))
	for _, a := range as {
		v := attemptView{
			Number: a.Number, Outcome: a.Outcome, Error: a.Error, Late: a.Late,
			StartedAt: a.StartedAt.UTC(), FinishedAt: a.FinishedAt.UTC(), TraceID: a.TraceID,
		}
		if a.HTTPStatus != 0 {
			status := a.HTTPStatus
			v.HTTPStatus = &status
		}
		out = append(out, v)
	}
	return out
}

type replayView struct {
	Actor         string                `json:"actor"`
	PreviousState storage.DeliveryState `json:"previous_state"`
	ReplayedAt    time.Time             `json:"replayed_at"`
}

func viewReplays(rs []storage.Replay) []replayView {
	out := make([]replayView, 0, len(rs))
	for _, r := range rs {
		out = append(out, replayView{Actor: r.Actor, PreviousState: r.PreviousState, ReplayedAt: r.ReplayedAt.UTC()})
	}
	return out
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
