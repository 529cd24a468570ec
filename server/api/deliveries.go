package api

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/storage"
)

// Page sizes of GET /v1/deliveries.
const (
	defaultPageSize = 100
	maxPageSize     = 500
	// maxReplayBatch is the most deliveries one bulk replay moves.
	maxReplayBatch = 1000
)

// cursorPattern is a delivery id, which is what a cursor is: the id of the
// last delivery of the previous page.
var cursorPattern = regexp.MustCompile(`^dlv_[0-9a-f]{32}$`)

func deliveryName(id string) string { return fmt.Sprintf("delivery %q", clip(id)) }

// filterParams are the filter fields shared by the list's query string and
// the bulk replay's body.
type filterParams struct {
	State, EndpointID, FormID, EventID, CreatedAfter, CreatedBefore string
}

func (p filterParams) filter() (storage.DeliveryFilter, error) {
	f := storage.DeliveryFilter{
		State: storage.DeliveryState(p.State), EndpointID: p.EndpointID, FormID: p.FormID, EventID: p.EventID,
	}
	if p.State != "" && !f.State.Valid() {
		return f, refuse(apiwire.CodeInvalidParameter, "state %q is not pending, processing, delivered or failed", clip(p.State))
	}
	for _, id := range [...]struct{ name, v string }{{"endpoint_id", p.EndpointID}, {"form_id", p.FormID}, {"event_id", p.EventID}} {
		if len(id.v) > maxIDParamBytes {
			return f, refuse(apiwire.CodeInvalidParameter, "%s is %d bytes long; ids are at most %d", id.name, len(id.v), maxIDParamBytes)
		}
	}
	var err error
	if f.CreatedAfter, err = parseTimeParam("created_after", p.CreatedAfter); err != nil {
		return f, err
	}
	if f.CreatedBefore, err = parseTimeParam("created_before", p.CreatedBefore); err != nil {
		return f, err
	}
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedAfter.Before(f.CreatedBefore) {
		return f, refuse(apiwire.CodeInvalidParameter, "created_after %s is not before created_before %s, so nothing can match; swap them or widen the range",
			p.CreatedAfter, p.CreatedBefore)
	}
	return f, nil
}

