// Package event builds the events the server itself makes: the signed
// submission.received payload every form submission becomes, and the
// hymical.* notifications it sends to an operator endpoint. It owns the
// event types and their bodies, not their delivery.
package event

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hymical/hymical/internal/redact"
	"github.com/hymical/hymical/storage"
)

// TypePrefix starts the type of every event the server itself makes;
// the API refuses it on events from outside.
const TypePrefix = "hymical."

// TypeEndpointDisabled is the type of the event an operator endpoint
// gets when the server disables an endpoint on its own.
const TypeEndpointDisabled = TypePrefix + "endpoint.disabled"

// TypeSubmissionReceived is the type of the event every form submission makes.
const TypeSubmissionReceived = "submission.received"

// submissionBody is the signed payload receivers get. Its submission.id is
// what they dedupe on: it is minted once here and stays the same across every
// attempt and replay, because every delivery of the event carries these bytes.
type submissionBody struct {
	Type       string         `json:"type"`
	Submission submissionData `json:"submission"`
}

type submissionData struct {
	ID        string          `json:"id"`
	FormID    string          `json:"form_id"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

// Submission builds the submission.received event for a form
// submission, with a fresh submission id. data must be a JSON object.
func Submission(formID string, data json.RawMessage, now time.Time) (storage.Event, error) {
	if formID == "" {
		return storage.Event{}, fmt.Errorf("%w: form id is required", storage.ErrInvalid)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return storage.Event{}, fmt.Errorf("%w: submission data must be a JSON object", storage.ErrInvalid)
	}
	subID := storage.NewID("sub")
	body, err := json.Marshal(submissionBody{
		Type:       TypeSubmissionReceived,
		Submission: submissionData{ID: subID, FormID: formID, Data: data, CreatedAt: now.UTC().Truncate(time.Millisecond)},
	})
	if err != nil {
		return storage.Event{}, fmt.Errorf("encode submission: %w", err)
	}
	return storage.Event{
		Type:         TypeSubmissionReceived,
		FormID:       formID,
		SubmissionID: subID,
		Payload:      body,
		CreatedAt:    now,
	}, nil
}

// endpointDisabledBody is the payload of a hymical.endpoint.disabled event.
// It names the endpoint and why; it never carries its secrets or config.
type endpointDisabledBody struct {
	Type     string           `json:"type"`
	Endpoint disabledEndpoint `json:"endpoint"`
}

type disabledEndpoint struct {
	ID           string     `json:"id"`
	URL          string     `json:"url"`
	Reason       string     `json:"reason"`
	DisabledAt   time.Time  `json:"disabled_at"`
	FailingSince *time.Time `json:"failing_since,omitempty"`
}

// EndpointDisabled builds the hymical.endpoint.disabled event that tells
// the operator endpoint about e, which the server has just disabled. Its
// idempotency key is the endpoint and the moment it was disabled, so a
// retried notification is not sent twice.
func EndpointDisabled(e storage.Endpoint, operatorEndpoint string) (storage.Event, error) {
	body, err := json.Marshal(endpointDisabledBody{
		Type: TypeEndpointDisabled,
		// A token in the URL's query stays with the endpoint.
		Endpoint: disabledEndpoint{ID: e.ID, URL: redact.URL(e.URL), Reason: e.DisabledReason,
			DisabledAt: e.DisabledAt.UTC(), FailingSince: e.FailingSince},
	})
	if err != nil {
		return storage.Event{}, fmt.Errorf("encode notification: %w", err)
	}
	return storage.Event{
		Type:           TypeEndpointDisabled,
		EndpointID:     operatorEndpoint,
		Payload:        body,
		IdempotencyKey: "endpoint-disabled/" + e.ID + "/" + e.DisabledAt.UTC().Format(time.RFC3339Nano),
	}, nil
}
