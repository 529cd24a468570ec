package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hymical/hymical/sdk/boundtext"
	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/sdk/webhook"

	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/storage"
)

// Page sizes of the deliveries list.
const (
	defaultPageSize = 50
	maxPageSize     = 500
	// maxIDBytes bounds an id typed into a filter.
	maxIDBytes = 128
)

// The "failed in the last 24 h" count pages through failed deliveries
// created since then, failedPageSize at a time (the store's own page cap),
// and stops after failedCountCap rows (11 queries, 10,001 ids at most):
// past that the overview says "at least", so an incident with a huge
// backlog costs the overview a bounded read instead of a scan of
// everything. No Store method counts by filter, and storage is not ours
// to change here.
const (
	failedWindow   = 24 * time.Hour
	failedPageSize = 1000
	failedCountCap = 10 * failedPageSize
)

// cursorPattern is a delivery id, which is what a cursor is.
var cursorPattern = regexp.MustCompile(`^dlv_[0-9a-f]{32}$`)

// endpointCursorPattern is an endpoint id, the cursor of the endpoints page.
var endpointCursorPattern = regexp.MustCompile(`^ep_[0-9a-f]{32}$`)

// deliveryStates are the delivery states in the order the pages show them.
func deliveryStates() []storage.DeliveryState {
	return []storage.DeliveryState{storage.StatePending, storage.StateProcessing, storage.StateDelivered, storage.StateFailed}
}

type stateCount struct {
	State storage.DeliveryState
	Count int64
	// Link lists the deliveries in this state.
	Link string
}

type overviewData struct {
	base
	States []stateCount
	Total  int64
	Due    int64
	// Failed24h is the count of deliveries created in the last 24 h that
	// are failed now; Failed24hCapped says the count stopped at its cap.
	Failed24h       int
	Failed24hCapped bool
	Failed24hLink   string
	Disabled        []endpointRow
	Endpoints       int
}

// GET /console/
func (h *handler) overview(w http.ResponseWriter, r *http.Request, a authResult) error {
	ctx := r.Context()
	now := h.now()
	st, err := h.store.DeliveryStats(ctx, now)
	if err != nil {
		return storeError(err, "delivery counts")
	}
	data := overviewData{base: h.base(a, "overview", "Overview"), Due: st.Due}
	for _, s := range deliveryStates() {
		n := st.ByState[s]
		data.Total += n
		data.States = append(data.States, stateCount{State: s, Count: n, Link: h.deliveriesURL(filterForm{State: string(s)}, "")})
	}
	// Whole minutes, so the count and the link (whose date field keeps
	// minutes) mean the same window.
	since := now.Add(-failedWindow).UTC().Truncate(time.Minute)
	data.Failed24h, data.Failed24hCapped, err = countFailedSince(ctx, h.store, since, failedPageSize, failedCountCap)
	if err != nil {
		return storeError(err, "failed deliveries")
	}
	data.Failed24hLink = h.deliveriesURL(filterForm{State: string(storage.StateFailed), CreatedAfter: formatInputTime(since)}, "")
	eps, err := h.store.EndpointList(ctx)
	if err != nil {
		return storeError(err, "endpoints")
	}
	data.Endpoints = len(eps)
	for _, e := range eps {
		if e.DisabledAt != nil {
			data.Disabled = append(data.Disabled, viewEndpoint(e, now))
		}
	}
	h.render(w, http.StatusOK, "overview", data)
	return nil
}

// countFailedSince counts failed deliveries created at or after since,
// reading pages of pageSize and at most limit rows; capped says it stopped
// there with more left unread.
func countFailedSince(ctx context.Context, store Store, since time.Time, pageSize, limit int) (n int, capped bool, err error) {
	cursor := ""
	for n < limit {
		want := min(pageSize, limit-n)
		page, err := store.DeliveryList(ctx, storage.DeliveryListParams{
			Filter: storage.DeliveryFilter{State: storage.StateFailed, CreatedAfter: since},
			Before: cursor, Limit: want,
		})
		if err != nil {
			return 0, false, err
		}
		n += len(page)
		if len(page) < want {
			return n, false, nil
		}
		cursor = page[len(page)-1].ID
	}
	// Exactly limit rows may be all there are: one more row says.
	more, err := store.DeliveryList(ctx, storage.DeliveryListParams{
		Filter: storage.DeliveryFilter{State: storage.StateFailed, CreatedAfter: since}, Before: cursor, Limit: 1,
	})
	if err != nil {
		return 0, false, err
	}
	return n, len(more) > 0, nil
}

