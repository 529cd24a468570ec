package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/storage"
)

// testScope is the idempotency scope of a test event: the endpoint is
// part of it, so one key sends one test to each endpoint it is used on.
func testScope(endpointID string) func(string) string {
	return func(key string) string { return "test:" + endpointID + ":" + key }
}

// POST /v1/endpoints/{id}/test
//
// Sends a hymical.test event to this endpoint alone, through the path
// every event takes: a delivery, claimed, signed and sent by the worker,
// with its attempts recorded and traced. It answers 202 with the delivery
// to follow. A disabled endpoint's delivery starts held and is sent once
// the endpoint is enabled, as any other would be; a deleted endpoint
// takes no new delivery (410).
//
// With an Idempotency-Key, a repeat for the same endpoint sends nothing
// and answers 200, marked Idempotent-Replayed, with the delivery the
// first made, as it is now. The key is the event's, as an ingest key is,
// so it holds as long as the event is kept.
func (h *handler) testEndpoint(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	if err := h.emptyBody(w, r); err != nil {
		return err
	}
	e, err := h.reachEndpoint(r, id)
	if err != nil {
		return err
	}
	if e.DeletedAt != nil {
		return deletedError(e)
	}
	ev, err := event.Test(e.ID, h.now())
	if err != nil {
		return err
	}
	ev.IdempotencyKey = ownKey(r, scoped(key, testScope(e.ID)))
	res, err := h.fanout(r, ev)
	if errors.Is(err, storage.ErrInvalid) {
		// The store refuses an event addressed to an endpoint deleted
		// since it was read above.
		if cur, gerr := h.store.EndpointGet(r.Context(), id); gerr == nil && cur.DeletedAt != nil {
			return deletedError(cur)
		}
	}
	if err != nil {
		return storeError(err, "the test event for "+endpointName(id))
	}
	if len(res.Deliveries) != 1 {
		ae := errInternal()
		ae.cause = fmt.Errorf("a test event for %s made %d deliveries, want 1", id, len(res.Deliveries))
		return ae
	}
	status := http.StatusAccepted
	if res.Duplicate {
		status = http.StatusOK
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	w.Header().Set("Location", "/v1/deliveries/"+res.Deliveries[0].ID)
	writeJSON(w, status, viewDelivery(res.Deliveries[0]))
	return nil
}

// GET /v1/deliveries/{id}/payload
//
// The body the delivery's requests carry and its signature covers: the
// stored event payload, byte for byte. Nothing of a receiver's answer is
// stored, so there is no route for it.
func (h *handler) deliveryPayload(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	_, ev, err := h.reachDelivery(r, id)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(ev.Payload)
	return nil
}

// GET /v1/event-types
func (h *handler) eventTypes(w http.ResponseWriter, _ *http.Request) error {
	kinds := event.Catalog()
	out := apiwire.EventTypeList{EventTypes: make([]apiwire.EventType, 0, len(kinds))}
	for _, k := range kinds {
		out.EventTypes = append(out.EventTypes, apiwire.EventType{Type: k.Type, Description: k.Description, Example: k.Example})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
