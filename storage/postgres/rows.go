package postgres

import (
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// Column lists are written once, with the table aliases every query uses
// (d deliveries, e events, a attempts), and scanned by the matching function.

const deliveryColumns = `d.id, d.endpoint_id, d.event_id, d.state, d.attempts, d.cycle_attempts,
	d.next_attempt_at, d.claim_expires_at, d.created_at, d.completed_at, d.held, d.unsent_reason`

func deliveryDest(d *storage.Delivery) []any {
	return []any{&d.ID, &d.EndpointID, &d.EventID, &d.State, &d.Attempts, &d.CycleAttempts,
		&d.NextAttemptAt, &d.ClaimExpiresAt, &d.CreatedAt, &d.CompletedAt, &d.Held, &d.UnsentReason}
}

func scanDelivery(row pgx.Row) (storage.Delivery, error) {
	var d storage.Delivery
	err := row.Scan(deliveryDest(&d)...)
	return d, err
}

func collectDeliveries(rows pgx.Rows) ([]storage.Delivery, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Delivery, error) { return scanDelivery(r) })
	if out == nil && err == nil {
		out = []storage.Delivery{}
	}
	return out, err
}

const eventColumns = `e.id, e.type, e.form_id, e.submission_id, e.payload, e.idempotency_key,
	e.trace_parent, e.created_at, e.endpoint_id`

// eventScan holds the columns that need converting after the scan.
type eventScan struct {
	ev      storage.Event
	payload []byte
	key     *string
}

func (s *eventScan) dest() []any {
	return []any{&s.ev.ID, &s.ev.Type, &s.ev.FormID, &s.ev.SubmissionID, &s.payload, &s.key,
		&s.ev.TraceParent, &s.ev.CreatedAt, &s.ev.EndpointID}
}

func (s *eventScan) event() storage.Event {
	ev := s.ev
	ev.Payload = json.RawMessage(s.payload)
	if s.key != nil {
		ev.IdempotencyKey = *s.key
	}
	return ev
}

func scanEvent(row pgx.Row) (storage.Event, error) {
	var s eventScan
	if err := row.Scan(s.dest()...); err != nil {
		return storage.Event{}, err
	}
	return s.event(), nil
}

const attemptColumns = `a.delivery_id, a.number, a.outcome, a.http_status, a.error, a.late,
	a.started_at, a.finished_at, a.trace_id`

// attemptScan holds the column that needs converting after the scan.
type attemptScan struct {
	a      storage.Attempt
	status *int
}

func (s *attemptScan) dest() []any {
	a := &s.a
	return []any{&a.DeliveryID, &a.Number, &a.Outcome, &s.status, &a.Error, &a.Late,
		&a.StartedAt, &a.FinishedAt, &a.TraceID}
}

func (s *attemptScan) attempt() storage.Attempt {
	a := s.a
	if s.status != nil {
		a.HTTPStatus = *s.status
	}
	return a
}

func scanAttempt(row pgx.Row) (storage.Attempt, error) {
	var s attemptScan
	err := row.Scan(s.dest()...)
	return s.attempt(), err
}

const endpointColumns = `id, transport, url, config, event_types, form_ids, secrets, description,
	disabled_at, created_at, updated_at, disabled_reason, failing_since, rate_limit, rate_burst,
	max_in_flight, ordered, retry_schedule, deleted_at`

// epEndpointColumns is endpointColumns read through the alias ep, for
// queries that read an endpoint beside other tables.
const epEndpointColumns = `ep.id, ep.transport, ep.url, ep.config, ep.event_types, ep.form_ids,
	ep.secrets, ep.description, ep.disabled_at, ep.created_at, ep.updated_at, ep.disabled_reason,
	ep.failing_since, ep.rate_limit, ep.rate_burst, ep.max_in_flight, ep.ordered, ep.retry_schedule,
	ep.deleted_at`

// endpointScan holds the columns that need converting after the scan.
type endpointScan struct {
	e                      storage.Endpoint
	secrets, retrySchedule string
}

func (s *endpointScan) dest() []any {
	e := &s.e
	return []any{&e.ID, &e.Transport, &e.URL, &e.Config, &e.EventTypes, &e.FormIDs, &s.secrets,
		&e.Description, &e.DisabledAt, &e.CreatedAt, &e.UpdatedAt, &e.DisabledReason, &e.FailingSince,
		&e.RateLimit, &e.RateBurst, &e.MaxInFlight, &e.Ordered, &s.retrySchedule, &e.DeletedAt}
}

// endpoint is the scanned endpoint, its secrets opened by codec.
func (s *endpointScan) endpoint(codec storage.SecretsCodec) (storage.Endpoint, error) {
	e := s.e
	var err error
	// The codec's errors name the endpoint and never carry a secret.
	if e.Secrets, err = codec.Decode(e.ID, s.secrets); err != nil {
		return storage.Endpoint{}, err
	}
	if e.RetrySchedule, err = storage.DecodeRetrySchedule(s.retrySchedule); err != nil {
		return storage.Endpoint{}, fmt.Errorf("endpoint %s: %w", e.ID, err)
	}
	return normalizeEndpoint(e), nil
}

func scanEndpoint(row pgx.Row, codec storage.SecretsCodec) (storage.Endpoint, error) {
	var s endpointScan
	if err := row.Scan(s.dest()...); err != nil {
		return storage.Endpoint{}, err
	}
	return s.endpoint(codec)
}

// normalizeEndpoint makes absent collections empty rather than nil, and
// secret expiries UTC, so an endpoint reads back the same however it was
// written.
func normalizeEndpoint(e storage.Endpoint) storage.Endpoint {
	if e.Config == nil {
		e.Config = map[string]string{}
	}
	if e.EventTypes == nil {
		e.EventTypes = []string{}
	}
	if e.FormIDs == nil {
		e.FormIDs = []string{}
	}
	secrets := make([]storage.Secret, len(e.Secrets))
	for i, s := range e.Secrets {
		if s.ExpiresAt != nil {
			t := s.ExpiresAt.UTC()
			s = storage.NewSecret(s.Reveal(), &t)
		}
		secrets[i] = s
	}
	e.Secrets = secrets
	if e.FailingSince != nil {
		t := e.FailingSince.UTC()
		e.FailingSince = &t
	}
	if e.DeletedAt != nil {
		t := e.DeletedAt.UTC()
		e.DeletedAt = &t
	}
	e.NormalizeControls()
	return e
}
