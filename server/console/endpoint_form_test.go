package console_test

import (
	"crypto/sha256"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/console"
	"github.com/hymical/hymical/server/event"
)

func TestNewRefusesAConsoleWithoutTransports(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	_, err := console.New(console.Options{Store: f.store, AdminTokenDigest: sha256.Sum256([]byte(adminToken))})
	if err == nil || !strings.Contains(err.Error(), "Transports") {
		t.Errorf("New without transports = %v, want an error naming Options.Transports", err)
	}
}

// The operator adds, edits and tests endpoints with the portal's pages;
// its forms are a text field, and empty means every form.
func TestConsoleAddsEditsAndTestsEndpoints(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	s := f.login("alice")
	f.get(s, "/console/endpoints").must(t, http.StatusOK).contains(t, `href="/console/endpoints/new"`)
	f.get(s, "/console/endpoints/new").must(t, http.StatusOK).contains(t, `name="form_ids" type="text"`).lacks(t, `type="checkbox" name="form_ids"`)

	for _, tt := range []struct {
		name string
		form url.Values
		want string
	}{
		{"no URL", url.Values{"form_ids": {"contact"}}, "The URL is required"},
		{"a bad form id", url.Values{"url": {"https://hooks.example.com/a"}, "form_ids": {"contact, bad/id"}}, "is not a form id"},
		{"a loopback target", url.Values{"url": {"http://127.0.0.1:9/hook"}}, "transport refused this URL"},
		// The controls, refused by the API's rules in the API's words.
		{"a rate that is not a number", url.Values{"url": {"https://hooks.example.com/a"}, "rate_limit": {"fast"}}, `rate_limit &#34;fast&#34; is not a number`},
		{"a burst without a rate", url.Values{"url": {"https://hooks.example.com/a"}, "rate_burst": {"4"}}, "a burst only means something with a rate"},
		{"too many in flight", url.Values{"url": {"https://hooks.example.com/a"}, "max_in_flight": {"100000000"}}, "max_in_flight must be between 0 (no cap) and"},
		{"a delay that is not a duration", url.Values{"url": {"https://hooks.example.com/a"}, "retry_schedule": {"30s, soon"}}, `item 2 is &#34;soon&#34;, not a duration`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.post(s, "/console/endpoints/new", tt.form).must(t, http.StatusBadRequest).contains(t, tt.want, "Nothing was changed")
		})
	}
	if eps, err := f.store.EndpointList(t.Context()); err != nil || len(eps) != 0 {
		t.Fatalf("refused forms left endpoints %v (%v)", eps, err)
	}

	p := f.post(s, "/console/endpoints/new", url.Values{"url": {"https://hooks.example.com/new"}, "form_ids": {"contact, signup contact"},
		"event_types": {"submission.received"}, "description": {"CRM"},
		"rate_limit": {"2.5"}, "rate_burst": {"4"}, "max_in_flight": {"3"}, "ordered": {"on"}, "retry_schedule": {"30s, 5m"}}).must(t, http.StatusCreated)
	id := regexp.MustCompile(`<code>(ep_[0-9a-f]{32})</code> added`).FindStringSubmatch(p.body)
	if id == nil {
		t.Fatalf("the answer shows no new endpoint:\n%s", p.body)
	}
	e, err := f.store.EndpointGet(t.Context(), id[1])
	if err != nil {
		t.Fatal(err)
	}
	if e.Transport != "http" || !slices.Equal(e.FormIDs, []string{"contact", "signup"}) || e.Description != "CRM" || len(e.Secrets) != 1 ||
		e.RateLimit != 2.5 || e.RateBurst != 4 || e.MaxInFlight != 3 || !e.Ordered || !slices.Equal(e.RetrySchedule, []time.Duration{30 * time.Second, 5 * time.Minute}) {
		t.Errorf("stored %+v", e)
	}

	f.get(s, "/console/endpoints").must(t, http.StatusOK).contains(t, "Edit "+e.ID, "Send a test event to "+e.ID)
	f.get(s, "/console/endpoints/"+e.ID+"/edit").must(t, http.StatusOK).contains(t, `value="contact, signup"`, "CRM",
		`name="rate_limit" type="text" inputmode="decimal" value="2.5"`, `value="30s, 5m0s"`, `name="ordered" value="on" checked`)
	// An empty forms field is every form, as in the API; empty controls
	// are none, and an empty schedule the server's.
	f.post(s, "/console/endpoints/"+e.ID+"/edit", url.Values{"form_ids": {""}, "description": {"All forms"}}).must(t, http.StatusSeeOther)
	if e, _ = f.store.EndpointGet(t.Context(), e.ID); len(e.FormIDs) != 0 || e.Description != "All forms" || e.URL != "https://hooks.example.com/new" ||
		e.RateLimit != 0 || e.RateBurst != 0 || e.MaxInFlight != 0 || e.Ordered || e.RetrySchedule != nil {
		t.Errorf("after the edit: %+v", e)
	}

	p = f.post(s, "/console/endpoints/"+e.ID+"/test", nil).must(t, http.StatusSeeOther)
	m := regexp.MustCompile(`^/console/deliveries/([^?]+)\?done=test$`).FindStringSubmatch(p.header.Get("Location"))
	if m == nil {
		t.Fatalf("the test event sends the browser to %q, want its delivery's page", p.header.Get("Location"))
	}
	d, err := f.store.DeliveryGet(t.Context(), m[1])
	if err != nil {
		t.Fatal(err)
	}
	ev, err := f.store.EventGet(t.Context(), d.EventID)
	if err != nil || d.EndpointID != e.ID || ev.Type != event.TypeTest {
		t.Errorf("the test made delivery %+v of event %+v (%v)", d, ev, err)
	}
	f.get(s, p.header.Get("Location")).must(t, http.StatusOK)
}
