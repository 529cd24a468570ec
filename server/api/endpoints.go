package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/storage"
)

// defaultTransport is the transport an endpoint gets when none is named.
const defaultTransport = "http"

// validateTimeout bounds asking a plugin about one endpoint.
const validateTimeout = 10 * time.Second

// noFields is the body of an action that takes none; it may be empty or {}.
type noFields struct{}

func endpointName(id string) string { return fmt.Sprintf("endpoint %q", clip(id)) }

// checkFields checks everything about an endpoint that needs no plugin,
// normalising its lists.
func checkFields(e *storage.Endpoint) error {
	if strings.TrimSpace(e.Transport) == "" {
		return refuse(apiwire.CodeUnknownTransport, "transport must not be empty; leave it out for %q", defaultTransport)
	}
	if e.URL == "" && e.Transport == defaultTransport {
		return refuse(apiwire.CodeInvalidURL, "url is required for the %s transport: give the receiver's https:// URL", defaultTransport)
	}
	if e.URL != "" {
		if err := checkEndpointURL(e.URL); err != nil {
			return err
		}
	}
	var err error
	if e.EventTypes, err = normaliseList("event_types", e.EventTypes, checkEventType); err != nil {
		return err
	}
	if e.FormIDs, err = normaliseList("form_ids", e.FormIDs, checkFormID); err != nil {
		return err
	}
	if err := checkConfig(e.Config); err != nil {
		return err
	}
	return checkDescription(e.Description)
}

// checkTarget asks the endpoint's transport plugin whether it can send
// there, after the name is checked against the loaded plugins.
func (h *handler) checkTarget(ctx context.Context, e storage.Endpoint) error {
	names := h.transports.Names()
	if !slices.Contains(names, e.Transport) {
		loaded := "none are loaded; install a transport plugin"
		if len(names) > 0 {
			loaded = "the loaded transports are " + strings.Join(names, ", ")
		}
		return refuse(apiwire.CodeUnknownTransport, "transport %q is not loaded on this server; %s", clip(e.Transport), loaded)
	}
	ctx, cancel := context.WithTimeout(ctx, validateTimeout)
	defer cancel()
	err := h.transports.Validate(ctx, e.Transport, transport.Endpoint{URL: e.URL, Config: e.Config})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transport.ErrRejected):
		return refuse(apiwire.CodeTransportRefused, "the %s transport refused this endpoint: %s", e.Transport, refusalReason(err))
	}
	return &apiError{Code: apiwire.CodeTransportUnavailable,
		Message: fmt.Sprintf("the %s transport plugin could not check this endpoint; nothing was saved, try again", e.Transport), cause: err}
}

// refusalReason is the plugin's own words from a refusal, without the
// layers of context the host and the gRPC shim wrap around them.
func refusalReason(err error) string {
	msg := err.Error()
	marker := transport.ErrRejected.Error() + ": "
	if i := strings.LastIndex(msg, marker); i >= 0 {
		msg = strings.TrimPrefix(msg[i+len(marker):], "endpoint: ")
	}
	return transport.BoundError(redact.Text(msg))
}

// signatureScheme reads the scheme a new endpoint asks for; none is v1.
func signatureScheme(s string) (webhook.Scheme, error) {
	if s == "" {
		return webhook.SchemeV1, nil
	}
	scheme, err := webhook.ParseScheme(s)
	if err != nil {
		return "", refuse(apiwire.CodeInvalidSignatureScheme,
			"signature_scheme %q is not one this server signs with; use %q (HMAC-SHA256 with a shared whsec_ secret, the default) or %q (Ed25519: receivers verify with a whpk_ public key)",
			clip(s), webhook.SchemeV1, webhook.SchemeV1a)
	}
	return scheme, nil
}

// endpointCursorPattern is an endpoint id, which is what a cursor of the
// endpoint list is: the id of the last endpoint of the previous page.
var endpointCursorPattern = regexp.MustCompile(`^ep_[0-9a-f]{32}$`)