// filterForm is the deliveries filter as typed into the form, and as it
// goes into links.
type filterForm struct {
	State, EndpointID, FormID, EventID, CreatedAfter, CreatedBefore string
}

// values are the non-empty fields as query parameters, in a fixed order.
func (f filterForm) values() url.Values {
	v := url.Values{}
	for _, kv := range [...][2]string{
		{"state", f.State}, {"endpoint_id", f.EndpointID}, {"form_id", f.FormID}, {"event_id", f.EventID},
		{"created_after", f.CreatedAfter}, {"created_before", f.CreatedBefore},
	} {
		if kv[1] != "" {
			v.Set(kv[0], kv[1])
		}
	}
	return v
}

// deliveriesURL is the list filtered by f, from cursor on.
func (h *handler) deliveriesURL(f filterForm, cursor string) string {
	v := f.values()
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	if len(v) == 0 {
		return h.prefix + "/deliveries"
	}
	return h.prefix + "/deliveries?" + v.Encode()
}

// readFilter reads and checks a filter from form or query values. The
// form keeps what was typed, so a refused filter can be shown for fixing.
func readFilter(v url.Values) (filterForm, storage.DeliveryFilter, *pageError) {
	f := filterForm{
		State: strings.TrimSpace(v.Get("state")), EndpointID: strings.TrimSpace(v.Get("endpoint_id")),
		FormID: strings.TrimSpace(v.Get("form_id")), EventID: strings.TrimSpace(v.Get("event_id")),
		CreatedAfter: strings.TrimSpace(v.Get("created_after")), CreatedBefore: strings.TrimSpace(v.Get("created_before")),
	}
	sf := storage.DeliveryFilter{State: storage.DeliveryState(f.State), EndpointID: f.EndpointID, FormID: f.FormID, EventID: f.EventID}
	if f.State != "" && !sf.State.Valid() {
		return f, sf, badInput("Unknown state", "State %q is not one of pending, processing, delivered or failed.", clip(f.State))
	}
	for _, id := range [...]struct{ name, v string }{{"Endpoint", f.EndpointID}, {"Form id", f.FormID}, {"Event id", f.EventID}} {
		if len(id.v) > maxIDBytes {
			return f, sf, badInput("Id too long", "%s is %d characters long; ids are at most %d.", id.name, len(id.v), maxIDBytes)
		}
	}
	var err error
	if sf.CreatedAfter, err = parseInputTime(f.CreatedAfter); err != nil {
		return f, sf, badInput("Bad date", "Created after: %v", err)
	}
	if sf.CreatedBefore, err = parseInputTime(f.CreatedBefore); err != nil {
		return f, sf, badInput("Bad date", "Created before: %v", err)
	}
	if !sf.CreatedAfter.IsZero() && !sf.CreatedBefore.IsZero() && !sf.CreatedAfter.Before(sf.CreatedBefore) {
		return f, sf, badInput("Empty date range", "Created after (%s) is not before created before (%s), so nothing can match; swap them or widen the range.",
			f.CreatedAfter, f.CreatedBefore)
	}
	return f, sf, nil
}

// parseInputTime reads a date field: what a browser's datetime-local field
// sends (read as UTC, which the label says), RFC 3339 with a zone, or a
// bare date.
func parseInputTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range [...]string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano, "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a date and time; pick one in the field or write it as 2026-05-01T14:30 (UTC)", clip(s))
}

// formatInputTime writes t the way a datetime-local field shows it.
func formatInputTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05")
}

