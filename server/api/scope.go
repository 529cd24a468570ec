package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hymical/hymical/server/access"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/storage"
)

// caller is who sent a request with a scoped token. The admin token, and
// insecure dev mode, have none: they reach everything.
type caller struct {
	tokenID string
	scope   access.Scope
}

// callerKey carries a request's *caller in its context.
type callerKey struct{}

// callerOf is r's scoped caller, or nil when r reaches everything.
func callerOf(r *http.Request) *caller {
	c, _ := r.Context().Value(callerKey{}).(*caller)
	return c
}

// reaches reports whether c may see e: its form ids are a non-empty subset
// of c's scope, and it is not the operator endpoint, which is the
// server's own and in no scope. A nil caller reaches every endpoint.
func (h *handler) reaches(c *caller, e storage.Endpoint) bool {
	return c == nil || (c.scope.AllowsEndpoint(e) && (h.operatorEndpoint == "" || e.ID != h.operatorEndpoint))
}

// reachEndpoint reads endpoint id for r's caller. One outside the scope
// answers exactly as a missing id does, so ids cannot be probed. A
// deleted endpoint is returned without error: each route says what that
// means for it.
func (h *handler) reachEndpoint(r *http.Request, id string) (storage.Endpoint, error) {
	e, err := h.store.EndpointGet(r.Context(), id)
	if err != nil {
		return e, storeError(err, endpointName(id))
	}
	if !h.reaches(callerOf(r), e) {
		return storage.Endpoint{}, notFound(endpointName(id))
	}
	return e, nil
}

// reachDelivery reads delivery id and its event for r's caller: a
// scoped caller reaches the deliveries to the endpoints it reaches (test
// deliveries included), whatever the event's form, and any other answers
// as a missing id does. A delivery of its form's event to an endpoint of
// every form, or of a form outside the scope, is the admin's.
func (h *handler) reachDelivery(r *http.Request, id string) (storage.Delivery, storage.Event, error) {
	d, err := h.store.DeliveryGet(r.Context(), id)
	if err != nil {
		return d, storage.Event{}, storeError(err, deliveryName(id))
	}
	if c := callerOf(r); c != nil {
		e, err := h.store.EndpointGet(r.Context(), d.EndpointID)
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return d, storage.Event{}, storeError(err, "the endpoint of "+deliveryName(id))
		}
		if err != nil || !h.reaches(c, e) {
			return storage.Delivery{}, storage.Event{}, notFound(deliveryName(id))
		}
	}
	ev, err := h.store.EventGet(r.Context(), d.EventID)
	if err != nil {
		return d, ev, storeError(err, "the event of "+deliveryName(id))
	}
	return d, ev, nil
}

// guardEndpoint refuses a scoped caller an endpoint outside its scope,
// before a route changes it. The admin is not held up by a read: the
// route's own answers (404, 410, a reused key) stand as they were.
func (h *handler) guardEndpoint(r *http.Request, id string) error {
	if callerOf(r) == nil {
		return nil
	}
	_, err := h.reachEndpoint(r, id)
	return err
}

// allow is the check a change of endpoint id makes on the endpoint it
// writes, for r's caller: nil for one who reaches everything, and for a
// scoped caller the answer of a missing id when the endpoint, as read for
// the write, is outside its scope. guardEndpoint's check comes before the
// change; this one holds against an admin moving the endpoint out of the
// scope in between.
func (h *handler) allow(r *http.Request, id string) endpoint.Allow {
	c := callerOf(r)
	if c == nil {
		return nil
	}
	return func(e storage.Endpoint) error {
		if !h.reaches(c, e) {
			return notFound(endpointName(id))
		}
		return nil
	}
}

// guardDelivery is guardEndpoint for a delivery.
func (h *handler) guardDelivery(r *http.Request, id string) error {
	if callerOf(r) == nil {
		return nil
	}
	_, _, err := h.reachDelivery(r, id)
	return err
}

// notFound is the answer to an id that does not exist, word for word
// what storeError gives for storage.ErrNotFound.
func notFound(what string) *apiError {
	return storeError(storage.ErrNotFound, what)
}

// checkFormsInScope refuses an endpoint a scoped caller may not make: one
// of no form (it would receive every form's events) or of a form outside
// the scope. A nil caller may make any.
func checkFormsInScope(c *caller, forms []string) error {
	if c == nil {
		return nil
	}
	if len(forms) == 0 {
		return refuse(apiwire.CodeFormOutOfScope,
			"form_ids is empty, which means every form; a scoped token's endpoint names one or more of the token's forms (%s)", strings.Join(c.scope.Forms, ", "))
	}
	var outside []string
	for _, f := range forms {
		if !c.scope.AllowsForm(f) {
			outside = append(outside, clip(f))
		}
	}
	if len(outside) > 0 {
		return refuse(apiwire.CodeFormOutOfScope,
			"form_ids names %s, outside this token's forms (%s); name only those, or ask an admin for a token that reaches them", strings.Join(outside, ", "), strings.Join(c.scope.Forms, ", "))
	}
	return nil
}

// scopeFilter narrows a delivery filter to what r's caller reaches: a
// filter naming a form or an endpoint outside the scope answers as a
// missing id, and every other is limited to the scope's forms, so a page
// holds only what the caller may see.
func (h *handler) scopeFilter(r *http.Request, f *storage.DeliveryFilter) error {
	c := callerOf(r)
	if c == nil {
		return nil
	}
	if f.FormID != "" && !c.scope.AllowsForm(f.FormID) {
		return notFound(fmt.Sprintf("form %q", clip(f.FormID)))
	}
	if f.EndpointID != "" {
		if _, err := h.reachEndpoint(r, f.EndpointID); err != nil {
			return err
		}
	}
	f.Forms = c.scope.Forms
	f.ExceptEndpointID = h.operatorEndpoint
	return nil
}

// ownKey keeps a scoped caller's Idempotency-Keys apart from the admin's
// and from other tokens': a key repeated by another caller must not
// answer with what the first one made (an endpoint and its secret).
func ownKey(r *http.Request, scopedKey string) string {
	c := callerOf(r)
	if c == nil || scopedKey == "" {
		return scopedKey
	}
	return "token:" + c.tokenID + ":" + scopedKey
}

// withCaller is ctx carrying c.
func withCaller(ctx context.Context, c *caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// actor names who replays, for the audit record: the operator the
// Hymical-Operator header names, and for a scoped token the token too,
// so the record says whose credential it was whatever the header claims.
func actor(r *http.Request) string {
	a := operatorActor(r.Header.Get(HeaderOperator))
	if c := callerOf(r); c != nil {
		return a + " token:" + c.tokenID
	}
	return a
}
