package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"

	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/storage"
)

// Transports checks an endpoint with its transport plugin before it is
// stored, as the API does (pluginhost.Host).
type Transports interface {
	Validate(ctx context.Context, name string, e transport.Endpoint) error
}

// formTransport is the transport of the endpoints the add page makes: its
// form asks for a URL, which is the http transport's target.
const formTransport = "http"

// validateTimeout bounds asking a plugin about one endpoint, as in the API.
const validateTimeout = 10 * time.Second

// endpointFormData is the add and edit form.
type endpointFormData struct {
	base
	// ID is empty when adding.
	ID string
	// URLShown is the stored URL with its secrets hidden, when editing: the
	// URL field starts empty and keeps the stored URL unless filled in.
	URLShown    string
	URL         string
	Description string
	EventTypes  string
	// Headers is the custom headers field: a "Name: value" a line, the
	// stored values shown as redact.Mask, which keeps them.
	Headers string
	// Forms are the forms the endpoint may name, each with whether it does:
	// a portal session chooses among its scope's.
	Forms []formChoice
	// FreeForms is set for the operator, whose forms are not a known list:
	// FormsText is then a text field of form ids, empty for every form.
	FreeForms bool
	FormsText string
	// Controls is set for the operator: the form has the delivery
	// controls the API's PATCH takes, as text (empty is 0).
	Controls                          bool
	RateLimit, RateBurst, MaxInFlight string
	Ordered                           bool
	RetrySchedule                     string
	// Error says what to fix; Field names the input it is about.
	Error *pageError
	Field string
}

type formChoice struct {
	ID      string
	Checked bool
}

// formsField fills data's forms field: for a portal session the scope's
// forms, marked as named says; for the operator a text field holding text.
func formsField(data *endpointFormData, a authResult, named []string, text string) {
	if a.scope == nil {
		data.FreeForms, data.FormsText = true, text
		return
	}
	data.Forms = make([]formChoice, 0, len(a.scope.Forms))
	for _, f := range a.scope.Forms {
		data.Forms = append(data.Forms, formChoice{ID: f, Checked: slices.Contains(named, f)})
	}
}

// controlsField fills data's controls for the operator from what the
// form sent, or from e's values when sent is nil.
func controlsField(data *endpointFormData, a authResult, e storage.Endpoint, sent url.Values) {
	if a.scope != nil {
		return
	}
	data.Controls = true
	if sent != nil {
		data.RateLimit, data.RateBurst, data.MaxInFlight = sent.Get("rate_limit"), sent.Get("rate_burst"), sent.Get("max_in_flight")
		data.Ordered, data.RetrySchedule = sent.Get("ordered") != "", sent.Get("retry_schedule")
		return
	}
	data.RateLimit = strconv.FormatFloat(e.RateLimit, 'g', -1, 64)
	data.RateBurst, data.MaxInFlight = strconv.Itoa(e.RateBurst), strconv.Itoa(e.MaxInFlight)
	data.Ordered = e.Ordered
	parts := make([]string, len(e.RetrySchedule))
	for i, d := range e.RetrySchedule {
		parts[i] = d.String()
	}
	data.RetrySchedule = strings.Join(parts, ", ")
}

// readControls reads the operator's controls fields, each set as given
// (empty is 0, and an empty schedule the server's), and applies them with
// endpoint.ApplyControls, the API's rules.
func readControls(v url.Values, e *storage.Endpoint, retry endpoint.RetryBounds) error {
	var c endpoint.Controls
	num := func(field string) (string, bool) {
		s := strings.TrimSpace(v.Get(field))
		return s, s != ""
	}
	if s, ok := num("rate_limit"); ok {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return &endpoint.FieldError{Field: "rate_limit", Message: fmt.Sprintf("rate_limit %q is not a number: give sends per second, such as 10 or 0.5, or 0 for no limit", clip(s))}
		}
		c.RateLimit = &f
	} else {
		c.RateLimit = new(float64)
	}
	for _, in := range []struct {
		field string
		to    **int
	}{{"rate_burst", &c.RateBurst}, {"max_in_flight", &c.MaxInFlight}} {
		n := 0
		if s, ok := num(in.field); ok {
			var err error
			if n, err = strconv.Atoi(s); err != nil {
				return &endpoint.FieldError{Field: in.field, Message: fmt.Sprintf("%s %q is not a whole number: give one, or 0 for none", in.field, clip(s))}
			}
		}
		*in.to = &n
	}
	ordered := v.Get("ordered") != ""
	c.Ordered = &ordered
	schedule := splitList(v.Get("retry_schedule"))
	c.RetrySchedule = &schedule
	return endpoint.ApplyControls(c, e, retry)
}