type deliveryRow struct {
	ID, EndpointID, EndpointLabel, EventID string
	State                                  storage.DeliveryState
	Attempts, CycleAttempts                int
	CreatedAt                              time.Time
	CompletedAt                            *time.Time
	NextAttemptAt                          time.Time
	ClaimExpiresAt                         *time.Time
	// LastError is why the delivery last fell short: why its last claim
	// sent nothing, or else its latest attempt's error; masked and cut
	// to maxLastErrorShown. Its page has the whole text.
	LastError string
}

// maxLastErrorShown bounds the error a list shows per row, so one
// plugin's long message does not widen the whole table.
const maxLastErrorShown = 160

// lastError is the text of a delivery's last-error column: the unsent
// reason when there is one (an attempt would have cleared it, so it is
// the newer), or else the latest attempt's error, masked and bounded.
func lastError(unsent string, latest storage.Attempt) string {
	msg := unsent
	if msg == "" {
		msg = latest.Error
	}
	return boundtext.Bound(redact.Text(msg), maxLastErrorShown)
}

type endpointOption struct {
	ID, Label string
}

type deliveriesData struct {
	base
	Filter    filterForm
	States    []storage.DeliveryState
	Endpoints []endpointOption
	Rows      []deliveryRow
	// Error says why the filter was refused; Rows is empty then.
	Error *pageError
	// NextURL is the next (older) page; FirstURL the first page, when this
	// is a later one.
	NextURL, FirstURL string
	Limit             int
	// BulkReplay offers replaying every failed delivery the filter
	// matches; the hidden fields carry the filter.
	BulkReplay   bool
	BulkFields   url.Values
	MaxBulk      int
	FilterActive bool
}

// GET /console/deliveries
func (h *handler) deliveries(w http.ResponseWriter, r *http.Request, a authResult) error {
	ctx := r.Context()
	q := r.URL.Query()
	data := deliveriesData{base: h.base(a, "deliveries", "Deliveries"), States: deliveryStates(), MaxBulk: maxBulkReplay}
	switch q.Get("done") {
	case "replayed":
		n, _ := strconv.Atoi(q.Get("n"))
		data.Flash = fmt.Sprintf("Replayed %d failed %s: pending and due now.", n, plural(n, "delivery", "deliveries"))
	}
	eps, err := h.visibleEndpoints(ctx, a)
	if err != nil {
		return storeError(err, "endpoints")
	}
	form, filter, perr := readFilter(q)
	h.narrow(a, &filter)
	data.Filter = form
	labels := map[string]string{}
	for _, e := range eps {
		labels[e.ID] = endpointLabel(e)
		data.Endpoints = append(data.Endpoints, endpointOption{ID: e.ID, Label: e.ID + " — " + endpointLabel(e)})
	}
	if _, known := labels[form.EndpointID]; form.EndpointID != "" && !known {
		// An id from a link or an endpoint since removed: the select must
		// still show the filter that is in force.
		data.Endpoints = append(data.Endpoints, endpointOption{ID: form.EndpointID, Label: form.EndpointID + " (no such endpoint now)"})
	}
	data.FilterActive = len(form.values()) > 0
	status := http.StatusOK
	limit, cursor := defaultPageSize, q.Get("cursor")
	if perr == nil && q.Get("limit") != "" {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > maxPageSize {
			perr = badInput("Bad page size", "Page size %q is not a number from 1 to %d.", clip(q.Get("limit")), maxPageSize)
		}
		limit = n
	}
	if perr == nil && cursor != "" && !cursorPattern.MatchString(cursor) {
		perr = badInput("Bad page link", "The page cursor %q is not one the console made.", clip(cursor))
	}
	if perr != nil {
		perr.Advice = "Fix the filter and apply it again, or clear it."
		data.Error, status = perr, perr.Status
		h.render(w, status, "deliveries", data)
		return nil
	}
	data.Limit = limit
	// One more than the page tells whether there is a next page.
	ds, err := h.store.DeliveryList(ctx, storage.DeliveryListParams{Filter: filter, Before: cursor, Limit: limit + 1})
	if err != nil {
		return storeError(err, "deliveries")
	}
	for i, d := range ds {
		if i == limit {
			data.NextURL = withLimit(h.deliveriesURL(form, ds[limit-1].ID), limit)
			break
		}
		data.Rows = append(data.Rows, deliveryRow{
			ID: d.ID, EndpointID: d.EndpointID, EndpointLabel: labels[d.EndpointID], EventID: d.EventID, State: d.State,
			Attempts: d.Attempts, CycleAttempts: d.CycleAttempts, CreatedAt: d.CreatedAt, CompletedAt: d.CompletedAt, NextAttemptAt: d.NextAttemptAt,
			ClaimExpiresAt: d.ClaimExpiresAt,
		})
	}
	if err := h.fillLastErrors(ctx, data.Rows, ds); err != nil {
		return err
	}
	if cursor != "" {
		data.FirstURL = withLimit(h.deliveriesURL(form, ""), limit)
	}
	if filter.State == storage.StateFailed {
		data.BulkReplay, data.BulkFields = true, form.values()
	}
	h.render(w, status, "deliveries", data)
	return nil
}

