package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/testwait"
)

// TestConsoleInABrowser runs `hymical serve` with the real http plugin and
// drives its console in headless Chromium the way an operator does: log in
// with the admin token, filter the deliveries to failed, open the one that
// failed, replay it once the receiver is fixed, and watch it become
// delivered; then the same pages at 375 px wide. Screenshots of each step
// are saved as PNG files in $HYMICAL_TEST_ARTIFACTS (default
// testdata/artifacts, which git ignores) and their paths logged.
//
// It needs Chromium (Debian's chromium package, which .ci/chromium.sh
// installs): without it the test skips, and under CI=true it fails.
// chromedp, a test-only dependency that the server binary never links,
// earns its place by driving Chromium over the DevTools protocol from Go:
// no Node, no WebDriver process.
func TestConsoleInABrowser(t *testing.T) {
	browser := chromiumPath(t, "console")
	artifacts := artifactsDir(t, "console")

	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	const token = "test-admin-token-0123456789-console"
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

	base, out, logs := startServe(t, dir,
		// Real trace ids on every attempt, linked to a trace UI.
		"--telemetry.exporter=stdout",
		"--console.trace_url_template=https://jaeger.example.com/trace/{trace_id}",
	)
	if !strings.Contains(out.String(), "console "+base+"/console/") {
		t.Errorf("serve does not say where the console is:\n%s", out.String())
	}

	// An endpoint and a submission, through the API as a form back end
	// would make them; the delivery fails at its first attempt.
	api := adminJSON(t, base, token)
	api("POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q,"form_ids":["contact"],"description":"CRM"}`, recv.URL+"/hook"))
	dlv := api("POST", "/v1/forms/contact/submissions", `{"email":"a@example.com"}`)["deliveries"].([]any)[0].(string)
	waitState := func(state string) {
		t.Helper()
		testwait.For(t, 20*time.Second, func() error {
			if got := api("GET", "/v1/deliveries/"+dlv, "")["state"]; got != state {
				return fmt.Errorf("delivery %s is %v, want %s", dlv, got, state)
			}
			return nil
		})
	}
	waitState("failed")

	b := newBrowserSession(t, browser, artifacts, 90*time.Second)
	bctx, do, text, navigate, shot := b.ctx, b.do, b.text, b.navigate, b.shot

	// Log in: the console sends a visitor without a session to the form.
	navigate("open the console", http.StatusOK, chromedp.Navigate(base+"/console/deliveries"))
	if h := text("h1"); h != "Log in" {
		t.Fatalf("the console without a session shows %q, want the login form", h)
	}
	do("fill the login form", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.SendKeys(chromedp.CSS("#operator"), "e2e"))
	shot("01-login")
	navigate("log in", http.StatusOK, chromedp.Click(chromedp.CSS(`form button[type=submit]`)))
	if h := text("h1"); h != "Deliveries" {
		t.Fatalf("after login the console shows %q, want the deliveries page asked for first", h)
	}
	cookies, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.cookie`))
	if err != nil || strings.Contains(cookies, "hymical_console") {
		t.Errorf("script can read the session cookie (%q, %v); it must be HttpOnly", cookies, err)
	}

	// The overview counts the failure.
	navigate("open the overview", http.StatusOK, chromedp.Click(chromedp.CSS(`nav a[href="/console/"]`)))
	if failed := text(`.stat.state-failed .n`); failed != "1" {
		t.Errorf("the overview counts %s failed, want 1", failed)
	}
	shot("02-overview-one-failed")

	// Find the failed delivery: filter the list by state.
	navigate("open the deliveries", http.StatusOK, chromedp.Click(chromedp.CSS(`nav a[href="/console/deliveries"]`)))
	do("choose state failed", chromedp.SetValue(chromedp.CSS("#f-state"), "failed"))
	navigate("apply the filter", http.StatusOK, chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)))
	if loc, _ := chromedp.Run(bctx, chromedp.Location()); !strings.Contains(loc, "state=failed") {
		t.Errorf("the filter did not reach the URL: %s", loc)
	}
	if got := text(`table tbody`); !strings.Contains(got, dlv) || !strings.Contains(got, "failed") {
		t.Fatalf("the failed deliveries do not list %s:\n%s", dlv, got)
	}
	shot("03-deliveries-failed")

	// Open it: attempt 1 failed permanently with the receiver's 400, and
	// its trace id links to the trace UI.
	navigate("open the delivery", http.StatusOK, chromedp.Click(chromedp.CSS(`a[href="/console/deliveries/`+dlv+`"]`)))
	if st := text("#delivery-state"); st != "failed" {
		t.Fatalf("the delivery page says %q, want failed", st)
	}
	history := text("table tbody")
	if !strings.Contains(history, "permanent") || !strings.Contains(history, "400") {
		t.Errorf("attempt history lacks the permanent 400:\n%s", history)
	}
	link, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.querySelector('a[href^="https://jaeger.example.com/trace/"]') || {}).href || ""`))
	if err != nil || !regexp.MustCompile(`^https://jaeger\.example\.com/trace/[0-9a-f]{32}$`).MatchString(link) {
		t.Errorf("no trace link on the attempt: %q, %v", link, err)
	}
	shot("04-delivery-failed")

	// Fix the receiver and replay; poll the page until it is delivered.
	fixed.Store(true)
	navigate("replay", http.StatusOK, chromedp.Click(chromedp.CSS(`form.replay button[type=submit]`)))
	if flash := text(".flash"); !strings.Contains(flash, "Replayed") {
		t.Errorf("after Replay the page says %q", flash)
	}
	testwait.For(t, 20*time.Second, func() error {
		if got := text("#delivery-state"); got != "delivered" {
			navigate("reload the delivery", http.StatusOK, chromedp.Navigate(base+"/console/deliveries/"+dlv))
			return fmt.Errorf("the delivery page never showed delivered; it shows %q", got)
		}
		return nil
	})
	history = text("table tbody")
	if !strings.Contains(history, "delivered") || !strings.Contains(history, "204") {
		t.Errorf("attempt history lacks the delivered 204:\n%s", history)
	}
	if replays := text("#replays + .table-wrap tbody"); !strings.Contains(replays, "console:e2e") || !strings.Contains(replays, "failed") {
		t.Errorf("the replay is not recorded as console:e2e from failed: %q", replays)
	}
	shot("05-delivery-delivered")

	// Endpoints: disable and enable again, then rotate the secret, which
	// is shown this once.
	navigate("endpoints", http.StatusOK, chromedp.Click(chromedp.CSS(`nav a[href="/console/endpoints"]`)))
	navigate("disable the endpoint", http.StatusOK, chromedp.Click(chromedp.CSS(`form[action$="/disable"] button`)))
	if flash := text(".flash"); !strings.Contains(flash, "Disabled") {
		t.Errorf("after Disable the page says %q", flash)
	}
	shot("06-endpoint-disabled")
	navigate("enable the endpoint", http.StatusOK, chromedp.Click(chromedp.CSS(`form[action$="/enable"] button`)))
	navigate("rotate the secret", http.StatusOK, chromedp.Click(chromedp.CSS(`form[action$="/rotate-secret"] button`)))
	secret, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#new-secret').value`))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		t.Errorf("the rotation page shows no new secret: %q, %v", secret, err)
	}
	shot("07-secret-rotated")
	navigate("endpoints again", http.StatusOK, chromedp.Navigate(base+"/console/endpoints"))
	if page, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`)); secret == "" || strings.Contains(page, secret) {
		t.Error("the endpoints page shows the rotated secret again")
	}
	shot("08-endpoints")

	// Keyboard: the first Tab reaches the skip link.
	do("tab", chromedp.KeyEvent("\t"))
	if focused, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.activeElement.textContent`)); focused != "Skip to content" {
		t.Errorf("the first Tab focuses %q, want the skip link", focused)
	}

	// A narrow phone screen: nothing wider than the screen but the tables,
	// which scroll inside their own region.
	do("narrow the viewport", chromedp.EmulateViewport(375, 812))
	for _, p := range []struct{ name, path string }{
		{"09-overview-375px", "/console/"},
		{"10-deliveries-375px", "/console/deliveries?state=delivered"},
		{"11-delivery-375px", "/console/deliveries/" + dlv},
	} {
		navigate(p.name, http.StatusOK, chromedp.Navigate(base+p.path))
		width, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		if err != nil || width > 375 {
			t.Errorf("%s: the page is %d px wide at a 375 px viewport (%v); it must not scroll sideways", p.path, width, err)
		}
		shot(p.name)
	}

	// Delete the endpoint: a page of its own asks first, and after the
	// delete the endpoint is gone from the list while its deliveries stay
	// readable.
	do("widen the viewport", chromedp.EmulateViewport(1280, 900))
	navigate("endpoints for the delete", http.StatusOK, chromedp.Navigate(base+"/console/endpoints"))
	navigate("ask to delete", http.StatusOK, chromedp.Click(chromedp.CSS(`a[href$="/delete"]`)))
	if h := text("h1"); !strings.HasPrefix(h, "Delete endpoint ep_") {
		t.Errorf("the delete link leads to %q, want the confirmation page", h)
	}
	shot("12-endpoint-delete-confirm")
	navigate("delete", http.StatusOK, chromedp.Click(chromedp.CSS(`form[action$="/delete"] button[type=submit]`)))
	if flash := text(".flash"); !strings.Contains(flash, "eleted") {
		t.Errorf("after Delete the page says %q", flash)
	}
	if page, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('main').innerText`)); strings.Contains(page, "Delete…") {
		t.Errorf("the deleted endpoint is still listed:\n%s", page)
	}
	shot("13-endpoint-deleted")
	navigate("the deleted endpoint's delivery", http.StatusOK, chromedp.Navigate(base+"/console/deliveries/"+dlv))

	// Log out: the session is gone.
	navigate("log out", http.StatusOK, chromedp.Click(chromedp.CSS(`form.logout button`)))
	if h := text("h1"); h != "Log in" {
		t.Errorf("after logout the page is %q", h)
	}
	if bytes.Contains([]byte(out.String()+logs.String()), []byte(token)) {
		t.Error("the admin token appeared in the server's output")
	}
}

// chromiumPath is the Chromium a browser test of face (the console, the
// portal) drives: without it the test skips, and under CI=true it fails.
func chromiumPath(t *testing.T, face string) string {
	t.Helper()
	browser, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is not on PATH; CI must run the %s's browser test: install it with .ci/chromium.sh (apt-get install chromium chromium-driver)", face)
		}
		t.Skipf("chromium is not on PATH, so the %s's browser test cannot run: apt-get install chromium (or run .ci/chromium.sh)", face)
	}
	t.Log("hymical-test-uses: chromium") // counted by harness/testrun
	return browser
}

// artifactsDir is where a browser test saves screenshots:
// $HYMICAL_TEST_ARTIFACTS, or testdata/artifacts (ignored by git), in the
// folder name.
func artifactsDir(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("HYMICAL_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("testdata", "artifacts")
	}
	dir = filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// browserSession is one headless Chromium driving the server's pages, with
// the steps both browser tests take, each failing the test with what it
// was doing.
type browserSession struct {
	t         *testing.T
	ctx       context.Context
	artifacts string
}

// newBrowserSession starts the Chromium at path for the test, its steps
// bounded by timeout in all, and saves screenshots in artifacts.
func newBrowserSession(t *testing.T, path, artifacts string, timeout time.Duration) *browserSession {
	t.Helper()
	// We run as root in CI containers, where Chromium's sandbox cannot
	// start; the pages are our own, on loopback.
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	bctx, cancelTimeout := context.WithTimeout(bctx, timeout)
	t.Cleanup(cancelTimeout)
	return &browserSession{t: t, ctx: bctx, artifacts: artifacts}
}

// do runs steps on the current page.
func (b *browserSession) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// text is the trimmed text of the first element sel matches.
func (b *browserSession) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// navigate runs steps that lead to a new page (a click on a link or a
// submit button, redirects included), waits for it, and wants it to
// answer the status want.
func (b *browserSession) navigate(what string, want int, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	resp, err := chromedp.RunResponse(b.ctx, steps...)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	if resp.Status != int64(want) {
		b.t.Fatalf("%s: the page answered %d, want %d", what, resp.Status, want)
	}
}

// shot saves a screenshot of the whole page as name.png in the artifacts
// directory, and logs where.
func (b *browserSession) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.artifacts, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", path)
}

// adminJSON calls the API at base with the admin token and decodes the
// JSON answer, failing the test on any status of 300 or more.
func adminJSON(t *testing.T, base, token string) func(method, path, body string) map[string]any {
	return func(method, path, body string) map[string]any {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %v %v", method, path, resp.StatusCode, v, err)
		}
		return v
	}
}
