package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/console"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

func TestOverviewCountsStatesQueueFailuresAndDisabledEndpoints(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.endpoint("contact", "CRM")
	off := f.endpoint("survey", "Survey sink")
	ids := f.submit("contact", 5)
	f.settle(map[string]outcome{
		ids[0]: {kind: storage.OutcomeDelivered, status: 200},
		ids[1]: {kind: storage.OutcomePermanent, status: 400},
		ids[2]: {kind: storage.OutcomePermanent, status: 410},
	})
	s := f.login("alice")
	f.post(s, "/console/endpoints/"+off.ID+"/disable", nil).must(t, http.StatusSeeOther)

	p := f.get(s, "/console/").must(t, http.StatusOK)
	for state, n := range map[string]string{"pending": "2", "processing": "0", "delivered": "1", "failed": "2"} {
		re := regexp.MustCompile(`href="/console/deliveries\?state=` + state + `"><span class="n">` + n + `</span>`)
		if !re.MatchString(p.body) {
			t.Errorf("overview does not show %s %s:\n%s", n, state, p.body)
		}
	}
	p.contains(t, `<span class="n">5</span> <span class="label">in all</span>`)
	// The two released deliveries are due now: the queue depth.
	if !regexp.MustCompile(`Due now \(queue depth\)</dt><dd><span class="n">2</span>`).MatchString(p.body) {
		t.Errorf("overview does not show 2 due:\n%s", p.body)
	}
	if !regexp.MustCompile(`Failed in the last 24 h</dt><dd><a href="/console/deliveries\?created_after=[0-9T%:A-F-]+&amp;state=failed"><span class="n">2</span>`).MatchString(p.body) {
		t.Errorf("overview does not show 2 failed in 24 h with a link to them:\n%s", p.body)
	}
	p.contains(t, "<code>"+off.ID+"</code></a> Survey sink, disabled")
	if !regexp.MustCompile(`Disabled endpoints</dt><dd><a href="/console/endpoints"><span class="n">1</span></a> <span class="help">of 2;`).MatchString(p.body) {
		t.Errorf("overview does not show 1 of 2 endpoints disabled:\n%s", p.body)
	}

	// The 24 h link lists exactly those two.
	link := html.UnescapeString(regexp.MustCompile(`Failed in the last 24 h</dt><dd><a href="([^"]+)"`).FindStringSubmatch(p.body)[1])
	list := f.get(s, link).must(t, http.StatusOK)
	if got := deliveryIDs(list.body); !sameSet(got, []string{ids[1], ids[2]}) {
		t.Errorf("the failed-in-24h link lists %v, want %v", got, ids[1:3])
	}
}