func withLimit(u string, limit int) string {
	if limit == defaultPageSize {
		return u
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + "limit=" + strconv.Itoa(limit)
}

type attemptRow struct {
	storage.Attempt
	Duration time.Duration
	TraceURL string
}

type deliveryData struct {
	base
	D        storage.Delivery
	Event    storage.Event
	Endpoint *endpointRow
	Attempts []attemptRow
	Replays  []storage.Replay
	Terminal bool
	// Payload is the body the delivery's requests carry, as signed, up
	// to maxPayloadShown bytes; PayloadCut counts the bytes left out.
	Payload    string
	PayloadCut int
}

// maxPayloadShown bounds the body a delivery's page shows: a payload may
// be as large as the API's body limit, and a page that size helps nobody
// read it. GET /v1/deliveries/{id}/payload gives it whole.
const maxPayloadShown = 64 << 10

// shownPayload is p cut to at most limit bytes, on a character boundary so
// the page shows no broken character, and how many bytes were cut.
func shownPayload(p []byte, limit int) (string, int) {
	if len(p) <= limit {
		return string(p), 0
	}
	n := limit
	for n > 0 && !utf8.RuneStart(p[n]) {
		n--
	}
	return string(p[:n]), len(p) - n
}

// fillLastErrors sets each row's LastError from ds, the deliveries the
// rows show (and perhaps one more), reading the latest attempts of the
// page in one read.
func (h *handler) fillLastErrors(ctx context.Context, rows []deliveryRow, ds []storage.Delivery) error {
	var tried []string
	for _, d := range ds[:len(rows)] {
		if d.Attempts > 0 && d.UnsentReason == "" {
			tried = append(tried, d.ID)
		}
	}
	latest, err := h.store.AttemptLatest(ctx, tried)
	if err != nil {
		return storeError(err, "the deliveries' latest attempts")
	}
	for i := range rows {
		rows[i].LastError = lastError(ds[i].UnsentReason, latest[ds[i].ID])
	}
	return nil
}

// GET /console/deliveries/{id}
func (h *handler) delivery(w http.ResponseWriter, r *http.Request, a authResult) error {
	ctx := r.Context()
	id := r.PathValue("id")
	d, ev, err := h.deliveryFor(r, a, id)
	if err != nil {
		return withLink(storeError(err, deliveryName(id)), h.prefix+"/deliveries", "Find it in the deliveries list")
	}
	data := deliveryData{base: h.base(a, "deliveries", "Delivery "+d.ID), D: d, Event: ev, Terminal: d.State.Terminal()}
	switch r.URL.Query().Get("done") {
	case "replayed":
		data.Flash = "Replayed: the delivery is pending and due now. Reload to follow it."
	case "test":
		data.Flash = "Test event sent: this is its delivery. Reload to see its attempt."
	}
	data.Payload, data.PayloadCut = shownPayload(data.Event.Payload, maxPayloadShown)
	// A delivery in the scope may have gone out through an endpoint that
	// is not (one that also names other forms): its id shows, not its URL.
	switch e, err := h.store.EndpointGet(ctx, d.EndpointID); {
	case err == nil && !h.seesEndpoint(a, e):
	case err == nil:
		row := viewEndpoint(e, h.now())
		data.Endpoint = &row
	case !errors.Is(err, storage.ErrNotFound):
		return storeError(err, "endpoint of "+deliveryName(id))
	}
	as, err := h.store.AttemptList(ctx, id)
	if err != nil {
		return storeError(err, deliveryName(id))
	}
	// A plugin's words may quote a URL (a third-party plugin's, or a row
	// recorded before the worker masked what it records).
	data.D.UnsentReason = redact.Text(d.UnsentReason)
	for _, at := range as {
		at.Error = redact.Text(at.Error)
		data.Attempts = append(data.Attempts, attemptRow{Attempt: at, Duration: at.FinishedAt.Sub(at.StartedAt), TraceURL: h.traceURL.URL(at.TraceID)})
	}
	if data.Replays, err = h.store.ReplayList(ctx, id); err != nil {
		return storeError(err, deliveryName(id))
	}
	h.render(w, http.StatusOK, "delivery", data)
	return nil
}

// endpointRow is an endpoint as the pages show it: never a secret value,
// and its URL's credentials and secret-named parameters, and its secret
// settings, redacted.
type endpointRow struct {
	ID, Transport, URL, Description string
	// URLHidden names what URL hides ("userinfo, query:token"); empty
	// when nothing is.
	URLHidden           string
	Label               string
	Config              map[string]string
	EventTypes, FormIDs []string
	DisabledAt          *time.Time
	// DisabledReason is operator, gone or failing; FailingSince is when
	// the current run of failed attempts began.
	DisabledReason string
	FailingSince   *time.Time
	// Controls is the endpoint's limits, ordering and retry schedule in
	// words; empty when it has none.
	Controls []string
	// HeaderNames are the names of the endpoint's custom headers, in the
	// order they are sent. Their values are credentials and never shown.
	HeaderNames []string
	// Secrets is how many secrets sign now; RotatedUntil, when set, is
	// when the last rotated-out one stops.
	Secrets      int
	RotatedUntil *time.Time
	// Scheme is the signature scheme; PublicKeys, for v1a, the whpk_ key
	// of every active key, newest first: no secret, so always shown.
	Scheme     webhook.Scheme
	PublicKeys []endpoint.PublicKey
	CreatedAt  time.Time
	// DeletedAt is set for a deleted endpoint, which only a delivery's
	// page still shows.
	DeletedAt *time.Time
	// LastError is, while the endpoint is failing, why its newest delivery
	// that fell short did (storage.EndpointLastErrors), masked and cut to
	// maxLastErrorShown; empty otherwise. Only the endpoints list fills it.
	LastError string
}

func viewEndpoint(e storage.Endpoint, now time.Time) endpointRow {
	shown, hidden := redact.URLParts(e.URL)
	row := endpointRow{
		ID: e.ID, Transport: e.Transport, URL: shown, URLHidden: strings.Join(hidden, ", "), Description: e.Description, Label: endpointLabel(e),
		Config: redact.Map(e.Config), EventTypes: e.EventTypes, FormIDs: e.FormIDs, DisabledAt: e.DisabledAt, CreatedAt: e.CreatedAt,
		DeletedAt: e.DeletedAt,
	}
	for _, s := range e.Secrets {
		if !s.ActiveAt(now) {
			continue
		}
		row.Secrets++
		if s.ExpiresAt != nil && (row.RotatedUntil == nil || s.ExpiresAt.After(*row.RotatedUntil)) {
			at := *s.ExpiresAt
			row.RotatedUntil = &at
		}
	}
	for _, h := range e.Headers {
		row.HeaderNames = append(row.HeaderNames, h.Name)
	}
	row.Scheme = endpoint.Scheme(e)
	row.PublicKeys = endpoint.PublicKeys(e, now)
	row.DisabledReason, row.FailingSince = string(e.DisabledReason), e.FailingSince
	if e.RateLimit > 0 {
		row.Controls = append(row.Controls, fmt.Sprintf("at most %s sends a second, %d at once", strconv.FormatFloat(e.RateLimit, 'g', -1, 64), e.Burst()))
	}
	if e.MaxInFlight > 0 {
		row.Controls = append(row.Controls, fmt.Sprintf("at most %d in flight", e.MaxInFlight))
	}
	if e.Ordered {
		row.Controls = append(row.Controls, "ordered: one at a time")
	}
	if len(e.RetrySchedule) > 0 {
		delays := make([]string, len(e.RetrySchedule))
		for i, d := range e.RetrySchedule {
			delays[i] = d.String()
		}
		row.Controls = append(row.Controls, "retries after "+strings.Join(delays, ", "))
	}
	return row
}

// endpointLabel is how an endpoint is named in lists: its description, or
// else where it sends, with the URL's secrets hidden.
func endpointLabel(e storage.Endpoint) string {
	switch {
	case e.Description != "":
		return e.Description
	case e.URL != "":
		return redact.URL(e.URL)
	}
	return e.Transport
}

type endpointsData struct {
	base
	Endpoints []endpointRow
	// NextURL is the next (older) page; FirstURL the first page, when this
	// is a later one.
	NextURL, FirstURL string
}

// GET /console/endpoints
//
// Paged as the deliveries are: newest first, ?limit and ?cursor.
func (h *handler) endpoints(w http.ResponseWriter, r *http.Request, a authResult) error {
	q := r.URL.Query()
	limit, cursor := defaultPageSize, q.Get("cursor")
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			return withLink(badInput("Bad page size", "Page size %q is not a number from 1 to %d.", clip(v), maxPageSize),
				h.prefix+"/endpoints", "The first page of endpoints")
		}
		limit = n
	}
	if cursor != "" && !endpointCursorPattern.MatchString(cursor) {
		return withLink(badInput("Bad page link", "The page cursor %q is not one the console made.", clip(cursor)),
			h.prefix+"/endpoints", "The first page of endpoints")
	}
	// One more than the page tells whether there is a next page.
	eps, err := h.store.EndpointListPage(r.Context(), storage.EndpointListParams{Before: cursor, Limit: limit + 1, Forms: scopeForms(a)})
	if err != nil {
		return storeError(err, "endpoints")
	}
	data := endpointsData{base: h.base(a, "endpoints", "Endpoints")}
	if id := q.Get("id"); cursorLike(id) {
		switch q.Get("done") {
		case "disabled":
			data.Flash = "Disabled " + id + ": new events no longer fan out to it. Deliveries already made still go out."
		case "enabled":
			data.Flash = "Enabled " + id + ": new events fan out to it again."
		case "edited":
			data.Flash = "Saved " + id + "."
		case "deleted":
			data.Flash = "Deleted " + id + ": it gets no new deliveries; its deliveries and their attempts stay readable."
		}
	}
	now := h.now()
	// The store's scope filter has kept the other forms' endpoints out;
	// this keeps out the operator endpoint too.
	eps = slices.DeleteFunc(eps, func(e storage.Endpoint) bool { return !h.seesEndpoint(a, e) })
	for i, e := range eps {
		if i == limit {
			data.NextURL = withLimit(h.prefix+"/endpoints?cursor="+url.QueryEscape(eps[limit-1].ID), limit)
			break
		}
		data.Endpoints = append(data.Endpoints, viewEndpoint(e, now))
	}
	if err := h.fillEndpointErrors(r.Context(), data.Endpoints); err != nil {
		return err
	}
	if cursor != "" {
		data.FirstURL = withLimit(h.prefix+"/endpoints", limit)
	}
	h.render(w, http.StatusOK, "endpoints", data)
	return nil
}

