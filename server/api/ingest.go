package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

// idempotencyKey reads the Idempotency-Key header; "" when absent.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values(HeaderIdempotencyKey)
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", refuse(apiwire.CodeInvalidIdempotencyKey, "the %s header is given %d times; give it once", HeaderIdempotencyKey, len(vs))
	case vs[0] == "":
		return "", refuse(apiwire.CodeInvalidIdempotencyKey, "the %s header is empty; give a unique value such as a UUID, or leave the header out", HeaderIdempotencyKey)
	}
	return vs[0], checkIdempotencyKey(vs[0])
}

// Idempotency keys are unique across the whole events table, so the API
// scopes each one to its route, and a submission's to its form: the same key
// sent for two forms makes two events. Form ids cannot contain ':', so no
// two scopes can spell the same stored key.
func submissionScope(formID, key string) string { return "submission:" + formID + ":" + key }
func eventScope(key string) string              { return "event:" + key }

// endpointScope scopes a key of POST /v1/endpoints. Those keys live in a
// table of their own, apart from events', but are scoped all the same, so
// another creating route can share that table without sharing its keys.
func endpointScope(key string) string { return "endpoint:" + key }

// The other keyed routes share that table, each in a scope of its own.
// The endpoint or delivery in the path is checked by the store as well as
// hashed, so one key cannot answer for another target.
func rotateScope(key string) string     { return "rotate-secret:" + key }
func replayScope(key string) string     { return "replay:" + key }
func replayManyScope(key string) string { return "replay-many:" + key }

// scoped is key in its route's scope, or "" for a request without one.
func scoped(key string, scope func(string) string) string {
	if key == "" {
		return ""
	}
	return scope(key)
}

// traceParentPattern is the W3C traceparent format, version 00.
var traceParentPattern = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// traceParent is the trace context to store with an event, so attempts
// made later can link back to the request that made it: the ingest
// request's span, which continues the caller's well-formed traceparent;
// with tracing off, the caller's traceparent itself; "" when there is none.
func traceParent(r *http.Request) string {
	tp := telemetry.TraceParent(r.Context())
	if traceParentPattern.MatchString(tp) {
		return tp
	}
	return ""
}

// fanout writes ev and fans it out, under a span of its own, and
// describes the result on the ingest request's span.
func (h *handler) fanout(r *http.Request, ev storage.Event) (storage.EventCreateResult, error) {
	ingest := trace.SpanFromContext(r.Context())
	ev.TraceParent = traceParent(r)
	ctx, span := h.tracer.Start(r.Context(), telemetry.SpanFanout, trace.WithAttributes(
		telemetry.AttrEventID.String(ev.ID), telemetry.AttrEventType.String(ev.Type)))
	defer span.End()
	res, err := h.store.EventCreate(ctx, ev)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "writing the event failed")
		return res, err
	}
	if !res.Duplicate {
		// Rows were added: the store has room (again).
		h.storeHealth.Observe(nil)
	}
	if !span.IsRecording() {
		return res, nil
	}
	ids := make([]string, len(res.Deliveries))
	for i, d := range res.Deliveries {
		ids[i] = d.ID
	}
	// Attempts link back to the ingest span; listing the deliveries here
	// lets one follow a submission forward to them.
	span.SetAttributes(telemetry.AttrFanoutCount.Int(len(ids)), telemetry.AttrDeliveryIDs.StringSlice(ids),
		telemetry.AttrIdempotentReplay.Bool(res.Duplicate))
	attrs := []attribute.KeyValue{
		telemetry.AttrEventID.String(res.Event.ID), telemetry.AttrEventType.String(res.Event.Type),
		telemetry.AttrFanoutCount.Int(len(ids)), telemetry.AttrIdempotentReplay.Bool(res.Duplicate),
	}
	if res.Event.SubmissionID != "" {
		attrs = append(attrs, telemetry.AttrSubmissionID.String(res.Event.SubmissionID))
	}
	if res.Event.FormID != "" {
		attrs = append(attrs, telemetry.AttrFormID.String(res.Event.FormID))
	}
	ingest.SetAttributes(attrs...)
	return res, nil
}

