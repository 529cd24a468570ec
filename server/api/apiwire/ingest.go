package apiwire

import "encoding/json"

// IngestResult answers POST /v1/forms/{form_id}/submissions and
// POST /v1/events: 202 for a new event, 200 for a repeat of an
// Idempotency-Key.
type IngestResult struct {
	// SubmissionID is what receivers dedupe on; left out for a generic
	// event.
	SubmissionID string `json:"submission_id,omitempty"`
	EventID      string `json:"event_id"`
	// Deliveries are the ids of the deliveries the event fanned out to,
	// sorted.
	Deliveries []string `json:"deliveries"`
}

// EventRequest is the body of POST /v1/events. (A submission's body is the
// form's data itself, any JSON object.)
type EventRequest struct {
	Type    string          `json:"type"`
	FormID  string          `json:"form_id,omitempty"`
	Payload json.RawMessage `json:"payload"`
}

// Status answers the probes, GET /healthz and GET /readyz.
type Status struct {
	Status string `json:"status"`
}

// EventType is one entry of GET /v1/event-types: a type the server
// itself emits, what it means, and a body of that type as receivers get
// it.
type EventType struct {
	Type        string          `json:"type"`
	Description string          `json:"description"`
	Example     json.RawMessage `json:"example"`
}

// EventTypeList answers GET /v1/event-types. Types a caller posts through
// POST /v1/events are the caller's own and are not listed.
type EventTypeList struct {
	EventTypes []EventType `json:"event_types"`
}