// fillEndpointErrors sets the LastError of the rows whose endpoint is
// failing, in one read for the page; a healthy endpoint's row is not asked
// about, since there is nothing to show for it.
func (h *handler) fillEndpointErrors(ctx context.Context, rows []endpointRow) error {
	var failing []string
	for _, e := range rows {
		if e.FailingSince != nil {
			failing = append(failing, e.ID)
		}
	}
	if len(failing) == 0 {
		return nil
	}
	errs, err := h.store.EndpointLastErrors(ctx, failing)
	if err != nil {
		return storeError(err, "the endpoints' last errors")
	}
	for i := range rows {
		if msg, ok := errs[rows[i].ID]; ok {
			rows[i].LastError = boundtext.Bound(redact.Text(msg), maxLastErrorShown)
		}
	}
	return nil
}

type deleteData struct {
	base
	Endpoint endpointRow
	// Pending and Processing count its open deliveries, up to maxOpenCount
	// each; More says a count stopped there.
	Pending, Processing int
	More                bool
	// OperatorEndpoint says it is endpoints.operator_endpoint, which is
	// not deleted. (Not "Operator": base has that, the name in the header.)
	OperatorEndpoint bool
}

// maxOpenCount bounds the count of an endpoint's open deliveries that the
// delete page reads.
const maxOpenCount = 1000

