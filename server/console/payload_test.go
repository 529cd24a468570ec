package console_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/storage"
)

// TestDeliveryPageShowsTheBodySent shows a delivery's signed body on its
// page, escaped, and a body past 64 KiB cut with a note of how much was
// left out and where to read it whole.
func TestDeliveryPageShowsTheBodySent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		data    string
		want    []string
		unwant  []string
		cutNote bool
	}{
		{
			name:   "a small body whole and escaped",
			data:   `{"comment":"<script>alert(1)</script>","n":1}`,
			want:   []string{`{&#34;comment&#34;:&#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;,&#34;n&#34;:1}`, "Response bodies are never stored"},
			unwant: []string{"<script>alert(1)", `id="payload-cut"`},
		},
		{
			name:    "a large body cut on a character boundary",
			data:    `{"pad":"` + strings.Repeat("é", 40<<10) + `"}`,
			want:    []string{`&#34;pad&#34;:&#34;éé`, `id="payload-cut"`, "/v1/deliveries/"},
			unwant:  []string{`éé&#34;}`},
			cutNote: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil)
			f.endpoint("contact", "CRM")
			ev, err := event.Submission("contact", []byte(tc.data), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			res, err := f.store.EventCreate(t.Context(), ev)
			if err != nil {
				t.Fatal(err)
			}
			p := f.get(f.login("alice"), "/console/deliveries/"+res.Deliveries[0].ID).must(t, http.StatusOK)
			p.contains(t, tc.want...).lacks(t, tc.unwant...)
			if !utf8.ValidString(p.body) {
				t.Error("the page is not valid UTF-8: the body was cut inside a character")
			}
			if tc.cutNote {
				cut := len(ev.Payload) - 64<<10
				// The cut may step back up to one character's bytes.
				if !strings.Contains(p.body, "The last ") || !(strings.Contains(p.body, "The last "+strconv.Itoa(cut)+" bytes") || strings.Contains(p.body, "The last "+strconv.Itoa(cut+1)+" bytes")) {
					t.Errorf("the page does not say %d (or %d) bytes were cut", cut, cut+1)
				}
			}
		})
	}
}

// TestDeliveriesListShowsTheLastError gives each row of the deliveries
// list why it last fell short: the latest attempt's error, or why its
// last claim sent nothing; escaped, URL secrets masked, long text cut.
func TestDeliveriesListShowsTheLastError(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.endpoint("contact", "CRM")
	ids := f.submit("contact", 4)
	failed, long, delivered, unsent := ids[0], ids[1], ids[2], ids[3]
	f.settle(map[string]outcome{
		failed:    {kind: storage.OutcomePermanent, status: 422, err: `receiver said <b>no</b> at https://hooks.example.com/?token=hunter2`},
		long:      {kind: storage.OutcomePermanent, status: 500, err: "boom " + strings.Repeat("x", 400) + " TAIL"},
		delivered: {kind: storage.OutcomeDelivered, status: 200},
	})
	claims, err := f.store.DeliveryClaim(t.Context(), storage.DeliveryClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil || len(claims) != 1 || claims[0].Delivery.ID != unsent {
		t.Fatalf("claim of the undelivered one: %v, %v", claims, err)
	}
	if _, err := f.store.DeliveryRelease(t.Context(), storage.DeliveryReleaseParams{DeliveryID: unsent, Token: claims[0].Token,
		Reason: `transport plugin "http" is not running`}); err != nil {
		t.Fatal(err)
	}
	p := f.get(f.login("alice"), "/console/deliveries").must(t, http.StatusOK)
	p.contains(t, `<th scope="col">Last error</th>`,
		`receiver said &lt;b&gt;no&lt;/b&gt; at https://hooks.example.com/?token=`,
		"boom xxx",
		`transport plugin &#34;http&#34; is not running`,
		`<td class="err">—</td>`,
	).lacks(t, "hunter2", "<b>no</b>", "x TAIL")
}

// TestEndpointsListShowsTheLastErrorOfFailingEndpoints: a failing
// endpoint's row says why, masked, escaped and cut, on the console and the
// portal alike; a healthy endpoint's row has nothing, though it failed
// once before it delivered.
func TestEndpointsListShowsTheLastErrorOfFailingEndpoints(t *testing.T) {
	t.Parallel()
	for name, open := range e2etest.Backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			f := newFixtureOn(t, store, nil)
			failing, healthy := f.endpoint("contact", "CRM"), f.endpoint("signup", "Mailer")
			f.settle(map[string]outcome{f.submit("contact", 1)[0]: {kind: storage.OutcomePermanent, status: 500,
				err: `receiver said <b>no</b> at https://hooks.example.com/?token=hunter2 ` + strings.Repeat("x", 400) + " TAIL"}})
			f.settle(map[string]outcome{f.submit("signup", 1)[0]: {kind: storage.OutcomePermanent, status: 500, err: "signup once failed"}})
			f.settle(map[string]outcome{f.submit("signup", 1)[0]: {kind: storage.OutcomeDelivered, status: 200}})

			row := func(p page, id string) string {
				t.Helper()
				m := regexp.MustCompile(`(?s)<tr id="` + id + `">.*?</tr>`).FindString(p.body)
				if m == "" {
					t.Fatalf("no row for %s:\n%s", id, p.body)
				}
				return m
			}
			want := `receiver said &lt;b&gt;no&lt;/b&gt; at https://hooks.example.com/?token=[redacted] xxx`
			p := f.get(f.login("alice"), "/console/endpoints").must(t, http.StatusOK).contains(t, `<th scope="col">Last error</th>`).lacks(t, "hunter2", "x TAIL", "<b>no</b>")
			if r := row(p, failing.ID); !strings.Contains(r, want) {
				t.Errorf("the failing endpoint's row lacks its last error %q:\n%s", want, r)
			}
			if r := row(p, healthy.ID); !strings.Contains(r, `<td class="err">—</td>`) || strings.Contains(r, "once failed") {
				t.Errorf("the healthy endpoint's row shows an error:\n%s", r)
			}

			portal := newPortalFixture(t, store, nil)
			pp := portal.portalGet(portal.portalSession([]string{"contact"}, true), "/portal/endpoints").must(t, http.StatusOK).lacks(t, "hunter2", healthy.ID)
			if r := row(pp, failing.ID); !strings.Contains(r, want) {
				t.Errorf("the portal's row lacks the last error %q:\n%s", want, r)
			}
		})
	}
}