// GET /v1/deliveries
func (h *handler) listDeliveries(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "state", "endpoint_id", "form_id", "event_id", "created_after", "created_before", "limit", "cursor")
	if err != nil {
		return err
	}
	f, err := filterParams{
		State: q.Get("state"), EndpointID: q.Get("endpoint_id"), FormID: q.Get("form_id"), EventID: q.Get("event_id"),
		CreatedAfter: q.Get("created_after"), CreatedBefore: q.Get("created_before"),
	}.filter()
	if err != nil {
		return err
	}
	if err := h.scopeFilter(r, &f); err != nil {
		return err
	}
	limit, cursor, err := page(q, cursorPattern)
	if err != nil {
		return err
	}
	// One more than the page tells whether there is a next page, so the
	// last page says so instead of sending the caller to an empty one.
	ds, err := h.store.DeliveryList(r.Context(), storage.DeliveryListParams{Filter: f, Before: cursor, Limit: limit + 1})
	if err != nil {
		return storeError(err, "the deliveries")
	}
	page := apiwire.DeliveryPage{Deliveries: make([]apiwire.Delivery, 0, min(len(ds), limit))}
	for i, d := range ds {
		if i == limit {
			next := ds[limit-1].ID
			page.NextCursor = &next
			break
		}
		page.Deliveries = append(page.Deliveries, viewDelivery(d))
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// GET /v1/deliveries/{id}
func (h *handler) getDelivery(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	d, ev, err := h.reachDelivery(r, id)
	if err != nil {
		return err
	}
	as, err := h.store.AttemptList(r.Context(), id)
	if err != nil {
		return storeError(err, deliveryName(id))
	}
	writeJSON(w, http.StatusOK, apiwire.DeliveryDetail{Delivery: viewDelivery(d), Event: viewEvent(ev), AttemptHistory: viewAttempts(as)})
	return nil
}

// GET /v1/deliveries/{id}/attempts
func (h *handler) listAttempts(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := h.guardDelivery(r, id); err != nil {
		return err
	}
	as, err := h.store.AttemptList(r.Context(), id)
	if err != nil {
		return storeError(err, deliveryName(id))
	}
	writeJSON(w, http.StatusOK, apiwire.AttemptList{Attempts: viewAttempts(as)})
	return nil
}

// GET /v1/deliveries/{id}/replays
func (h *handler) listReplays(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := h.guardDelivery(r, id); err != nil {
		return err
	}
	rs, err := h.store.ReplayList(r.Context(), id)
	if err != nil {
		return storeError(err, deliveryName(id))
	}
	writeJSON(w, http.StatusOK, apiwire.ReplayList{Replays: viewReplays(rs)})
	return nil
}

// POST /v1/deliveries/{id}/replay
//
// With an Idempotency-Key, a repeat within the key's window replays
// nothing (even if the delivery finished again since) and answers 200,
// marked Idempotent-Replayed, with the delivery as it is now.
func (h *handler) replayDelivery(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	if err := h.emptyBody(w, r); err != nil {
		return err
	}
	if err := h.guardDelivery(r, id); err != nil {
		return err
	}
	p := storage.DeliveryReplayParams{DeliveryID: id, Actor: actor(r)}
	if p.Idempotency, err = h.idempotency(r, scoped(key, replayScope), map[string]string{"delivery_id": id}); err != nil {
		return err
	}
	res, err := h.store.DeliveryReplay(r.Context(), p)
	d := res.Delivery
	if err == nil && res.Duplicate {
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	if errors.Is(err, storage.ErrNotTerminal) {
		ae := storeError(err, deliveryName(id))
		if cur, gerr := h.store.DeliveryGet(r.Context(), id); gerr == nil {
			ae.Message = fmt.Sprintf("%s is %s; only delivered or failed deliveries can be replayed, so wait until it finishes", deliveryName(id), cur.State)
		}
		return ae
	}
	if err != nil {
		return storeError(err, deliveryName(id))
	}
	writeJSON(w, http.StatusOK, viewDelivery(d))
	return nil
}

// POST /v1/deliveries/replay
//
// The state defaults to failed: replaying delivered deliveries sends
// receivers what they already have, so it must be asked for by name.
//
// With an Idempotency-Key, a repeat within the key's window replays
// nothing and answers 200, marked Idempotent-Replayed, with the count
// the first replayed.
func (h *handler) replayDeliveries(w http.ResponseWriter, r *http.Request) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	var req apiwire.ReplayRequest
	if err := decodeObject(body, &req, true); err != nil {
		return err
	}
	if req.State == "" {
		req.State = string(storage.StateFailed)
	}
	if s := storage.DeliveryState(req.State); !s.Terminal() {
		return refuse(apiwire.CodeInvalidRequest, "state %q cannot be replayed; bulk replay takes failed (the default) or delivered", clip(req.State))
	}
	f, err := filterParams{
		State: req.State, EndpointID: req.EndpointID, FormID: req.FormID, EventID: req.EventID,
		CreatedAfter: req.CreatedAfter, CreatedBefore: req.CreatedBefore,
	}.filter()
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			ae.Code = apiwire.CodeInvalidRequest
		}
		return err
	}
	// A scoped caller replays only the deliveries to its endpoints, and a filter
	// naming anything outside them writes nothing.
	if err := h.scopeFilter(r, &f); err != nil {
		return err
	}
	if req.Limit < 0 || req.Limit > maxReplayBatch {
		return refuse(apiwire.CodeInvalidRequest, "limit %d is outside 1 to %d; leave it out for %d", req.Limit, maxReplayBatch, maxReplayBatch)
	}
	if req.Limit == 0 {
		req.Limit = maxReplayBatch
	}
	p := storage.DeliveryReplayManyParams{Filter: f, Actor: actor(r), Limit: req.Limit}
	// The request as filled in: leaving out a default and naming it are
	// the same request.
	if p.Idempotency, err = h.idempotency(r, scoped(key, replayManyScope), req); err != nil {
		return err
	}
	res, err := h.store.DeliveryReplayMany(r.Context(), p)
	if err == nil && res.Duplicate {
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	if err != nil {
		return storeError(err, "the deliveries")
	}
	writeJSON(w, http.StatusOK, apiwire.ReplayCount{Count: res.Count})
	return nil
}