// POST /v1/forms/{form_id}/submissions
func (h *handler) createSubmission(w http.ResponseWriter, r *http.Request) error {
	formID := r.PathValue("form_id")
	if err := checkFormID("the form id in the path", formID); err != nil {
		return err
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	data, err := objectBody(body, "the submission")
	if err != nil {
		return err
	}
	ev, err := event.Submission(formID, data, h.now())
	if err != nil {
		if errors.Is(err, storage.ErrInvalid) {
			return refuse(apiwire.CodeInvalidBody, "the submission was refused: %v", err)
		}
		return err
	}
	if key != "" {
		ev.IdempotencyKey = submissionScope(formID, key)
	}
	res, err := h.fanout(r, ev)
	if err != nil {
		return ingestError(err, ev, "the submission")
	}
	if res.Duplicate {
		var first struct {
			Submission struct {
				Data json.RawMessage `json:"data"`
			} `json:"submission"`
		}
		if err := json.Unmarshal(res.Event.Payload, &first); err != nil || !sameJSON(first.Submission.Data, data) {
			return keyReused()
		}
	}
	h.writeIngest(w, res, res.Event.SubmissionID)
	return nil
}

// POST /v1/events
func (h *handler) createEvent(w http.ResponseWriter, r *http.Request) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	var req apiwire.EventRequest
	if err := decodeObject(body, &req, false); err != nil {
		return err
	}
	switch {
	case req.Type == "":
		return refuse(apiwire.CodeInvalidEventType, "type is required: name the event, e.g. form.published")
	case req.Type == event.TypeSubmissionReceived:
		return refuse(apiwire.CodeInvalidEventType, "type %q is reserved for form submissions, which carry a submission id receivers dedupe on; send them to POST /v1/forms/{form_id}/submissions", req.Type)
	case strings.HasPrefix(req.Type, event.TypePrefix):
		// A caller must not be able to forge what the server says, such
		// as hymical.endpoint.disabled.
		return refuse(apiwire.CodeInvalidEventType, "types starting with %q are the server's own events; name yours differently, e.g. form.published", event.TypePrefix)
	}
	if err := checkEventType("type", req.Type); err != nil {
		return err
	}
	if req.FormID != "" {
		if err := checkFormID("form_id", req.FormID); err != nil {
			return err
		}
	}
	trimmed := bytes.TrimSpace(req.Payload)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		got := "nothing"
		if len(trimmed) > 0 {
			got = jsonKindOf(trimmed)
		}
		return refuse(apiwire.CodeInvalidBody, "payload must be a JSON object, got %s; send the event's data as {…}", got)
	}
	ev, err := event.Generic(req.Type, req.FormID, trimmed, h.now())
	if err != nil {
		return refuse(apiwire.CodeInvalidBody, "the event was refused: %v", err)
	}
	if key != "" {
		ev.IdempotencyKey = eventScope(key)
	}
	res, err := h.fanout(r, ev)
	if err != nil {
		return ingestError(err, ev, "the event")
	}
	if res.Duplicate {
		var first struct {
			Event struct {
				Data json.RawMessage `json:"data"`
			} `json:"event"`
		}
		if err := json.Unmarshal(res.Event.Payload, &first); err != nil ||
			res.Event.Type != req.Type || res.Event.FormID != req.FormID || !sameJSON(first.Event.Data, trimmed) {
			return keyReused()
		}
	}
	h.writeIngest(w, res, "")
	return nil
}

// ingestError answers an ingest the store refused. When it refused the
// event itself (storage.ErrInvalid), the answer gives the store's rule in
// its own words, which hold no driver text, from ev.Validate: the checks
// in readBody come first, so this is the store's last word on what got
// past them.
func ingestError(err error, ev storage.Event, what string) error {
	if errors.Is(err, storage.ErrInvalid) {
		if verr := ev.Validate(); verr != nil {
			return &apiError{Code: apiwire.CodeInvalidBody, cause: err,
				Message: fmt.Sprintf("the delivery store refused %s: %v; the signed payload wraps the data sent (a submission's two levels deeper, an event's one), so change the data and send it again", what, verr)}
		}
	}
	return storeError(err, what)
}

func keyReused() *apiError {
	return refuse(apiwire.CodeIdempotencyKeyReused, "this %s was first used with a different request; a retry must send the same body, and a new request needs a new key", HeaderIdempotencyKey)
}

// writeIngest answers 202 for a new event and 200, marked as a replay, for a
// repeat of an idempotency key.
func (h *handler) writeIngest(w http.ResponseWriter, res storage.EventCreateResult, submissionID string) {
	ids := make([]string, 0, len(res.Deliveries))
	for _, d := range res.Deliveries {
		ids = append(ids, d.ID)
	}
	// Backends read a repeat's deliveries back in different orders; ids
	// sort by creation, so the answer is the same every time.
	slices.Sort(ids)
	status := http.StatusAccepted
	if res.Duplicate {
		status = http.StatusOK
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	writeJSON(w, status, apiwire.IngestResult{SubmissionID: submissionID, EventID: res.Event.ID, Deliveries: ids})
}

// sameJSON reports whether two JSON texts hold the same value, whatever
// their spacing, key order or escaping.
func sameJSON(a, b []byte) bool {
	va, errA := decodeAny(a)
	vb, errB := decodeAny(b)
	return errA == nil && errB == nil && reflect.DeepEqual(va, vb)
}

func decodeAny(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}
