package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/storage"
)

// maxBulkReplay is the most deliveries one bulk replay moves, as in the API.
const maxBulkReplay = 1000

// POST /console/deliveries/{id}/replay
func (h *handler) replay(w http.ResponseWriter, r *http.Request, a authResult) error {
	id := r.PathValue("id")
	back := h.prefix + "/deliveries/" + url.PathEscape(id)
	if _, _, err := h.deliveryFor(r, a, id); err != nil {
		return withLink(storeError(err, deliveryName(id)), h.prefix+"/deliveries", "Back to the deliveries")
	}
	_, err := h.store.DeliveryReplay(r.Context(), storage.DeliveryReplayParams{DeliveryID: id, Actor: h.actorFor(a)})
	if errors.Is(err, storage.ErrNotTerminal) {
		pe := storeError(err, deliveryName(id))
		if cur, gerr := h.store.DeliveryGet(r.Context(), id); gerr == nil {
			pe.Message = fmt.Sprintf("The %s is %s; only delivered or failed deliveries can be replayed.", deliveryName(id), cur.State)
		}
		return withLink(pe, back, "Back to the delivery")
	}
	if err != nil {
		return withLink(storeError(err, deliveryName(id)), h.prefix+"/deliveries", "Back to the deliveries")
	}
	h.log.Info("delivery replayed from the console", "delivery", id, "actor", h.actorFor(a))
	http.Redirect(w, r, back+"?done=replayed", http.StatusSeeOther)
	return nil
}

// POST /console/deliveries/replay
//
// Replays the failed deliveries the posted filter matches, up to
// maxBulkReplay. Only failed: replaying delivered deliveries sends
// receivers what they already have, which the API allows by name but the
// console does not offer.
func (h *handler) replayMany(w http.ResponseWriter, r *http.Request, a authResult) error {
	form, filter, perr := readFilter(r.PostForm)
	h.narrow(a, &filter)
	if perr != nil {
		return withLink(perr, h.deliveriesURL(form, ""), "Back to the deliveries")
	}
	if filter.State != storage.StateFailed {
		return withLink(badInput("Only failed deliveries are replayed in bulk",
			"Bulk replay takes the deliveries list filtered by state failed; this form asked for state %q.", clip(form.State)),
			h.deliveriesURL(filterForm{State: string(storage.StateFailed)}, ""), "List the failed deliveries")
	}
	res, err := h.store.DeliveryReplayMany(r.Context(), storage.DeliveryReplayManyParams{Filter: filter, Actor: h.actorFor(a), Limit: maxBulkReplay})
	n := res.Count
	if err != nil {
		return withLink(storeError(err, "deliveries"), h.deliveriesURL(form, ""), "Back to the deliveries")
	}
	h.log.Info("failed deliveries replayed from the console", "count", n, "actor", h.actorFor(a), "filter", form.values().Encode())
	v := form.values()
	v.Set("done", "replayed")
	v.Set("n", strconv.Itoa(n))
	http.Redirect(w, r, h.prefix+"/deliveries?"+v.Encode(), http.StatusSeeOther)
	return nil
}

// POST /console/endpoints/{id}/disable
func (h *handler) disable(w http.ResponseWriter, r *http.Request, a authResult) error {
	return h.setDisabled(w, r, a, true)
}

// POST /console/endpoints/{id}/enable
func (h *handler) enable(w http.ResponseWriter, r *http.Request, a authResult) error {
	return h.setDisabled(w, r, a, false)
}

func (h *handler) setDisabled(w http.ResponseWriter, r *http.Request, a authResult, disable bool) error {
	id := r.PathValue("id")
	if _, err := h.endpointFor(r, a, id); err != nil {
		return withLink(storeError(err, endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	if _, err := endpoint.SetDisabled(r.Context(), h.store, id, disable, h.now(), h.allow(a)); err != nil {
		return withLink(storeError(err, endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	done := "enabled"
	if disable {
		done = "disabled"
	}
	h.log.Info("endpoint "+done+" from the console", "endpoint", id)
	http.Redirect(w, r, h.prefix+"/endpoints?"+url.Values{"done": {done}, "id": {id}}.Encode(), http.StatusSeeOther)
	return nil
}

type rotatedData struct {
	base
	Endpoint endpointRow
	Secret   string
	// Created: the endpoint was just added, not rotated.
	Created bool
	// PreviousExpireAt is when the secrets active before stop signing.
	PreviousExpireAt *time.Time
}

// POST /console/endpoints/{id}/rotate-secret
//
// The answer is the page showing the new secret, not a redirect: the
// secret is shown this once (the page is not cached) and never again.
func (h *handler) rotate(w http.ResponseWriter, r *http.Request, a authResult) error {
	id := r.PathValue("id")
	now := h.now()
	if _, err := h.endpointFor(r, a, id); err != nil {
		return withLink(storeError(err, endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	rot, err := endpoint.RotateSecret(r.Context(), h.store, id, h.grace, now, nil, h.allow(a))
	if err != nil {
		return withLink(storeError(err, endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	h.log.Info("endpoint secret rotated from the console", "endpoint", id)
	h.render(w, http.StatusOK, "rotated", rotatedData{
		base: h.base(a, "endpoints", "New signing secret"), Endpoint: viewEndpoint(rot.Endpoint, now),
		Secret: rot.Secret, PreviousExpireAt: rot.PreviousSecretsExpireAt,
	})
	return nil
}

// POST /console/endpoints/{id}/delete
//
// The form of the confirmation page. Without its force box an endpoint
// with open deliveries is refused, as the API refuses it without
// ?force=true; the operator endpoint is refused outright (package
// endpoint).
func (h *handler) deleteEndpoint(w http.ResponseWriter, r *http.Request, a authResult) error {
	id := r.PathValue("id")
	back := h.prefix + "/endpoints/" + url.PathEscape(id) + "/delete"
	force := r.PostForm.Get("force") == "yes"
	if _, err := h.endpointFor(r, a, id); err != nil {
		return withLink(storeError(err, endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	res, err := endpoint.Delete(r.Context(), h.store, id, force, h.operatorEndpoint, h.allow(a))
	switch {
	case errors.Is(err, endpoint.ErrOperatorEndpoint):
		return withLink(&pageError{Status: http.StatusConflict, Title: "The operator endpoint is not deleted",
			Message: fmt.Sprintf("The %s is endpoints.operator_endpoint: the server tells it when it disables an endpoint.", endpointName(id)),
			Advice:  "Point endpoints.operator_endpoint at another endpoint, or leave it empty, and restart the server; then delete this one. Nothing was changed.",
			cause:   err}, h.prefix+"/endpoints", "Back to the endpoints")
	case errors.Is(err, storage.ErrEndpointBusy):
		return withLink(&pageError{Status: http.StatusConflict, Title: "The endpoint still has deliveries under way",
			Message: fmt.Sprintf("The %s has %d pending and %d processing %s, which deleting it would leave unsent.",
				endpointName(id), res.Pending, res.Processing, plural(res.Pending+res.Processing, "delivery", "deliveries")),
			Advice: "Wait until they finish, or delete it again with the box ticked that fails them with the reason “endpoint deleted”. Nothing was changed.",
			cause:  err}, back, "Back to the confirmation")
	case err != nil:
		return withLink(storeError(err, endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	h.log.Info("endpoint deleted from the console", "endpoint", id, "actor", h.actorFor(a),
		"failed_pending", res.Pending, "failed_processing", res.Processing)
	http.Redirect(w, r, h.prefix+"/endpoints?"+url.Values{"done": {"deleted"}, "id": {id}}.Encode(), http.StatusSeeOther)
	return nil
}