// GET /console/endpoints/{id}/delete
//
// The confirmation: what deleting will do to this endpoint's open
// deliveries, and the form that does it.
func (h *handler) confirmDelete(w http.ResponseWriter, r *http.Request, a authResult) error {
	ctx := r.Context()
	id := r.PathValue("id")
	e, err := h.endpointFor(r, a, id)
	if err == nil && e.DeletedAt != nil {
		err = storage.ErrDeleted
	}
	if err != nil {
		return withLink(storeError(err, endpointName(id)), h.prefix+"/endpoints", "Back to the endpoints")
	}
	data := deleteData{base: h.base(a, "endpoints", "Delete endpoint "+e.ID), Endpoint: viewEndpoint(e, h.now()),
		OperatorEndpoint: h.operatorEndpoint != "" && e.ID == h.operatorEndpoint}
	for _, st := range []storage.DeliveryState{storage.StatePending, storage.StateProcessing} {
		ds, err := h.store.DeliveryList(ctx, storage.DeliveryListParams{
			Filter: storage.DeliveryFilter{EndpointID: e.ID, State: st}, Limit: maxOpenCount + 1})
		if err != nil {
			return storeError(err, "deliveries of "+endpointName(id))
		}
		n := min(len(ds), maxOpenCount)
		data.More = data.More || len(ds) > maxOpenCount
		if st == storage.StatePending {
			data.Pending = n
		} else {
			data.Processing = n
		}
	}
	h.render(w, http.StatusOK, "endpoint_delete", data)
	return nil
}

