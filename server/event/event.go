// Package event builds the events the server itself makes: the signed
// submission.received payload every form submission becomes, and the
// hymical.* notifications it sends to an operator endpoint. It owns the
// event types and their bodies, not their delivery.
package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hymical/hymical/sdk/redact"
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

// A submission.received body, the signed payload receivers get, is
//
//	{"type":"submission.received","submission":{"id":…,"form_id":…,"data":…,"created_at":…}}
//
// Its submission.id is what receivers dedupe on: it is minted once here and
// stays the same across every attempt and replay, because every delivery of
// the event carries these bytes. The data goes in exactly as it was
// submitted: encoding/json would compact it and escape <, > and & as
// \u003c…, so a receiver comparing or hashing what its form sent would see
// other bytes.

// Submission builds the submission.received event for a form
// submission, with a fresh submission id. data must be a JSON object; its
// bytes are kept as they are.
func Submission(formID string, data json.RawMessage, now time.Time) (storage.Event, error) {
	if formID == "" {
		return storage.Event{}, fmt.Errorf("%w: form id is required", storage.ErrInvalid)
	}
	data, err := objectData(data, "submission data")
	if err != nil {
		return storage.Event{}, err
	}
	subID := storage.NewID("sub")
	body := newObject().
		str("type", TypeSubmissionReceived).
		raw("submission", newObject().
			str("id", subID).
			str("form_id", formID).
			raw("data", data).
			str("created_at", stamp(now)).
			bytes()).
		bytes()
	return storage.Event{
		Type:         TypeSubmissionReceived,
		FormID:       formID,
		SubmissionID: subID,
		Payload:      body,
		CreatedAt:    now,
	}, nil
}

// Generic builds an event of type typ from outside (POST /v1/events), with
// a fresh event id receivers dedupe on:
//
//	{"type":…,"event":{"id":…,"form_id":…,"data":…,"created_at":…}}
//
// form_id is left out when formID is empty. data must be a JSON object; its
// bytes are kept as they are.
func Generic(typ, formID string, data json.RawMessage, now time.Time) (storage.Event, error) {
	data, err := objectData(data, "payload")
	if err != nil {
		return storage.Event{}, err
	}
	id := storage.NewID("evt")
	inner := newObject().str("id", id)
	if formID != "" {
		inner.str("form_id", formID)
	}
	inner.raw("data", data).str("created_at", stamp(now))
	body := newObject().str("type", typ).raw("event", inner.bytes()).bytes()
	return storage.Event{ID: id, Type: typ, FormID: formID, Payload: body, CreatedAt: now}, nil
}

// objectData is data without the white space around it, once it is known
// to be one JSON object.
func objectData(data json.RawMessage, what string) (json.RawMessage, error) {
	data = bytes.TrimSpace(data)
	var obj map[string]json.RawMessage
	if len(data) == 0 || data[0] != '{' || json.Unmarshal(data, &obj) != nil {
		return nil, fmt.Errorf("%w: %s must be a JSON object", storage.ErrInvalid, what)
	}
	return data, nil
}

// stamp is the created_at of an event: UTC, to the millisecond.
func stamp(t time.Time) string {
	return t.UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)
}

// object writes a JSON object member by member, in order, with string
// values escaped by encoding/json's rules but without its HTML escaping,
// and raw values as they are.
type object struct{ buf []byte }

func newObject() *object { return &object{buf: []byte{'{'}} }

func (o *object) key(k string) {
	if len(o.buf) > 1 {
		o.buf = append(o.buf, ',')
	}
	o.buf = appendString(o.buf, k)
	o.buf = append(o.buf, ':')
}

func (o *object) str(k, v string) *object {
	o.key(k)
	o.buf = appendString(o.buf, v)
	return o
}

func (o *object) raw(k string, v []byte) *object {
	o.key(k)
	o.buf = append(o.buf, v...)
	return o
}

func (o *object) bytes() []byte { return append(o.buf, '}') }

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(b.Bytes(), []byte{'\n'})...)
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
		Endpoint: disabledEndpoint{ID: e.ID, URL: redact.URL(e.URL), Reason: string(e.DisabledReason),
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