// deliveryIDs are the deliveries a list page shows, in order.
func deliveryIDs(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<th scope="row"><a href="/console/deliveries/(dlv_[0-9a-f]+)">`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestDeliveriesListFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	crm := f.endpoint("contact", "CRM")
	f.endpoint("survey", "Survey sink")
	contact := f.submit("contact", 3)
	survey := f.submit("survey", 2)
	f.failAll(contact[0], survey[0])
	s := f.login("alice")
	ev, err := f.store.DeliveryGet(t.Context(), contact[1])
	if err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(contact), survey...)
	future := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04")
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	tests := []struct {
		query string
		want  []string
	}{
		{"", all},
		{"state=failed", []string{contact[0], survey[0]}},
		{"state=pending", []string{contact[1], contact[2], survey[1]}},
		{"endpoint_id=" + crm.ID, contact},
		{"form_id=survey", survey},
		{"event_id=" + ev.EventID, []string{contact[1]}},
		{"state=failed&form_id=contact", []string{contact[0]}},
		{"created_after=" + url.QueryEscape(past), all},
		{"created_after=" + future, nil},
		{"created_before=" + future, all},
		{"endpoint_id=ep_gone", nil},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			p := f.get(s, "/console/deliveries?"+tt.query).must(t, http.StatusOK)
			if got := deliveryIDs(p.body); !sameSet(got, tt.want) {
				t.Errorf("lists %v, want %v", got, tt.want)
			}
			// The form shows the filter that is in force.
			q, _ := url.ParseQuery(tt.query)
			if st := q.Get("state"); st != "" && !strings.Contains(p.body, `<option value="`+st+`" selected>`) {
				t.Errorf("the state %s is not selected in the form", st)
			}
			if ep := q.Get("endpoint_id"); ep != "" && !strings.Contains(p.body, `<option value="`+ep+`" selected>`) {
				t.Errorf("the endpoint %s is not selected in the form", ep)
			}
		})
	}
}

func TestDeliveriesListRefusesBadFiltersAndSaysWhy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	s := f.login("alice")
	tests := map[string][]string{
		"state=bogus":             {"State &#34;bogus&#34; is not one of pending, processing, delivered or failed"},
		"created_after=yesterday": {"Created after", "is not a date and time", "2026-05-01T14:30"},
		"created_after=2026-05-02T00:00&created_before=2026-05-01T00:00": {"is not before", "swap them"},
		"cursor=not-a-cursor":                     {"not one the console made"},
		"limit=0":                                 {"Page size", "1 to 500"},
		"form_id=" + strings.Repeat("x", 200):     {"Form id is 200 characters long"},
		"state=%3Cscript%3Ealert(1)%3C/script%3E": {"&lt;script&gt;"},
	}
	for query, want := range tests {
		p := f.get(s, "/console/deliveries?"+query).must(t, http.StatusBadRequest)
		p.contains(t, append(want, `role="alert"`, "Fix the filter")...).lacks(t, "<script>")
	}
}

func TestDeliveriesListPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.endpoint("contact", "CRM")
	ids := f.submit("contact", 7)
	f.failAll(ids...)
	s := f.login("alice")
	var seen []string
	next := "/console/deliveries?state=failed&limit=3"
	pages := 0
	for next != "" {
		pages++
		p := f.get(s, next).must(t, http.StatusOK)
		got := deliveryIDs(p.body)
		if len(got) > 3 || len(got) == 0 {
			t.Fatalf("page %d shows %d deliveries, want 1 to 3", pages, len(got))
		}
		seen = append(seen, got...)
		if pages > 1 && !strings.Contains(p.body, "First page (newest)") {
			t.Errorf("page %d has no link to the first page", pages)
		}
		next = ""
		if m := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(p.body); m != nil {
			next = html.UnescapeString(m[1])
			if !strings.Contains(next, "state=failed") || !strings.Contains(next, "limit=3") {
				t.Errorf("next page link %q drops the filter or the page size", next)
			}
		}
	}
	if pages != 3 || len(seen) != 7 || !sameSet(seen, ids) {
		t.Fatalf("%d pages showed %v, want 3 pages with all 7 of %v once each", pages, seen, ids)
	}
	if !slices.IsSortedFunc(seen, func(a, b string) int { return strings.Compare(b, a) }) {
		t.Errorf("not newest first: %v", seen)
	}
}

func TestDeliveryPageShowsItsAttemptHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep := f.endpoint("contact", "CRM")
	dlv := f.submit("contact", 1)[0]
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	f.settle(map[string]outcome{dlv: {kind: storage.OutcomePermanent, status: 422, err: `receiver said <script>alert("x")</script>`, traceID: trace}})
	s := f.login("alice")
	p := f.get(s, "/console/deliveries/"+dlv).must(t, http.StatusOK)
	p.contains(t,
		`id="delivery-state">failed</span>`,
		`<th scope="row">1</th>`, `outcome-permanent">permanent</span>`, "<td>422</td>",
		`receiver said &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`,
		`<a href="https://traces.example.com/trace/`+trace+`"`, "<code>"+trace+"</code>",
		"<code>"+ep.ID+"</code></a> CRM (http)",
		"submission.received", "sub_",
		`action="/console/deliveries/`+dlv+`/replay"`, `name="csrf" value="`+s.csrf+`"`,
		"Never replayed",
	).lacks(t, "<script>alert", ep.Secrets[0].Reveal())

	// Without a trace UI template the id is shown, unlinked.
	plain := newFixture(t, func(o *console.Options) { o.TraceURL = telemetry.TraceURLTemplate{} })
	plain.endpoint("contact", "CRM")
	d2 := plain.submit("contact", 1)[0]
	plain.settle(map[string]outcome{d2: {kind: storage.OutcomeDelivered, status: 200, traceID: trace}})
	plain.get(plain.login("bob"), "/console/deliveries/"+d2).must(t, http.StatusOK).
		contains(t, "<td><code>"+trace+"</code></td>").lacks(t, "traces.example.com")

	f.get(s, "/console/deliveries/dlv_00000000000000000000000000000000").must(t, http.StatusNotFound).
		contains(t, "There is no delivery", "Find it in the deliveries list")
}

func TestReplayFromTheDeliveryPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.endpoint("contact", "CRM")
	ids := f.submit("contact", 2)
	failed, pending := ids[0], ids[1]
	f.failAll(failed)
	s := f.login("alice")

	p := f.post(s, "/console/deliveries/"+failed+"/replay", nil).must(t, http.StatusSeeOther)
	if loc := p.header.Get("Location"); loc != "/console/deliveries/"+failed+"?done=replayed" {
		t.Fatalf("after replay, Location %q", loc)
	}
	if st := f.state(failed); st != storage.StatePending {
		t.Fatalf("replayed delivery is %s, want pending", st)
	}
	f.get(s, p.header.Get("Location")).must(t, http.StatusOK).
		contains(t, "Replayed: the delivery is pending and due now", "console:alice", "<td>failed</td>", "Replay is offered once")

	// A delivery that is not terminal cannot be replayed, and the page says
	// what state it is in and what to do.
	for _, id := range []string{pending, failed} {
		f.post(s, "/console/deliveries/"+id+"/replay", nil).must(t, http.StatusConflict).
			contains(t, "Cannot replay yet", "is pending; only delivered or failed deliveries can be replayed", "Wait until it finishes", "Back to the delivery")
	}
	f.post(s, "/console/deliveries/dlv_00000000000000000000000000000000/replay", nil).must(t, http.StatusNotFound)
	rs, err := f.store.ReplayList(t.Context(), failed)
	if err != nil || len(rs) != 1 {
		t.Fatalf("replays = %+v, %v; want exactly one", rs, err)
	}
}

func TestBulkReplayOfFailedDeliveriesByFilter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	crm := f.endpoint("contact", "CRM")
	f.endpoint("survey", "Survey sink")
	contact := f.submit("contact", 3)
	survey := f.submit("survey", 1)
	f.failAll(append(slices.Clone(contact[:2]), survey...)...)
	s := f.login("alice")

	f.get(s, "/console/deliveries?state=pending").must(t, http.StatusOK).lacks(t, `action="/console/deliveries/replay"`)
	list := f.get(s, "/console/deliveries?state=failed&endpoint_id="+crm.ID).must(t, http.StatusOK)
	list.contains(t, `action="/console/deliveries/replay"`, `name="endpoint_id" value="`+crm.ID+`"`, `name="state" value="failed"`)

	p := f.post(s, "/console/deliveries/replay", url.Values{"state": {"failed"}, "endpoint_id": {crm.ID}}).must(t, http.StatusSeeOther)
	for _, id := range contact[:2] {
		if st := f.state(id); st != storage.StatePending {
			t.Errorf("%s is %s after the bulk replay, want pending", id, st)
		}
	}
	if st := f.state(survey[0]); st != storage.StateFailed {
		t.Errorf("the survey delivery outside the filter is %s, want failed", st)
	}
	f.get(s, p.header.Get("Location")).must(t, http.StatusOK).contains(t, "Replayed 2 failed deliveries")

	// Only failed deliveries are replayed in bulk.
	f.post(s, "/console/deliveries/replay", url.Values{"state": {"delivered"}}).must(t, http.StatusBadRequest).
		contains(t, "Only failed deliveries are replayed in bulk")
	f.post(s, "/console/deliveries/replay", url.Values{}).must(t, http.StatusBadRequest)
}