// cursorLike accepts an id for a confirmation message: short and made only
// of the characters ids have.
func cursorLike(id string) bool {
	if id == "" || len(id) > maxIDBytes {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func deliveryName(id string) string { return fmt.Sprintf("delivery %q", clip(id)) }
func endpointName(id string) string { return fmt.Sprintf("endpoint %q", clip(id)) }

func withLink(pe *pageError, link, text string) *pageError {
	if pe.Link == "" {
		pe.Link, pe.LinkText = link, text
	}
	return pe
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// clip shortens a value for quoting in a message.
func clip(s string) string { return boundtext.Bound(s, 64) }

// visibleEndpoints are the endpoints a may see, for the deliveries filter:
// all of them for the operator; for a portal session, those of its scope,
// up to the store's page (a scope names at most storage.MaxAccessForms
// forms, so more endpoints than that is unusual).
func (h *handler) visibleEndpoints(ctx context.Context, a authResult) ([]storage.Endpoint, error) {
	if a.scope == nil {
		return h.store.EndpointList(ctx)
	}
	eps, err := h.store.EndpointListPage(ctx, storage.EndpointListParams{Limit: failedPageSize, Forms: scopeForms(a)})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(eps, func(e storage.Endpoint) bool { return !h.seesEndpoint(a, e) }), nil
}
