package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/testwait"
)

// TestPortalInABrowser runs `hymical serve` with the real http plugin and
// drives its portal in headless Chromium the way a form owner does: open
// a session link, add an endpoint for a loopback receiver, see a failed
// delivery's attempt, rotate the secret, fix the receiver and replay the
// delivery; then the pages at 375 px; then the portal framed by a page of
// another origin, shown when portal.frame_ancestors names that origin and
// refused when it does not. Screenshots go to $HYMICAL_TEST_ARTIFACTS
// (default testdata/artifacts)/portal.
//
// It needs Chromium as TestConsoleInABrowser does: without it the test
// skips, and under CI=true it fails.
func TestPortalInABrowser(t *testing.T) {
	browser := chromiumPath(t, "portal")
	artifacts := artifactsDir(t, "portal")

	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	const token = "test-admin-token-0123456789-portal"
	t.Setenv("FORMS_SERVER_ADMIN_TOKEN", token)

	// The receiver refuses everything (a 400 fails a delivery at once)
	// until the test fixes it.
	var fixed atomic.Bool
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fixed.Load() {
			http.Error(w, "no such form field", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()

	// Two pages of another product, each framing the portal: one on an
	// origin the config names, one on an origin it does not. They are
	// other origins (another port) of the same site: Chromium blocks
	// third-party cookies, so a frame of another site would not keep the
	// session at all (docs/portal.md says what an embedder does then).
	var frameSrc atomic.Value
	frameSrc.Store("about:blank")
	embedder := func() *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<!doctype html><title>Forms product</title><h1>Forms product</h1>
<iframe id="portal" title="Webhooks" src="%s" style="width:100%%;height:600px" onload="document.title='loaded'"></iframe>`, frameSrc.Load())
		}))
	}
	allowed, refused := embedder(), embedder()
	defer allowed.Close()
	defer refused.Close()

	base, out, logs := startServe(t, dir,
		"--telemetry.exporter=stdout",
		"--portal.frame_ancestors="+allowed.URL,
		"--portal.brand_name=Acme Forms",
		"--portal.accent_color=#7c3aed",
	)
	if !strings.Contains(out.String(), "portal "+base+"/portal/") {
		t.Errorf("serve does not say where the portal is:\n%s", out.String())
	}

	api := adminJSON(t, base, token)

	// A portal link for form "contact", made as a forms product makes one.
	newLink := func() string {
		t.Helper()
		link, _ := api("POST", "/v1/portal/sessions", `{"forms":["contact"],"ttl":"1h","read_only":false}`)["url"].(string)
		if !strings.HasPrefix(link, base+"/portal/start?link=hympl_") {
			t.Fatalf("POST /v1/portal/sessions made the link %q", link)
		}
		return link
	}

	b := newBrowserSession(t, browser, artifacts, 120*time.Second)
	bctx, do, text, navigate, shot := b.ctx, b.do, b.text, b.navigate, b.shot

	// Open the link: it lands on the endpoints page, branded.
	link := newLink()
	navigate("open the portal link", http.StatusOK, chromedp.Navigate(link))
	if h := text("h1"); h != "Endpoints" {
		t.Fatalf("the link leads to %q, want the endpoints page", h)
	}
	if brand := text(".brand"); brand != "Acme Forms" {
		t.Errorf("the portal's brand is %q", brand)
	}
	if cookies, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.cookie`)); err != nil || strings.Contains(cookies, "hymical_portal") {
		t.Errorf("script can read the portal cookie (%q, %v); it must be HttpOnly", cookies, err)
	}

	// Add an endpoint for the loopback receiver.
	navigate("open the add form", http.StatusOK, chromedp.Click(chromedp.CSS(`a[href="/portal/endpoints/new"]`)))
	do("fill the form", chromedp.SendKeys(chromedp.CSS("#ep-url"), recv.URL+"/hook"), chromedp.SendKeys(chromedp.CSS("#ep-description"), "CRM"))
	shot("01-add-endpoint")
	navigate("add the endpoint", http.StatusCreated, chromedp.Click(chromedp.CSS(`form.endpoint-form button[type=submit]`)))
	first, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#new-secret').value`))
	if err != nil || !strings.HasPrefix(first, "whsec_") {
		t.Fatalf("adding shows no secret: %q, %v", first, err)
	}
	shot("02-endpoint-added")

	// A submission fails at its first attempt; the form owner finds it.
	dlv := api("POST", "/v1/forms/contact/submissions", `{"email":"a@example.com"}`)["deliveries"].([]any)[0].(string)
	testwait.For(t, 20*time.Second, func() error {
		if got := api("GET", "/v1/deliveries/"+dlv, "")["state"]; got != "failed" {
			return fmt.Errorf("delivery %s is %v, want failed", dlv, got)
		}
		return nil
	})
	navigate("open the deliveries", http.StatusOK, chromedp.Click(chromedp.CSS(`nav a[href="/portal/deliveries"]`)))
	do("choose state failed", chromedp.SetValue(chromedp.CSS("#f-state"), "failed"))
	navigate("apply the filter", http.StatusOK, chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)))
	navigate("open the delivery", http.StatusOK, chromedp.Click(chromedp.CSS(`a[href="/portal/deliveries/`+dlv+`"]`)))
	history := text("table tbody")
	if !strings.Contains(history, "permanent") || !strings.Contains(history, "400") {
		t.Errorf("the attempt history lacks the permanent 400:\n%s", history)
	}
	if !regexp.MustCompile(`\b[0-9a-f]{32}\b`).MatchString(history) {
		t.Errorf("the attempt shows no trace id:\n%s", history)
	}
	shot("03-delivery-failed")

	// Send a test event: its delivery's page shows the attempt (the
	// receiver's 400, as it refuses everything still).
	navigate("endpoints", http.StatusOK, chromedp.Click(chromedp.CSS(`nav a[href="/portal/endpoints"]`)))
	navigate("send a test event", http.StatusOK, chromedp.Click(chromedp.CSS(`form[action$="/test"] button`)))
	testDlv, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil || !strings.Contains(testDlv, "/portal/deliveries/dlv_") {
		t.Fatalf("the test event leads to %q (%v), want its delivery's page", testDlv, err)
	}
	testwait.For(t, 20*time.Second, func() error {
		if got := text("#delivery-state"); got != "failed" {
			navigate("reload the test delivery", http.StatusOK, chromedp.Navigate(testDlv))
			return fmt.Errorf("the test event's delivery never failed at the receiver's 400; it is %q", got)
		}
		return nil
	})
	if history := text("#attempts + .table-wrap tbody"); !strings.Contains(history, "400") {
		t.Errorf("the test event's attempt is not shown:\n%s", history)
	}
	shot("04-test-event-attempt")

	// Rotate the secret, shown once.
	navigate("endpoints", http.StatusOK, chromedp.Click(chromedp.CSS(`nav a[href="/portal/endpoints"]`)))
	navigate("rotate the secret", http.StatusOK, chromedp.Click(chromedp.CSS(`form[action$="/rotate-secret"] button`)))
	rotated, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#new-secret').value`))
	if err != nil || !strings.HasPrefix(rotated, "whsec_") || rotated == first {
		t.Errorf("the rotation shows no new secret: %q, %v", rotated, err)
	}
	shot("05-secret-rotated")

	// Fix the receiver and replay the failed delivery.
	fixed.Store(true)
	navigate("back to the delivery", http.StatusOK, chromedp.Navigate(base+"/portal/deliveries/"+dlv))
	navigate("replay", http.StatusOK, chromedp.Click(chromedp.CSS(`form.replay button[type=submit]`)))
	testwait.For(t, 20*time.Second, func() error {
		if got := text("#delivery-state"); got != "delivered" {
			navigate("reload the delivery", http.StatusOK, chromedp.Navigate(base+"/portal/deliveries/"+dlv))
			return fmt.Errorf("the delivery page never showed delivered; it shows %q", got)
		}
		return nil
	})
	if replays := text("#replays + .table-wrap tbody"); !strings.Contains(replays, "portal:") {
		t.Errorf("the replay is not recorded as the portal session's: %q", replays)
	}
	shot("06-delivery-replayed")

	// Keyboard: the first Tab reaches the skip link.
	do("tab", chromedp.KeyEvent("\t"))
	if focused, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.activeElement.textContent`)); focused != "Skip to content" {
		t.Errorf("the first Tab focuses %q, want the skip link", focused)
	}

	// A phone: nothing wider than the screen but the tables, which
	// scroll inside their own region.
	do("narrow the viewport", chromedp.EmulateViewport(375, 812))
	for _, p := range []struct{ name, path string }{
		{"07-endpoints-375px", "/portal/endpoints"},
		{"08-add-endpoint-375px", "/portal/endpoints/new"},
		{"09-deliveries-375px", "/portal/deliveries?state=delivered"},
		{"10-delivery-375px", "/portal/deliveries/" + dlv},
	} {
		navigate(p.name, http.StatusOK, chromedp.Navigate(base+p.path))
		width, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		if err != nil || width > 375 {
			t.Errorf("%s: the page is %d px wide at a 375 px viewport (%v); it must not scroll sideways", p.path, width, err)
		}
		shot(p.name)
	}
	do("widen the viewport", chromedp.EmulateViewport(1280, 900))

	// The link was spent: a second use is refused.
	navigate("open the link again", http.StatusNotFound, chromedp.Navigate(link))

	// Framed by the allowed origin: the portal shows inside, with its
	// cookie (a fresh link, opened in the frame).
	frameSrc.Store(newLink())
	framed, logged := frameText(t, bctx, allowed.URL)
	if !strings.Contains(framed, "Endpoints") || !strings.Contains(framed, "CRM") {
		t.Errorf("the allowed origin's frame shows %q, want the portal's endpoints", framed)
	}
	if v := violations(logged); len(v) > 0 {
		t.Errorf("framing by an allowed origin was reported as a violation: %q", v)
	}
	shot("11-framed-allowed")
	// Framed by another origin: the browser refuses to show it.
	frameSrc.Store(newLink())
	// The browser says why, in the embedding page's log: the signal
	// that the refusal was the CSP's, not a failure to load.
	framed, logged = frameText(t, bctx, refused.URL)
	if strings.Contains(framed, "Endpoints") {
		t.Errorf("an origin portal.frame_ancestors does not name framed the portal: %q", framed)
	}
	if v := violations(logged); len(v) != 1 || !strings.Contains(v[0], "frame-ancestors "+allowed.URL) {
		t.Errorf("the refused frame was not reported as a frame-ancestors violation: %q", logged)
	}
	shot("12-framed-refused")

	for _, secret := range []string{token, first, rotated} {
		if strings.Contains(out.String()+logs.String(), secret) {
			t.Errorf("a secret (%.10s…) appeared in the server's output", secret)
		}
	}
}

// frameText opens page, which frames the portal, waits for the frame's
// load event (it fires for a refused frame too, on the browser's error
// page), and returns the text of the framed document, and the messages
// the browser logged meanwhile (a refusal by frame-ancestors is one).
func frameText(t *testing.T, bctx context.Context, page string) (text string, logged []string) {
	t.Helper()
	var mu sync.Mutex
	lctx, stop := context.WithCancel(bctx)
	defer stop()
	if err := chromedp.Listen(lctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *cdplog.EventEntryAdded:
			msg = string(e.Entry.Source) + ": " + e.Entry.Text
		case *runtime.EventConsoleAPICalled:
			msg = "console: " + fmt.Sprint(e.Args)
		default:
			return
		}
		mu.Lock()
		logged = append(logged, msg)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.RunResponse(bctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("open %s: %v", page, err)
	}
	testwait.For(t, 20*time.Second, func() error {
		title, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.title`))
		if err != nil || title != "loaded" {
			return fmt.Errorf("the frame of %s never loaded (title %q, %v)", page, title, err)
		}
		return nil
	})
	nodes, err := chromedp.Run(bctx, chromedp.Nodes(chromedp.CSS("iframe")))
	if err != nil || len(nodes) != 1 {
		t.Fatalf("the page has %d frames (%v)", len(nodes), err)
	}
	if nodes[0].ContentDocument != nil {
		qctx, cancel := context.WithTimeout(bctx, 3*time.Second)
		text, _ = chromedp.Run(qctx, chromedp.Text(chromedp.CSS("body"), chromedp.FromNode(nodes[0])))
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	return text, slices.Clone(logged)
}

// violations are the logged messages of a frame-ancestors refusal.
func violations(logged []string) []string {
	var out []string
	for _, m := range logged {
		if strings.Contains(m, "violates the following Content Security Policy directive") && strings.Contains(m, "frame-ancestors") {
			out = append(out, m)
		}
	}
	return out
}
