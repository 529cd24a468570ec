package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/console"
	"github.com/hymical/hymical/storage"
)

// endpointRows are the endpoints the endpoints page lists, in order.
func endpointRows(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<tr id="(ep_[0-9a-f]+)">`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestEndpointDeleteAsksFirstAndKeepsHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	crm := f.endpoint("contact", "CRM")
	other := f.endpoint("survey", "Survey sink")
	ids := f.submit("contact", 2)
	s := f.login("alice")
	confirm := "/console/endpoints/" + crm.ID + "/delete"

	f.get(s, "/console/endpoints").must(t, http.StatusOK).contains(t, `href="`+confirm+`"`)
	f.get(s, confirm).must(t, http.StatusOK).contains(t,
		"Delete endpoint <code>"+crm.ID+"</code>?", "<strong>2 pending</strong>", "<strong>0 processing</strong>",
		`action="`+confirm+`"`, `name="csrf" value="`+s.csrf+`"`, `name="force" value="yes"`)

	stillThere := func(why string) {
		t.Helper()
		e, err := f.store.EndpointGet(t.Context(), crm.ID)
		if err != nil || e.DeletedAt != nil {
			t.Fatalf("%s deleted the endpoint: %v, %v", why, e.DeletedAt, err)
		}
	}
	// No CSRF token: refused like every console action.
	f.do(req{path: confirm, form: url.Values{"force": {"yes"}}, cookie: s.cookie}).must(t, http.StatusForbidden).
		contains(t, "security token is missing or stale")
	stillThere("a POST without the CSRF token")
	// Not forced, with deliveries pending: refused, saying what to do.
	f.post(s, confirm, nil).must(t, http.StatusConflict).contains(t, "2 pending and 0 processing deliveries", "box ticked", "Nothing was changed")
	stillThere("a delete without force")

	done := f.post(s, confirm, url.Values{"force": {"yes"}}).must(t, http.StatusSeeOther)
	wantLoc := "/console/endpoints?" + url.Values{"done": {"deleted"}, "id": {crm.ID}}.Encode()
	if loc := done.header.Get("Location"); loc != wantLoc {
		t.Fatalf("the delete sent the browser to %q", loc)
	}
	list := f.get(s, "/console/endpoints?done=deleted&id="+crm.ID).must(t, http.StatusOK).contains(t, "Deleted "+crm.ID)
	if rows := endpointRows(list.body); !slices.Equal(rows, []string{other.ID}) {
		t.Fatalf("the endpoints page lists %v after the delete, want only %s", rows, other.ID)
	}
	for _, id := range ids {
		d, err := f.store.DeliveryGet(t.Context(), id)
		if err != nil || d.State != storage.StateFailed || d.UnsentReason != storage.EndpointDeletedReason {
			t.Fatalf("delivery %s after a forced delete: %+v, %v", id, d, err)
		}
		f.get(s, "/console/deliveries/"+id).must(t, http.StatusOK).contains(t, "<strong>deleted</strong>", "endpoint deleted")
	}
	f.get(s, confirm).must(t, http.StatusGone).contains(t, "Endpoint deleted")
	f.post(s, "/console/deliveries/"+ids[0]+"/replay", nil).must(t, http.StatusGone)
}

func TestOperatorEndpointIsNotDeletedFromTheConsole(t *testing.T) {
	t.Parallel()
	first := newFixture(t, nil)
	ops := first.endpoint("ops", "Operators")
	f := newFixtureOn(t, first.store, func(o *console.Options) { o.OperatorEndpoint = ops.ID })
	s := f.login("alice")
	confirm := "/console/endpoints/" + ops.ID + "/delete"
	f.get(s, confirm).must(t, http.StatusOK).contains(t, "This is the operator endpoint").lacks(t, `action="`+confirm+`"`)
	f.post(s, confirm, url.Values{"force": {"yes"}}).must(t, http.StatusConflict).contains(t, "endpoints.operator_endpoint", "Nothing was changed")
	if e, err := f.store.EndpointGet(t.Context(), ops.ID); err != nil || e.DeletedAt != nil {
		t.Fatalf("the operator endpoint was deleted: %v, %v", e.DeletedAt, err)
	}
}

func TestEndpointsPagePages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var want []string
	for i := range 5 {
		want = append(want, f.endpoint(fmt.Sprintf("form_%d", i), "").ID)
	}
	slices.Sort(want)
	slices.Reverse(want)
	s := f.login("alice")
	var got []string
	path := "/console/endpoints?limit=2"
	for pages := 1; ; pages++ {
		p := f.get(s, path).must(t, http.StatusOK)
		got = append(got, endpointRows(p.body)...)
		m := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(p.body)
		if m == nil {
			if pages != 3 {
				t.Fatalf("the endpoints page ended after %d pages, want 3", pages)
			}
			p.contains(t, "First page (newest)")
			break
		}
		path = strings.ReplaceAll(m[1], "&amp;", "&")
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the endpoints pages list %v, want newest first %v", got, want)
	}
	f.get(s, "/console/endpoints?cursor=dlv_x").must(t, http.StatusBadRequest).contains(t, "Bad page link")
}