func TestEndpointsEnableDisableAndRotate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep := f.endpoint("contact", "CRM")
	oldSecret := ep.Secrets[0].Reveal()
	s := f.login("alice")

	f.get(s, "/console/endpoints").must(t, http.StatusOK).
		contains(t, `<tr id="`+ep.ID+`">`, "https://hooks.example.com/contact", "enabled", "1 active", "aria-label=\"Disable "+ep.ID+"\"").
		lacks(t, oldSecret, "whsec_")

	p := f.post(s, "/console/endpoints/"+ep.ID+"/disable", nil).must(t, http.StatusSeeOther)
	f.get(s, p.header.Get("Location")).must(t, http.StatusOK).contains(t, "Disabled "+ep.ID, "disabled</span>", "Enable "+ep.ID)
	e, err := f.store.EndpointGet(t.Context(), ep.ID)
	if err != nil || e.DisabledAt == nil {
		t.Fatalf("endpoint not disabled: %+v, %v", e, err)
	}
	f.post(s, "/console/endpoints/"+ep.ID+"/enable", nil).must(t, http.StatusSeeOther)
	if e, _ = f.store.EndpointGet(t.Context(), ep.ID); e.DisabledAt != nil {
		t.Fatal("endpoint not enabled again")
	}

	rot := f.post(s, "/console/endpoints/"+ep.ID+"/rotate-secret", nil).must(t, http.StatusOK)
	m := regexp.MustCompile(`value="(whsec_[^"]+)"`).FindStringSubmatch(rot.body)
	if m == nil {
		t.Fatalf("the rotation page does not show the new secret:\n%s", rot.body)
	}
	m[1] = html.UnescapeString(m[1])
	rot.contains(t, "shown this once", "also with the previous ones until").lacks(t, oldSecret)
	if cc := rot.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("the page with the secret has Cache-Control %q, want no-store", cc)
	}
	e, _ = f.store.EndpointGet(t.Context(), ep.ID)
	if len(e.Secrets) != 2 || e.Secrets[0].Reveal() != m[1] || e.Secrets[1].Reveal() != oldSecret || e.Secrets[1].ExpiresAt == nil {
		t.Fatalf("secrets after rotation: want the new one first and the old one expiring")
	}
	// Never shown again.
	f.get(s, "/console/endpoints").must(t, http.StatusOK).contains(t, "2 active", "old ones sign until").lacks(t, m[1], strings.ReplaceAll(m[1], "+", "&#43;"), oldSecret)

	for _, action := range []string{"disable", "enable", "rotate-secret"} {
		f.post(s, "/console/endpoints/ep_nope/"+action, nil).must(t, http.StatusNotFound).contains(t, "There is no endpoint", "Back to the endpoints")
	}
}

func TestEndpointsPageShowsWhyDisabledAndTheControls(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep := f.endpoint("contact", "CRM")
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	ep.DisabledAt, ep.DisabledReason = &at, storage.DisabledGone
	ep.RateLimit, ep.MaxInFlight, ep.Ordered = 2, 3, true
	ep.RetrySchedule = []time.Duration{time.Minute, time.Hour}
	if _, err := f.store.EndpointUpdate(t.Context(), ep); err != nil {
		t.Fatal(err)
	}
	s := f.login("alice")
	f.get(s, "/console/endpoints").must(t, http.StatusOK).contains(t, "the receiver answered 410 Gone", "deliveries held",
		"at most 2 sends a second, 2 at once", "at most 3 in flight", "ordered: one at a time", "retries after 1m0s, 1h0m0s")
}

func TestUnknownPagesAndMethodsSayWhereToGo(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	s := f.login("alice")
	f.get(s, "/console/nope").must(t, http.StatusNotFound).contains(t, "The console has no page at /console/nope", "Start from the overview")
	p := f.get(s, "/console/deliveries/dlv_x/replay").must(t, http.StatusMethodNotAllowed).contains(t, "GET is not allowed")
	if p.header.Get("Allow") != "POST" {
		t.Errorf("Allow %q, want POST", p.header.Get("Allow"))
	}
	css := f.do(req{path: "/console/static/console.css"}).must(t, http.StatusOK)
	if !strings.HasPrefix(css.header.Get("Content-Type"), "text/css") || !strings.Contains(css.body, "@media") {
		t.Errorf("stylesheet: %s", css.header.Get("Content-Type"))
	}
}

