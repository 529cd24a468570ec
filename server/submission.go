package server

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hymical/hymical/storage"
)

// EventTypeSubmissionReceived is the type of the event every form submission makes.
const EventTypeSubmissionReceived = "submission.received"

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

// SubmissionEvent builds the submission.received event for a form
// submission, with a fresh submission id. data must be a JSON object.
func SubmissionEvent(formID string, data json.RawMessage, now time.Time) (storage.Event, error) {
	if formID == "" {
		return storage.Event{}, fmt.Errorf("%w: form id is required", storage.ErrInvalid)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return storage.Event{}, fmt.Errorf("%w: submission data must be a JSON object", storage.ErrInvalid)
	}
	subID := storage.NewID("sub")
	body, err := json.Marshal(submissionBody{
		Type:       EventTypeSubmissionReceived,
		Submission: submissionData{ID: subID, FormID: formID, Data: data, CreatedAt: now.UTC().Truncate(time.Millisecond)},
	})
	if err != nil {
		return storage.Event{}, fmt.Errorf("encode submission: %w", err)
	}
	return storage.Event{
		Type:         EventTypeSubmissionReceived,
		FormID:       formID,
		SubmissionID: subID,
		Payload:      body,
		CreatedAt:    now,
	}, nil
}