// requestHash fingerprints a create's request, as decoded: the same fields
// with the same values hash the same however the JSON was spaced or
// ordered. It is what a repeated Idempotency-Key is checked against.
func requestHash(req any) (string, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// idempotency is the storage.Idempotency of a request: nil without a key;
// with one, the key as scoped to its route, the fingerprint of req, and
// the API's window. A scoped caller's keys are its own (ownKey).
func (h *handler) idempotency(r *http.Request, scopedKey string, req any) (*storage.Idempotency, error) {
	scopedKey = ownKey(r, scopedKey)
	if scopedKey == "" {
		return nil, nil
	}
	hash, err := requestHash(req)
	if err != nil {
		return nil, err
	}
	return &storage.Idempotency{Key: scopedKey, RequestHash: hash, Window: h.keyWindow}, nil
}

// POST /v1/endpoints
//
// With an Idempotency-Key, a repeat of the request within the key's window
// (Options.IdempotencyWindow) answers 200, marked Idempotent-Replayed,
// with the endpoint it first created as it is now and its current secret,
// and writes nothing; only the key and the endpoint's id are stored, so the
// secret is read again from the endpoint, never copied.
func (h *handler) createEndpoint(w http.ResponseWriter, r *http.Request) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	var req apiwire.EndpointCreate
	if err := decodeObject(body, &req, false); err != nil {
		return err
	}
	scheme, err := signatureScheme(req.SignatureScheme)
	if err != nil {
		return err
	}
	ep := storage.Endpoint{
		Transport: req.Transport, URL: req.URL, Config: req.Config,
		EventTypes: req.EventTypes, FormIDs: req.FormIDs, Description: req.Description,
	}
	if ep.Transport == "" {
		ep.Transport = defaultTransport
	}
	if ep.Config == nil {
		ep.Config = map[string]string{}
	}
	if err := checkFields(&ep); err != nil {
		return err
	}
	if err := checkFormsInScope(callerOf(r), ep.FormIDs); err != nil {
		return err
	}
	if err := applyControls(req.EndpointControls, &ep, h.retryBounds); err != nil {
		return err
	}
	if ep.Headers, err = applyHeaders(req.Headers, nil); err != nil {
		return err
	}
	if err := h.checkTarget(r.Context(), ep); err != nil {
		return err
	}
	secret, err := scheme.NewKey()
	if err != nil {
		return err
	}
	ep.Secrets = []storage.Secret{storage.NewSecret(secret, nil)}
	status := http.StatusCreated
	idem, err := h.idempotency(r, scoped(key, endpointScope), req)
	if err != nil {
		return err
	}
	res, err := h.store.EndpointCreate(r.Context(), storage.EndpointCreateParams{Endpoint: ep, Idempotency: idem})
	created := res.Endpoint
	if idem != nil && errors.Is(err, storage.ErrDeleted) {
		return &apiError{Code: apiwire.CodeEndpointDeleted, cause: err,
			Message: fmt.Sprintf("the endpoint this %s created was deleted since; send a new key to create another", HeaderIdempotencyKey)}
	}
	if err == nil && res.Duplicate && !h.reaches(callerOf(r), created) {
		// An admin moved it out of the token's scope since.
		return notFound(endpointName(created.ID))
	}
	if err == nil && res.Duplicate {
		status = http.StatusOK
		secret = endpoint.CurrentSecret(created).Reveal()
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	if err != nil {
		return storeError(err, "the endpoint")
	}
	w.Header().Set("Location", "/v1/endpoints/"+created.ID)
	writeJSON(w, status, apiwire.EndpointCreated{Endpoint: viewEndpoint(created, h.now()), Secret: secret})
	return nil
}

// GET /v1/endpoints
//
// Paged like GET /v1/deliveries: newest first, limit and cursor in,
// next_cursor out. Deleted endpoints are left out.
func (h *handler) listEndpoints(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "limit", "cursor")
	if err != nil {
		return err
	}
	limit, cursor, err := page(q, endpointCursorPattern)
	if err != nil {
		return err
	}
	// One more than the page tells whether there is a next page.
	p := storage.EndpointListParams{Before: cursor, Limit: limit + 1}
	c := callerOf(r)
	if c != nil {
		p.Forms = c.scope.Forms
		// The operator endpoint may match the scope's forms but is in no
		// scope: one more makes up for it, so a page is still full.
		p.Limit++
	}
	eps, err := h.store.EndpointListPage(r.Context(), p)
	if err != nil {
		return storeError(err, "the endpoints")
	}
	if c != nil {
		eps = slices.DeleteFunc(eps, func(e storage.Endpoint) bool { return !h.reaches(c, e) })
		eps = eps[:min(len(eps), limit+1)]
	}
	now := h.now()
	out := apiwire.EndpointList{Endpoints: make([]apiwire.Endpoint, 0, min(len(eps), limit))}
	for i, e := range eps {
		if i == limit {
			next := eps[limit-1].ID
			out.NextCursor = &next
			break
		}
		out.Endpoints = append(out.Endpoints, viewEndpoint(e, now))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// GET /v1/endpoints/{id}
//
// A deleted endpoint is 410 Gone, not 404: the id was real, and its
// deliveries can still be read.
func (h *handler) getEndpoint(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	e, err := h.reachEndpoint(r, id)
	if err != nil {
		return err
	}
	if e.DeletedAt != nil {
		return deletedError(e)
	}
	writeJSON(w, http.StatusOK, viewEndpoint(e, h.now()))
	return nil
}

// deletedError answers a request about the deleted endpoint e.
func deletedError(e storage.Endpoint) *apiError {
	return &apiError{Code: apiwire.CodeEndpointDeleted,
		Message: fmt.Sprintf("%s was deleted at %s; its deliveries stay readable under GET /v1/deliveries?endpoint_id=%s",
			endpointName(e.ID), e.DeletedAt.UTC().Format(time.RFC3339), e.ID)}
}

// DELETE /v1/endpoints/{id}
//
// Deleting is soft (storage.Endpoints.EndpointDelete): the endpoint's history
// stays. An endpoint with pending or processing deliveries is refused with
// 409 unless ?force=true, which fails them with the reason "endpoint
// deleted"; the operator endpoint is refused outright.
func (h *handler) deleteEndpoint(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	q, err := query(r, "force")
	if err != nil {
		return err
	}
	var force bool
	switch v := q.Get("force"); v {
	case "", "false":
	case "true":
		force = true
	default:
		return refuse(apiwire.CodeInvalidParameter, "force %q is not true or false; give force=true to delete an endpoint that still has pending or processing deliveries", clip(v))
	}
	if err := h.emptyBody(w, r); err != nil {
		return err
	}
	// Checked first so that a deleted endpoint outside the scope answers
	// 404, not 410, and again with the delete, on the endpoint deleted.
	if err := h.guardEndpoint(r, id); err != nil {
		return err
	}
	res, err := endpoint.Delete(r.Context(), h.store, id, force, h.operatorEndpoint, h.allow(r, id))
	switch {
	case errors.Is(err, endpoint.ErrOperatorEndpoint):
		return &apiError{Code: apiwire.CodeOperatorEndpoint, cause: err,
			Message: fmt.Sprintf("%s is endpoints.operator_endpoint, the endpoint this server tells when it disables one; point that setting at another endpoint or leave it empty, restart the server, and then delete this one", endpointName(id))}
	case errors.Is(err, storage.ErrEndpointBusy):
		return &apiError{Code: apiwire.CodeEndpointBusy, cause: err,
			Message: fmt.Sprintf("%s has %d pending and %d processing deliveries, which deleting it would leave unsent; wait until they finish, or send DELETE /v1/endpoints/%s?force=true to fail them with the reason %q (a request already under way still records its outcome, as a late attempt)",
				endpointName(id), res.Pending, res.Processing, clip(id), "endpoint deleted")}
	case errors.Is(err, storage.ErrDeleted):
		if e, gerr := h.store.EndpointGet(r.Context(), id); gerr == nil && e.DeletedAt != nil {
			return deletedError(e)
		}
		return storeError(err, endpointName(id))
	case err != nil:
		return storeError(err, endpointName(id))
	}
	writeJSON(w, http.StatusOK, apiwire.EndpointDeleted{ID: res.Endpoint.ID, DeletedAt: res.Endpoint.DeletedAt.UTC(),
		FailedPending: res.Pending, FailedProcessing: res.Processing})
	return nil
}

// modifyEndpoint is endpoint.Modify with its store errors turned
// into answers; change's own errors (already answers) pass through.
func (h *handler) modifyEndpoint(ctx context.Context, id string, change func(e *storage.Endpoint) (bool, error)) (storage.Endpoint, error) {
	e, err := endpoint.Modify(ctx, h.store, id, change)
	return e, h.endpointError(err, id)
}

// endpointError turns an error of the shared endpoint changes into an
// answer: an *apiError is one already, anything else came from the store.
func (h *handler) endpointError(err error, id string) error {
	var ae *apiError
	if err == nil || errors.As(err, &ae) {
		return err
	}
	return storeError(err, endpointName(id))
}

// PATCH /v1/endpoints/{id}
func (h *handler) updateEndpoint(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	var p apiwire.EndpointPatch
	if err := decodeObject(body, &p, false); err != nil {
		return err
	}
	c := callerOf(r)
	// Checked first so that a deleted endpoint outside the scope answers
	// 404, not 410, and again in the change, against the row written.
	if err := h.guardEndpoint(r, id); err != nil {
		return err
	}
	e, err := h.modifyEndpoint(r.Context(), id, func(e *storage.Endpoint) (bool, error) {
		if !h.reaches(c, *e) {
			return false, notFound(endpointName(id))
		}
		target := p.URL != nil || p.Transport != nil || p.Config != nil
		// The URL as this API shows it, sent back unchanged (a client
		// that PATCHes the whole object it read), keeps the stored URL:
		// writing it would replace the hidden secrets with the mask.
		if p.URL != nil && *p.URL != redact.URL(e.URL) {
			e.URL = *p.URL
		}
		if p.Transport != nil {
			e.Transport = *p.Transport
		}
		if p.Config != nil {
			e.Config = *p.Config
			if e.Config == nil {
				e.Config = map[string]string{}
			}
		}
		if p.EventTypes != nil {
			e.EventTypes = *p.EventTypes
		}
		if p.FormIDs != nil {
			e.FormIDs = *p.FormIDs
		}
		if p.Description != nil {
			e.Description = *p.Description
		}
		if err := checkFields(e); err != nil {
			return false, err
		}
		if err := checkFormsInScope(c, e.FormIDs); err != nil {
			return false, err
		}
		if err := applyControls(p.EndpointControls, e, h.retryBounds); err != nil {
			return false, err
		}
		if p.Headers != nil {
			hs, err := applyHeaders(*p.Headers, e.Headers)
			if err != nil {
				return false, err
			}
			e.Headers = hs
		}
		// Only a change to where or how it sends needs the plugin's word;
		// renaming an endpoint must not fail because a plugin is down.
		if target {
			if err := h.checkTarget(r.Context(), *e); err != nil {
				return false, err
			}
		}
		return p.URL != nil || p.Transport != nil || p.Config != nil || p.EventTypes != nil ||
			p.FormIDs != nil || p.Description != nil || p.Headers != nil || controlsSet(p.EndpointControls), nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewEndpoint(e, h.now()))
	return nil
}

// POST /v1/endpoints/{id}/disable
func (h *handler) disableEndpoint(w http.ResponseWriter, r *http.Request) error {
	return h.setDisabled(w, r, true)
}

// POST /v1/endpoints/{id}/enable
func (h *handler) enableEndpoint(w http.ResponseWriter, r *http.Request) error {
	return h.setDisabled(w, r, false)
}

// setDisabled is idempotent: disabling a disabled endpoint keeps the time
// it was first disabled. So it keeps no Idempotency-Key record: a retry
// finds the endpoint as the first request left it and answers the same.
// It still checks the header's form, so a client that sends a key on
// every POST learns of a malformed one here too.
func (h *handler) setDisabled(w http.ResponseWriter, r *http.Request, disable bool) error {
	id := r.PathValue("id")
	if _, err := idempotencyKey(r); err != nil {
		return err
	}
	if err := h.emptyBody(w, r); err != nil {
		return err
	}
	if err := h.guardEndpoint(r, id); err != nil {
		return err
	}
	e, err := endpoint.SetDisabled(r.Context(), h.store, id, disable, h.now(), h.allow(r, id))
	if err != nil {
		return h.endpointError(err, id)
	}
	writeJSON(w, http.StatusOK, viewEndpoint(e, h.now()))
	return nil
}

// emptyBody accepts an action's body only when it is empty or {}.
func (h *handler) emptyBody(w http.ResponseWriter, r *http.Request) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	return decodeObject(body, &noFields{}, true)
}

// POST /v1/endpoints/{id}/rotate-secret
//
// The new secret signs from now on; every secret that was active keeps
// signing beside it for SecretRotationGrace (endpoint.RotateSecret), up
// to endpoint.MaxLiveSecrets in all: past it, the oldest is retired.
//
// With an Idempotency-Key, a repeat within the key's window rotates
// nothing and answers 200, marked Idempotent-Replayed, with the secret
// the first rotation made: only its SHA-256 is stored with the key, and
// the secret is read again from the endpoint. If a later rotation has
// replaced it since, the answer is 409 and the secret is not shown.
func (h *handler) rotateSecret(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	if err := h.emptyBody(w, r); err != nil {
		return err
	}
	if err := h.guardEndpoint(r, id); err != nil {
		return err
	}
	now := h.now()
	idem, err := h.idempotency(r, scoped(key, rotateScope), map[string]string{"endpoint_id": id})
	if err != nil {
		return err
	}
	rot, err := endpoint.RotateSecret(r.Context(), h.store, id, h.grace, now, idem, h.allow(r, id))
	if errors.Is(err, endpoint.ErrSecretReplaced) {
		return &apiError{Code: apiwire.CodeSecretRotated, cause: err,
			Message: fmt.Sprintf("the secret this %s's rotation of %s made was replaced by a later rotation, so it is not shown again (receivers given it would soon fail); rotate again with a new key to get a secret that signs",
				HeaderIdempotencyKey, endpointName(id))}
	}
	if err != nil {
		return h.endpointError(err, id)
	}
	if rot.Repeat {
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	writeJSON(w, http.StatusOK, apiwire.EndpointCreated{
		Endpoint: viewEndpoint(rot.Endpoint, now), Secret: rot.Secret, PreviousSecretsExpireAt: rot.PreviousSecretsExpireAt,
	})
	return nil
}