// TestPagesAreAccessible checks the markup rules every page keeps: a
// viewport for narrow screens, a skip link to the main content, a label
// for every visible form control, column headers with a scope, and a
// security policy that allows no script.
func TestPagesAreAccessible(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep := f.endpoint("contact", "CRM")
	dlv := f.submit("contact", 2)
	f.failAll(dlv[0])
	s := f.login("alice")
	pages := map[string]page{
		"login":      f.do(req{path: "/console/login"}),
		"overview":   f.get(s, "/console/"),
		"deliveries": f.get(s, "/console/deliveries?state=failed"),
		"delivery":   f.get(s, "/console/deliveries/"+dlv[0]),
		"endpoints":  f.get(s, "/console/endpoints"),
		"rotated":    f.post(s, "/console/endpoints/"+ep.ID+"/rotate-secret", nil),
		"error":      f.get(s, "/console/nope"),
	}
	control := regexp.MustCompile(`<(input|select|textarea)\b[^>]*>`)
	idAttr := regexp.MustCompile(`\bid="([^"]+)"`)
	for name, p := range pages {
		t.Run(name, func(t *testing.T) {
			p.contains(t, `<html lang="en">`, `<meta name="viewport" content="width=device-width, initial-scale=1">`,
				`<a class="skip" href="#main">Skip to content</a>`, `<main id="main"`, "<h1>")
			if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			for _, c := range control.FindAllString(p.body, -1) {
				if strings.Contains(c, `type="hidden"`) {
					continue
				}
				m := idAttr.FindStringSubmatch(c)
				if m == nil || !strings.Contains(p.body, `<label for="`+m[1]+`"`) {
					t.Errorf("form control without a label: %s", c)
				}
			}
			for _, th := range regexp.MustCompile(`<th\b[^>]*>`).FindAllString(p.body, -1) {
				if !strings.Contains(th, "scope=") {
					t.Errorf("table header without scope: %s", th)
				}
			}
		})
	}
}

