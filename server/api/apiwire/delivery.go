package apiwire

import "time"

// DeliveryState is where a delivery stands: the values of the store's
// state machine.
type DeliveryState string

// The delivery states.
const (
	StatePending    DeliveryState = "pending"
	StateProcessing DeliveryState = "processing"
	StateDelivered  DeliveryState = "delivered"
	StateFailed     DeliveryState = "failed"
)

// Outcome is what one attempt produced, as its transport reported it.
type Outcome string

// The attempt outcomes.
const (
	OutcomeDelivered Outcome = "delivered"
	OutcomeRetryable Outcome = "retryable"
	OutcomePermanent Outcome = "permanent"
)

// Delivery is one delivery of one event to one endpoint, as the list,
// replay and (inside DeliveryDetail) GET /v1/deliveries/{id} answer it.
type Delivery struct {
	ID            string        `json:"id"`
	EndpointID    string        `json:"endpoint_id"`
	EventID       string        `json:"event_id"`
	State         DeliveryState `json:"state"`
	Attempts      int           `json:"attempts"`
	CycleAttempts int           `json:"cycle_attempts"`
	NextAttemptAt time.Time     `json:"next_attempt_at"`
	// LeaseExpiresAt is when the current claim ends; null unless processing.
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	// Held is true for a pending delivery held back: its endpoint is
	// disabled, or it waits its turn at an ordered endpoint.
	Held bool `json:"held"`
	// UnsentReason says why a claim of the delivery ended without a
	// request, so with no attempt recorded: its transport plugin was not
	// running (the delivery waits, due again shortly), or the transport is
	// unknown, refused the target before sending, or the message could not
	// be signed (the delivery failed; fix that and replay it). Empty when
	// nothing was left unsent; an attempt or a replay clears it.
	UnsentReason string     `json:"unsent_reason"`
	CreatedAt    time.Time  `json:"created_at"`
	CompletedAt  *time.Time `json:"completed_at"`
}

// DeliveryDetail answers GET /v1/deliveries/{id}: the delivery with its
// event and its attempt history.
type DeliveryDetail struct {
	Delivery
	Event          Event     `json:"event"`
	AttemptHistory []Attempt `json:"attempt_history"`
}

// DeliveryPage answers GET /v1/deliveries, newest first.
type DeliveryPage struct {
	Deliveries []Delivery `json:"deliveries"`
	// NextCursor is passed as ?cursor= for the next page; null on the last.
	NextCursor *string `json:"next_cursor"`
}

// Event is what a delivery carries, without its payload.
type Event struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// FormID and SubmissionID are left out when the event has none.
	FormID       string    `json:"form_id,omitempty"`
	SubmissionID string    `json:"submission_id,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
}

// Attempt is one request that went out (or may have) for a delivery.
type Attempt struct {
	Number  int     `json:"number"`
	Outcome Outcome `json:"outcome"`
	// HTTPStatus is null when the transport had no status to report.
	HTTPStatus *int   `json:"http_status"`
	Error      string `json:"error"`
	// Late marks an attempt recorded by a worker whose claim was
	// superseded.
	Late       bool      `json:"late"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	TraceID    string    `json:"trace_id"`
}

// AttemptList answers GET /v1/deliveries/{id}/attempts.
type AttemptList struct {
	Attempts []Attempt `json:"attempts"`
}

// Replay is the audit record of one replay: who, from which state, when.
type Replay struct {
	Actor         string        `json:"actor"`
	PreviousState DeliveryState `json:"previous_state"`
	ReplayedAt    time.Time     `json:"replayed_at"`
}

// ReplayList answers GET /v1/deliveries/{id}/replays.
type ReplayList struct {
	Replays []Replay `json:"replays"`
}

// ReplayRequest is the body of POST /v1/deliveries/replay, the bulk
// replay: every delivery matching the filter, up to Limit. State is failed
// when left out; times are RFC 3339.
type ReplayRequest struct {
	State         string `json:"state,omitempty"`
	EndpointID    string `json:"endpoint_id,omitempty"`
	FormID        string `json:"form_id,omitempty"`
	EventID       string `json:"event_id,omitempty"`
	CreatedAfter  string `json:"created_after,omitempty"`
	CreatedBefore string `json:"created_before,omitempty"`
	// Limit is the most deliveries moved; 0 is the server's cap.
	Limit int `json:"limit,omitempty"`
}

// ReplayCount answers POST /v1/deliveries/replay: how many deliveries
// were made due again.
type ReplayCount struct {
	Count int `json:"count"`
}