// splitList splits a text field of names, as commas or white space
// separate them.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}

// GET /console/endpoints/new, /portal/endpoints/new
func (h *handler) newEndpointPage(w http.ResponseWriter, r *http.Request, a authResult) error {
	if a.scope != nil && a.scope.ReadOnly {
		return errReadOnly()
	}
	data := endpointFormData{base: h.base(a, "endpoints", "Add an endpoint")}
	formsField(&data, a, nil, "")
	controlsField(&data, a, storage.Endpoint{}, nil)
	if len(data.Forms) == 1 {
		data.Forms[0].Checked = true
	}
	h.render(w, http.StatusOK, "endpoint_form", data)
	return nil
}

// GET /console/endpoints/{id}/edit, /portal/endpoints/{id}/edit
func (h *handler) editEndpointPage(w http.ResponseWriter, r *http.Request, a authResult) error {
	if a.scope != nil && a.scope.ReadOnly {
		return errReadOnly()
	}
	id := r.PathValue("id")
	e, err := h.endpointFor(r, a, id)
	if err == nil && e.DeletedAt != nil {
		err = storage.ErrDeleted
	}
	if err != nil {
		return withLink(storeError(err, endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	data := endpointFormData{
		base: h.base(a, "endpoints", "Edit endpoint "+e.ID), ID: e.ID, URLShown: redact.URL(e.URL),
		Description: e.Description, EventTypes: strings.Join(e.EventTypes, ", "), Headers: headerLines(e.Headers),
	}
	formsField(&data, a, e.FormIDs, strings.Join(e.FormIDs, ", "))
	controlsField(&data, a, e, nil)
	h.render(w, http.StatusOK, "endpoint_form", data)
	return nil
}

// headerLines is the headers field for e: its names, values masked.
func headerLines(hs []storage.Header) string {
	lines := make([]string, len(hs))
	for i, h := range hs {
		lines[i] = h.Name + ": " + redact.Mask
	}
	return strings.Join(lines, "\n")
}

// readHeaders reads the headers field, a "Name: value" a line, as the
// API reads a headers list: a line whose value is empty or the mask keeps
// the value current has for that name, so an edit need not know the
// values; a line left out removes that header. The set is then checked by
// endpoint.CheckHeaders, whose words name the header and never a value.
func readHeaders(field string, current []storage.Header) ([]storage.Header, error) {
	var out []storage.Header
	for i, line := range strings.Split(strings.ReplaceAll(field, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" {
			return nil, &endpoint.FieldError{Field: "headers", Message: fmt.Sprintf("line %d of the headers is not written as Name: value", i+1)}
		}
		if value != "" && value != redact.Mask {
			out = append(out, storage.NewHeader(name, value))
			continue
		}
		j := slices.IndexFunc(current, func(h storage.Header) bool { return strings.EqualFold(h.Name, name) })
		if j < 0 {
			return nil, &endpoint.FieldError{Field: "headers", Message: fmt.Sprintf("header %q has no value, and the endpoint has no header of that name whose value it could keep: give the value", clip(name))}
		}
		out = append(out, storage.NewHeader(name, current[j].Reveal()))
	}
	if err := endpoint.CheckHeaders(out); err != nil {
		if errors.Is(err, endpoint.ErrInvalidHeader) {
			return nil, &endpoint.FieldError{Field: "headers", Message: strings.TrimPrefix(err.Error(), endpoint.ErrInvalidHeader.Error()+": ")}
		}
		return nil, err
	}
	return out, nil
}

// readEndpointForm reads the form's fields into e; an empty URL keeps the
// stored one when editing. The operator's forms are one text field, a
// portal session's a checkbox each, and only the operator's form has the
// controls.
func (h *handler) readEndpointForm(v url.Values, a authResult, e *storage.Endpoint, editing bool) error {
	hs, err := readHeaders(v.Get("headers"), e.Headers)
	if err != nil {
		return err
	}
	e.Headers = hs
	if u := strings.TrimSpace(v.Get("url")); u != "" || !editing {
		e.URL = u
	}
	e.Description = strings.TrimSpace(v.Get("description"))
	e.EventTypes = splitList(v.Get("event_types"))
	e.FormIDs = v["form_ids"]
	if a.scope == nil {
		e.FormIDs = splitList(v.Get("form_ids"))
		return readControls(v, e, h.retryBounds)
	}
	return nil
}

// checkEndpoint applies the API's rules (package endpoint), the scope's,
// and the transport's, in that order, to what the form gave.
func (h *handler) checkEndpoint(ctx context.Context, a authResult, e *storage.Endpoint, urlChanged bool) error {
	if err := endpoint.CheckFields(e); err != nil {
		return err
	}
	if a.scope != nil && !a.scope.AllowsForms(e.FormIDs) {
		return &endpoint.FieldError{Field: "form_ids", Message: "choose at least one of your forms: an endpoint here sends the events of the forms it names, and only of yours"}
	}
	if !urlChanged {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, validateTimeout)
	defer cancel()
	err := h.transports.Validate(ctx, e.Transport, transport.Endpoint{URL: e.URL, Config: e.Config})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transport.ErrRejected):
		return &endpoint.FieldError{Field: "url", Message: "the " + e.Transport + " transport refused this URL: " + refusalReason(err)}
	}
	return &pageError{Status: http.StatusServiceUnavailable, Title: "The endpoint could not be checked",
		Message: fmt.Sprintf("The %s transport plugin could not check this endpoint, so nothing was saved.", e.Transport),
		Advice:  "Try again in a moment.", cause: err, retryAfter: awayRetryAfter}
}

// refusalReason is the plugin's own words from a refusal, without the
// layers the host and the gRPC shim wrap around them.
func refusalReason(err error) string {
	msg := err.Error()
	marker := transport.ErrRejected.Error() + ": "
	if i := strings.LastIndex(msg, marker); i >= 0 {
		msg = strings.TrimPrefix(msg[i+len(marker):], "endpoint: ")
	}
	return transport.BoundError(redact.Text(msg))
}

// refuseForm shows the form again with what to fix, if err is about a
// field; any other error is returned for an error page.
func (h *handler) refuseForm(w http.ResponseWriter, data endpointFormData, err error) error {
	var fe *endpoint.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	// The rules speak of the API's fields; the form's are named the same,
	// but a sentence starts with a capital.
	msg := fe.Message
	if rest, ok := strings.CutPrefix(msg, "url "); ok {
		msg = "The URL " + rest
	}
	// A control's name (rate_limit) is the input's name, kept as written.
	if !strings.Contains(fe.Field, "_") || !strings.HasPrefix(msg, fe.Field) {
		msg = strings.ToUpper(msg[:1]) + msg[1:]
	}
	data.Error = &pageError{Status: http.StatusBadRequest, Title: "Not saved", Message: msg + ".",
		Advice: "Correct it and save again. Nothing was changed."}
	data.Field = fe.Field
	h.render(w, http.StatusBadRequest, "endpoint_form", data)
	return nil
}

// POST /console/endpoints/new, /portal/endpoints/new
//
// The new endpoint signs with a fresh v1 secret, shown on the answer once.
func (h *handler) createEndpoint(w http.ResponseWriter, r *http.Request, a authResult) error {
	e := storage.Endpoint{Transport: formTransport, Config: map[string]string{}}
	err := h.readEndpointForm(r.PostForm, a, &e, false)
	data := endpointFormData{base: h.base(a, "endpoints", "Add an endpoint"), URL: e.URL, Description: e.Description,
		EventTypes: r.PostForm.Get("event_types"), Headers: r.PostForm.Get("headers")}
	formsField(&data, a, e.FormIDs, r.PostForm.Get("form_ids"))
	controlsField(&data, a, e, r.PostForm)
	if err == nil {
		err = h.checkEndpoint(r.Context(), a, &e, true)
	}
	if err != nil {
		return h.refuseForm(w, data, err)
	}
	secret, err := webhook.SchemeV1.NewKey()
	if err != nil {
		return errInternal(err)
	}
	e.Secrets = []storage.Secret{storage.NewSecret(secret, nil)}
	res, err := h.store.EndpointCreate(r.Context(), storage.EndpointCreateParams{Endpoint: e})
	if err != nil {
		return withLink(storeError(err, "new endpoint"), h.prefix+"/endpoints", "Back to the endpoints")
	}
	h.log.Info("endpoint added", "endpoint", res.Endpoint.ID, "actor", h.actorFor(a))
	h.render(w, http.StatusCreated, "rotated", rotatedData{
		base: h.base(a, "endpoints", "Endpoint added"), Endpoint: viewEndpoint(res.Endpoint, h.now()), Secret: secret, Created: true,
	})
	return nil
}

// POST /console/endpoints/{id}/edit, /portal/endpoints/{id}/edit
//
// The change is endpoint.Modify's, the API's: read, change, write if
// nobody changed it in between. The scope is checked on what is stored
// now and on what the change makes, so an edit can neither reach another
// scope's endpoint nor move one out of its own.
func (h *handler) updateEndpoint(w http.ResponseWriter, r *http.Request, a authResult) error {
	id := r.PathValue("id")
	cur, err := h.endpointFor(r, a, id)
	if err != nil {
		return withLink(storeError(err, endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	data := endpointFormData{base: h.base(a, "endpoints", "Edit endpoint "+id), ID: id, URLShown: redact.URL(cur.URL),
		Description: r.PostForm.Get("description"), EventTypes: r.PostForm.Get("event_types"), Headers: r.PostForm.Get("headers")}
	formsField(&data, a, r.PostForm["form_ids"], r.PostForm.Get("form_ids"))
	controlsField(&data, a, cur, r.PostForm)
	_, err = endpoint.Modify(r.Context(), h.store, id, func(e *storage.Endpoint) (bool, error) {
		if !h.seesEndpoint(a, *e) {
			return false, errOutOfScope
		}
		before := e.URL
		if err := h.readEndpointForm(r.PostForm, a, e, true); err != nil {
			return false, err
		}
		return true, h.checkEndpoint(r.Context(), a, e, e.URL != before)
	})
	if err != nil {
		if rerr := h.refuseForm(w, data, err); rerr == nil {
			return nil
		}
		return withLink(storeError(err, endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	h.log.Info("endpoint edited", "endpoint", id, "actor", h.actorFor(a))
	http.Redirect(w, r, h.prefix+"/endpoints?"+url.Values{"done": {"edited"}, "id": {id}}.Encode(), http.StatusSeeOther)
	return nil
}

func errReadOnly() *pageError {
	return &pageError{Status: http.StatusForbidden, Title: "This session can only look",
		Message: "Your portal link was made read-only, so nothing can be changed with it. Nothing was changed.",
		Advice:  "Ask the product that gave you the link for one that can make changes."}
}

// POST /console/endpoints/{id}/test, /portal/endpoints/{id}/test
//
// Sends a hymical.test event to this endpoint alone, as
// POST /v1/endpoints/{id}/test does: event.Test, stored with its one
// delivery, which the workers sign, send and record like any other. The
// answer is that delivery's page, where its attempts appear.
func (h *handler) sendTest(w http.ResponseWriter, r *http.Request, a authResult) error {
	id := r.PathValue("id")
	e, err := h.endpointFor(r, a, id)
	if err == nil && e.DeletedAt != nil {
		err = storage.ErrDeleted
	}
	if err != nil {
		return withLink(storeError(err, endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	ev, err := event.Test(e.ID, h.now())
	if err != nil {
		return errInternal(err)
	}
	res, err := h.store.EventCreate(r.Context(), ev)
	if err != nil {
		return withLink(storeError(err, "test event for "+endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	if len(res.Deliveries) != 1 {
		return errInternal(fmt.Errorf("a test event for %s made %d deliveries, want 1", id, len(res.Deliveries)))
	}
	d := res.Deliveries[0]
	h.log.Info("test event sent", "endpoint", id, "delivery", d.ID, "actor", h.actorFor(a))
	http.Redirect(w, r, h.prefix+"/deliveries/"+url.PathEscape(d.ID)+"?done=test", http.StatusSeeOther)
	return nil
}