func TestInFlightDeliveriesShowTheirLeaseAndNoReplay(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.endpoint("contact", "CRM")
	dlv := f.submit("contact", 1)[0]
	if _, err := f.store.DeliveryClaim(t.Context(), storage.DeliveryClaimParams{Limit: 1, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	s := f.login("alice")
	f.get(s, "/console/deliveries?state=processing").must(t, http.StatusOK).contains(t, dlv, "in flight, lease ends")
	f.get(s, "/console/deliveries/"+dlv).must(t, http.StatusOK).
		contains(t, `id="delivery-state">processing</span>`, "<dt>Lease ends</dt>", "Replay is offered once", "No attempts yet").
		lacks(t, `action="/console/deliveries/`+dlv+`/replay"`)
	f.post(s, "/console/deliveries/"+dlv+"/replay", nil).must(t, http.StatusConflict).contains(t, "is processing")
}

// A claim that ended without a request has no attempt row to show, so the
// delivery page says why nothing was sent: while the delivery waits, and
// once it failed, with what to do.
func TestDeliveryPageSaysWhyNothingWasSent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.endpoint("contact", "CRM")
	dlv := f.submit("contact", 1)[0]
	claim := func() storage.Claim {
		t.Helper()
		claims, err := f.store.DeliveryClaim(t.Context(), storage.DeliveryClaimParams{Limit: 1, Lease: time.Minute})
		if err != nil || len(claims) != 1 {
			t.Fatal(claims, err)
		}
		return claims[0]
	}
	c := claim()
	if _, err := f.store.DeliveryRelease(t.Context(), storage.DeliveryReleaseParams{DeliveryID: dlv, Token: c.Token,
		Reason: `transport plugin "http" is not running: <gone>`}); err != nil {
		t.Fatal(err)
	}
	s := f.login("alice")
	f.get(s, "/console/deliveries/"+dlv).must(t, http.StatusOK).
		contains(t, "<dt>Not sent</dt>", `transport plugin &#34;http&#34; is not running: &lt;gone&gt;`,
			"No request went out, so no attempt was recorded.", "It is tried again shortly.", "No attempts yet").
		lacks(t, "<gone>")

	c = claim()
	if _, err := f.store.DeliveryFail(t.Context(), storage.DeliveryFailParams{DeliveryID: dlv, Token: c.Token,
		Reason: `no such transport plugin "smtp" (loaded: http)`}); err != nil {
		t.Fatal(err)
	}
	f.get(s, "/console/deliveries/"+dlv).must(t, http.StatusOK).
		contains(t, `id="delivery-state">failed</span>`, "<dt>Not sent</dt>", "no such transport plugin &#34;smtp&#34;",
			"Fix this, then replay the delivery.", `action="/console/deliveries/`+dlv+`/replay"`)

	other := f.submit("contact", 1)[0]
	f.get(s, "/console/deliveries/"+other).must(t, http.StatusOK).lacks(t, "<dt>Not sent</dt>")
}

// TestURLSecretsAreHiddenOnEveryPage: an endpoint URL's credentials and
// secret-named parameters appear on no page that shows the endpoint or a
// delivery to it, nor in an attempt's error or a reason for not sending
// that quotes the URL (as Go's *url.Error does, in a third-party plugin's
// words or a row recorded before the worker masked them); what is not
// secret (x=1) is still shown.
func TestURLSecretsAreHiddenOnEveryPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const target = "https://carol:pw@127.0.0.1:8443/hook?token=SECRET123&x=1"
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	// No description, so the URL is the endpoint's label in lists.
	ep, err := f.store.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: target, FormIDs: []string{"leaky"},
		Config: map[string]string{}, Secrets: []storage.Secret{storage.NewSecret(secret, nil)}}})
	if err != nil {
		t.Fatal(err)
	}
	ids := f.submit("leaky", 2)
	f.settle(map[string]outcome{ids[0]: {kind: storage.OutcomeRetryable, err: `Post "` + target + `": dial tcp 127.0.0.1:8443: connect: connection refused`}})
	claims, err := f.store.DeliveryClaim(t.Context(), storage.DeliveryClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil || len(claims) != 1 || claims[0].Delivery.ID != ids[1] {
		t.Fatalf("claimed %v, %v; want %s", claims, err, ids[1])
	}
	if _, err := f.store.DeliveryFail(t.Context(), storage.DeliveryFailParams{DeliveryID: ids[1], Token: claims[0].Token,
		Reason: "the transport refused " + target + ", which it cannot reach"}); err != nil {
		t.Fatal(err)
	}
	s := f.login("alice")
	f.post(s, "/console/endpoints/"+ep.ID+"/disable", nil).must(t, http.StatusSeeOther)

	const shown = "https://[redacted]@127.0.0.1:8443/hook?token=[redacted]&amp;x=1"
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/console/", []string{shown}},
		{"/console/endpoints", []string{shown, "hidden here: userinfo, query:token"}},
		{"/console/deliveries", []string{shown}},
		{"/console/deliveries?endpoint_id=" + ep.ID, []string{shown}},
		{"/console/deliveries/" + ids[0], []string{shown, `Post &#34;` + shown + `&#34;: dial tcp`}},
		{"/console/deliveries/" + ids[1], []string{shown, "the transport refused " + shown + ", which"}},
	} {
		f.get(s, tc.path).must(t, http.StatusOK).contains(t, tc.want...).lacks(t, "SECRET123", "carol", ":pw")
	}
	rotated := f.post(s, "/console/endpoints/"+ep.ID+"/rotate-secret", nil).must(t, http.StatusOK)
	rotated.lacks(t, "SECRET123", "carol", ":pw")
	// The stored URL, the one delivery uses, is untouched.
	if got, err := f.store.EndpointGet(t.Context(), ep.ID); err != nil || got.URL != target {
		t.Fatalf("stored URL %q, %v; want %q", got.URL, err, target)
	}
}
