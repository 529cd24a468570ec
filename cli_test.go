package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/config"
)

// TestEveryCommandHasItsOwnHelp runs --help on every command and
// subcommand: each exits 0 (run returns flag.ErrHelp, which main maps to
// 0, or nil), prints its own usage on stdout, and lists its own flags, not
// another command's.
func TestEveryCommandHasItsOwnHelp(t *testing.T) {
	t.Parallel()
	client := []string{"server", "token", "operator"}
	controls := []string{"rate-limit", "rate-burst", "max-in-flight", "ordered", "retry-schedule"}
	cat := func(lists ...[]string) []string {
		var out []string
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	for _, tc := range []struct {
		args []string
		// usage is how the usage starts.
		usage string
		// flags are named as -NAME in the flag listing; serve's keys as
		// --KEY; lines are what else it must say.
		flags, notFlags, lines []string
	}{
		{args: nil, usage: "usage: hymical COMMAND", lines: []string{"serve", "endpoints", "deliveries", "version"}},
		{args: []string{"help"}, usage: "usage: hymical COMMAND"},
		{args: []string{"serve"}, usage: "Usage: hymical serve", lines: []string{"--database.url", "--worker.lease_seconds", "--server.listen"}},
		{args: []string{"migrate"}, usage: "usage: hymical migrate", flags: []string{"database", "to", "force"}, notFlags: client},
		{args: []string{"plugins"}, usage: "usage: hymical plugins COMMAND", lines: []string{"  list "}},
		{args: []string{"plugins", "list"}, usage: "Usage: hymical plugins list", lines: []string{"--plugins.dir", "--database.url"}},
		{args: []string{"demo"}, usage: "usage: hymical demo", flags: []string{"plugins", "timeout"}, notFlags: cat(client, []string{"database"})},
		{args: []string{"submit"}, usage: "usage: hymical submit", flags: cat(client, []string{"form", "data", "idempotency-key"}), notFlags: cat(controls, []string{"url", "state"})},
		{args: []string{"endpoints"}, usage: "usage: hymical endpoints COMMAND", lines: []string{"  add ", "  list ", "  set ", "  disable ", "  enable ", "  rotate-secret ", "  delete "}},
		{args: []string{"endpoints", "rotate-secret"}, usage: "usage: hymical endpoints rotate-secret", flags: cat(client, []string{"idempotency-key"}),
			notFlags: cat(controls, []string{"url", "wide", "yes"})},
		{args: []string{"endpoints", "add"}, usage: "usage: hymical endpoints add",
			flags:    cat(client, controls, []string{"url", "transport", "description", "signature-scheme", "form", "event-type", "endpoint-config", "header", "idempotency-key"}),
			notFlags: []string{"wide", "o", "state", "cursor", "yes", "force"}},
		{args: []string{"endpoints", "list"}, usage: "usage: hymical endpoints list", flags: cat(client, []string{"wide", "o", "page-size"}),
			notFlags: cat(controls, []string{"url", "transport", "description", "form", "state", "yes"})},
		{args: []string{"endpoints", "set"}, usage: "usage: hymical endpoints set", flags: cat(client, controls, []string{"header", "no-headers"}),
			notFlags: []string{"url", "transport", "form", "wide", "signature-scheme"}},
		{args: []string{"endpoints", "disable"}, usage: "usage: hymical endpoints disable", flags: client, notFlags: cat(controls, []string{"url", "wide"})},
		{args: []string{"endpoints", "enable"}, usage: "usage: hymical endpoints enable", flags: client, notFlags: cat(controls, []string{"url", "wide"})},
		{args: []string{"endpoints", "delete"}, usage: "usage: hymical endpoints delete", flags: cat(client, []string{"yes", "force"}),
			notFlags: cat(controls, []string{"url", "wide", "o"})},
		{args: []string{"deliveries"}, usage: "usage: hymical deliveries COMMAND", lines: []string{"  list ", "  show "}},
		{args: []string{"deliveries", "list"}, usage: "usage: hymical deliveries list", flags: cat(client, []string{"state", "endpoint", "form", "limit", "cursor", "o"}),
			notFlags: cat(controls, []string{"url", "wide"})},
		{args: []string{"deliveries", "show"}, usage: "usage: hymical deliveries show", flags: cat(client, []string{"o"}),
			notFlags: []string{"state", "cursor", "limit", "url"}},
		{args: []string{"replay"}, usage: "usage: hymical replay", flags: cat(client, []string{"state", "endpoint", "form", "limit", "idempotency-key"}), notFlags: []string{"cursor", "url", "wide"}},
		{args: []string{"tokens"}, usage: "usage: hymical tokens COMMAND", lines: []string{"  create ", "  list ", "  revoke "}},
		{args: []string{"tokens", "create"}, usage: "usage: hymical tokens create", flags: cat(client, []string{"form", "expires-in", "name", "read-only"}), notFlags: []string{"url", "wide", "ttl"}},
		{args: []string{"tokens", "list"}, usage: "usage: hymical tokens list", flags: cat(client, []string{"o"}), notFlags: []string{"form", "expires-in"}},
		{args: []string{"tokens", "revoke"}, usage: "usage: hymical tokens revoke", flags: client, notFlags: []string{"form", "o"}},
		{args: []string{"portal"}, usage: "usage: hymical portal COMMAND", lines: []string{"  link ", "  list ", "  revoke "}},
		{args: []string{"portal", "link"}, usage: "usage: hymical portal link", flags: cat(client, []string{"form", "ttl", "read-only"}), notFlags: []string{"expires-in", "o"}},
		{args: []string{"portal", "list"}, usage: "usage: hymical portal list", flags: cat(client, []string{"o"}), notFlags: []string{"form", "ttl"}},
		{args: []string{"portal", "revoke"}, usage: "usage: hymical portal revoke", flags: client, notFlags: []string{"form", "o"}},
		{args: []string{"version"}, usage: "usage: hymical version", notFlags: client},
		{args: []string{"backup"}, usage: "usage: hymical backup --to FILE", lines: []string{"VACUUM INTO", "must not exist", "pg_dump", "hands out every endpoint's signing secret"}},
		{args: []string{"secrets"}, usage: "usage: hymical secrets COMMAND", lines: []string{"  rotate-key "}},
		{args: []string{"secrets", "rotate-key"}, usage: "usage: hymical secrets rotate-key", flags: []string{"database", "key-file", "new-key-file", "generate", "force"},
			notFlags: cat(client, []string{"key", "new-key"}), lines: []string{"process list", "in one\ntransaction"}},
	} {
		name := strings.Join(append(tc.args, "--help"), " ")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append(tc.args, "--help"), &stdout, &stderr)
			if err != nil && !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("hymical %s: %v (exit 1)\nstdout:\n%s\nstderr:\n%s", name, err, stdout.String(), stderr.String())
			}
			out, other := stdout.String(), stderr.String()
			if other != "" {
				t.Errorf("hymical %s wrote to the other stream:\n%s", name, other)
			}
			if !strings.HasPrefix(out, tc.usage) {
				t.Errorf("hymical %s does not start with %q:\n%s", name, tc.usage, out)
			}
			for _, f := range tc.flags {
				if !flagListed(out, f) {
					t.Errorf("hymical %s does not list its flag -%s:\n%s", name, f, out)
				}
			}
			for _, f := range tc.notFlags {
				if flagListed(out, f) {
					t.Errorf("hymical %s lists -%s, which it does not take:\n%s", name, f, out)
				}
			}
			for _, l := range tc.lines {
				if !strings.Contains(out, l) {
					t.Errorf("hymical %s does not say %q:\n%s", name, l, out)
				}
			}
		})
	}
	// Other ways of asking.
	for _, args := range [][]string{{"-h"}, {"help", "endpoints", "list"}, {"endpoints", "list", "-h"}, {"endpoints", "help"}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) || stdout.Len() == 0 || stderr.Len() > 0 {
			t.Errorf("hymical %s: %v, %d bytes of usage on stdout, stderr %q", strings.Join(args, " "), err, stdout.Len(), stderr.String())
		}
	}
}

// flagListed reports whether a flag package listing names -name.
func flagListed(usage, name string) bool {
	return regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(name) + `( |$)`).MatchString(usage)
}

// TestUnknownCommandsFail: a command or subcommand that does not exist is
// an error, with the usage on stderr and nothing on stdout.
func TestUnknownCommandsFail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		usage string
	}{
		{nil, "usage: hymical COMMAND"},
		{[]string{"bogus"}, "usage: hymical COMMAND"},
		{[]string{"endpoints"}, "usage: hymical endpoints COMMAND"},
		{[]string{"endpoints", "bogus"}, "usage: hymical endpoints COMMAND"},
		{[]string{"deliveries", "bogus"}, "usage: hymical deliveries COMMAND"},
		{[]string{"plugins", "bogus"}, "usage: hymical plugins COMMAND"},
		{[]string{"endpoints", "list", "--bogus"}, "usage: hymical endpoints list"},
		{[]string{"endpoints", "set"}, "usage: hymical endpoints set"},
		{[]string{"deliveries", "show"}, "usage: hymical deliveries show"},
		{[]string{"migrate", "extra"}, "usage: hymical migrate"},
		{[]string{"version", "extra"}, "usage: hymical version"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, &stdout, &stderr)
		if err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("hymical %s: %v, want an error", strings.Join(tc.args, " "), err)
		}
		if stdout.Len() > 0 || !strings.HasPrefix(stderr.String(), tc.usage) {
			t.Errorf("hymical %s: stdout %q, stderr %q; want the usage %q on stderr only", strings.Join(tc.args, " "), stdout.String(), stderr.String(), tc.usage)
		}
	}
}

// TestEndpointListFits checks the narrow list against the worst rows it
// can get: the longest status, a long transport name, URLs far longer than
// the line, a query that may hold a token.
func TestEndpointListFits(t *testing.T) {
	t.Parallel()
	now := time.Now()
	long := "https://hooks.example.com/" + strings.Repeat("segment/", 30) + "the-hook?token=" + strings.Repeat("s", 80)
	eps := []apiwire.Endpoint{
		{ID: "ep_" + strings.Repeat("a", 32), Transport: "http", URL: long},
		{ID: "ep_" + strings.Repeat("b", 32), Transport: "a-transport-with-a-long-name", URL: "https://" + strings.Repeat("sub.", 40) + "example.com/x",
			Disabled: true, DisabledAt: &now, DisabledReason: "a reason longer than any the server gives"},
		{ID: "ep_" + strings.Repeat("c", 32), Transport: "nats", Config: map[string]string{"subject": strings.Repeat("forms.", 40), "url": "nats://[redacted]@n:4222"}},
		{ID: "ep_" + strings.Repeat("d", 32), Transport: "http", URL: "https://short.example.com/in", FailingSince: &now},
	}
	var b bytes.Buffer
	if err := writeEndpoints(&b, eps, listWidth); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != len(eps)+1 {
		t.Fatalf("%d lines for %d endpoints:\n%s", len(lines), len(eps), b.String())
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > listWidth {
			t.Errorf("%d columns: %s", n, l)
		}
	}
	for i, e := range eps {
		if !strings.HasPrefix(lines[i+1], e.ID+" ") {
			t.Errorf("line %d does not start with the whole id %s: %s", i+1, e.ID, lines[i+1])
		}
	}
	for _, want := range []string{"https://hooks.example.com/seg", "-hook?…", "https://short.example.com/in", "failing", "disabled (a reason"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the list does not show %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "token=") {
		t.Errorf("a shortened URL kept its query:\n%s", b.String())
	}
}

func TestShortenURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		width int
		want  string
	}{
		{"https://a.example/in", 40, "https://a.example/in"},
		{"https://a.example/in?token=secret", 25, "https://a.example/in?…"},
		{"https://a.example/aaaaaaaaaa/bbbbbbbbbb/hook", 30, "https://a.example/aaa…bbb/hook"},
		{"https://a.example/aaaaaaaaaa/bbbbbbbbbb/hook?token=secret", 30, "https://a.example/aaa…b/hook?…"},
		{"https://" + strings.Repeat("sub.", 10) + "example/in", 20, "https://sub.sub.sub…"},
		{"not a url at all, and long", 10, "not a url…"},
	} {
		got := shortenURL(tc.in, tc.width)
		if got != tc.want || utf8.RuneCountInString(got) > tc.width {
			t.Errorf("shortenURL(%q, %d) = %q, want %q", tc.in, tc.width, got, tc.want)
		}
	}
}

// TestEndpointsListOnARealServer renders endpoints list against `hymical
// serve` with several endpoints whose URLs are longer than a line: the
// default fits in 120 columns, --wide shows everything in full, -o json is
// the API's answer.
func TestEndpointsListOnARealServer(t *testing.T) {
	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FORMS_SERVER_ADMIN_TOKEN", "test-admin-token-0123456789")
	base, _, _ := startServe(t, dir)
	hymical := func(args ...string) string {
		t.Helper()
		var b bytes.Buffer
		if err := run(t.Context(), append(args, "--server", base), &b, &b); err != nil {
			t.Fatalf("hymical %s: %v\n%s", strings.Join(args, " "), err, b.String())
		}
		return b.String()
	}
	urls := []string{
		"http://127.0.0.1:9/" + strings.Repeat("a-long-path-segment/", 8) + "hook",
		"http://127.0.0.1:9/in?token=" + strings.Repeat("t", 120),
		"http://127.0.0.1:9/short",
		"http://127.0.0.1:9/forms/" + strings.Repeat("x", 200),
	}
	var ids []string
	const headerToken = "cli-hdr-token-83ab1f"
	for i, u := range urls {
		args := []string{"endpoints", "add", "--url", u, "--form", fmt.Sprintf("form_%d", i), "--description", "endpoint number " + fmt.Sprint(i)}
		if i == 2 {
			args = append(args, "--header", "Authorization: Bearer "+headerToken, "--header", "X-Tenant:acme-tenant-77")
		}
		out := hymical(args...)
		id := regexp.MustCompile(`ep_[0-9a-f]{32}`).FindString(out)
		if id == "" {
			t.Fatalf("endpoints add printed no id: %s", out)
		}
		ids = append(ids, id)
	}
	hymical("endpoints", "disable", ids[0])
	hymical("endpoints", "set", ids[1], "--rate-limit", "5", "--ordered=true")
	// 'Name' alone keeps the value; the answer names the headers only.
	if out := hymical("endpoints", "set", ids[2], "--header", "X-Tenant", "--header", "Authorization"); !strings.Contains(out, "headers X-Tenant: [redacted], Authorization: [redacted]") {
		t.Errorf("endpoints set --header printed %q", out)
	}

	list := hymical("endpoints", "list")
	lines := strings.Split(strings.TrimSuffix(list, "\n"), "\n")
	if len(lines) != len(ids)+1 || !strings.HasPrefix(lines[0], "ID ") {
		t.Fatalf("endpoints list: a header and %d rows expected:\n%s", len(ids), list)
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > listWidth {
			t.Errorf("endpoints list line of %d columns: %s", n, l)
		}
	}
	for _, id := range ids {
		if !strings.Contains(list, id+" ") {
			t.Errorf("endpoints list does not show the whole id %s:\n%s", id, list)
		}
	}
	if !strings.Contains(list, "disabled (operator)") || !strings.Contains(list, "http://127.0.0.1:9/short") {
		t.Errorf("endpoints list:\n%s", list)
	}
	t.Logf("endpoints list:\n%s", list)

	// The token's value is hidden, in every form of the list.
	shown := slices.Clone(urls)
	shown[1] = "http://127.0.0.1:9/in?token=[redacted]"
	wide := hymical("endpoints", "list", "--wide")
	for _, want := range append(shown, "5/s, ordered", "form_3", "endpoint number 2", "disabled (operator, ", "X-Tenant: [redacted], Authorization: [redacted]") {
		if !strings.Contains(wide, want) {
			t.Errorf("endpoints list --wide does not show %q:\n%s", want, wide)
		}
	}

	var got apiwire.EndpointList
	if err := json.Unmarshal([]byte(hymical("endpoints", "list", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Endpoints) != len(urls) {
		t.Fatalf("-o json has %d endpoints, want %d", len(got.Endpoints), len(urls))
	}
	byID := map[string]apiwire.Endpoint{}
	for _, e := range got.Endpoints {
		byID[e.ID] = e
	}
	for i, id := range ids {
		if byID[id].URL != shown[i] {
			t.Errorf("-o json: endpoint %s has URL %q, want %q", id, byID[id].URL, shown[i])
		}
	}
	if strings.Contains(wide, "ttt") || !slices.Equal(byID[ids[1]].URLMasked, []string{"query:token"}) {
		t.Errorf("the token is shown, or -o json does not say it is hidden: %+v\n%s", byID[ids[1]], wide)
	}
	if e := byID[ids[1]]; e.RateLimit != 5 || !e.Ordered || !byID[ids[0]].Disabled {
		t.Errorf("-o json lost the controls or the disabling: %+v", got.Endpoints)
	}
	if hs := byID[ids[2]].Headers; len(hs) != 2 || hs[0].Name != "X-Tenant" || hs[0].Value != "[redacted]" {
		t.Errorf("-o json shows the headers as %+v, want X-Tenant then Authorization, masked", hs)
	}
	for what, out := range map[string]string{"list": list, "list --wide": wide, "list -o json": hymical("endpoints", "list", "-o", "json")} {
		if strings.Contains(out, headerToken) || strings.Contains(out, "acme-tenant-77") {
			t.Errorf("endpoints %s shows a header value:\n%s", what, out)
		}
	}
}

// deliveries show prints why a delivery's claim sent nothing, which no
// attempt row records, and leaves the line out when nothing was unsent.
func TestDeliveriesShowSaysWhyNothingWasSent(t *testing.T) {
	const reason = `transport plugin "http" is not running: fork/exec: no such file or directory`
	detail := apiwire.DeliveryDetail{
		Delivery: apiwire.Delivery{ID: "dlv_1", EndpointID: "ep_1", EventID: "evt_1", State: apiwire.StatePending,
			NextAttemptAt: time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC), UnsentReason: reason},
		AttemptHistory: []apiwire.Attempt{},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/deliveries/dlv_1" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(detail)
	}))
	defer srv.Close()
	show := func() string {
		t.Helper()
		var b bytes.Buffer
		if err := run(t.Context(), []string{"deliveries", "show", "dlv_1", "--server", srv.URL, "--token", "t"}, &b, &b); err != nil {
			t.Fatalf("deliveries show: %v\n%s", err, b.String())
		}
		return b.String()
	}
	if out := show(); !strings.Contains(out, "not sent (no request went out, no attempt recorded): "+reason) {
		t.Fatalf("deliveries show does not give the reason:\n%s", out)
	}
	detail.UnsentReason = ""
	if out := show(); strings.Contains(out, "not sent") {
		t.Fatalf("deliveries show with nothing unsent:\n%s", out)
	}
}

// submit lists the deliveries a submission fanned out to, and when there
// are none says why, since nothing will ever be sent for it.
func TestSubmitSaysWhyNothingWillBeSent(t *testing.T) {
	tests := []struct {
		name       string
		deliveries []string
		want       string
	}{
		{"deliveries are listed", []string{"dlv_1", "dlv_2"},
			"submission sub_1 (event evt_1) → 2 deliveries: dlv_1 dlv_2\n"},
		{"none names the form and where to look", []string{},
			`submission sub_1 (event evt_1) → 0 deliveries: no endpoint takes submissions of form "signup" (hymical endpoints list --wide shows each endpoint's forms and event types)` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/forms/signup/submissions" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(http.StatusCreated)
				_ = json.NewEncoder(w).Encode(apiwire.IngestResult{SubmissionID: "sub_1", EventID: "evt_1", Deliveries: tt.deliveries})
			}))
			defer srv.Close()
			var out, errs bytes.Buffer
			if err := run(t.Context(), []string{"submit", "--form", "signup", "--server", srv.URL, "--token", "t"}, &out, &errs); err != nil {
				t.Fatalf("submit: %v\n%s", err, errs.String())
			}
			if out.String() != tt.want {
				t.Errorf("submit printed\n%q\nwant\n%q", out.String(), tt.want)
			}
		})
	}
}

// deliveries show gives a pending delivery's next attempt, and a terminal
// one's completion instead: a failed delivery is never tried again, and
// printing its last next_attempt_at read as a retry still to come.
func TestDeliveriesShowSaysWhenTheNextAttemptIs(t *testing.T) {
	next := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	done := time.Date(2026, 12, 3, 14, 0, 5, 0, time.UTC)
	tests := []struct {
		name      string
		state     apiwire.DeliveryState
		completed *time.Time
		want      string
		wantNot   string
	}{
		{"a pending delivery names its next attempt", apiwire.StatePending, nil,
			"next attempt 2026-12-03T14:00:00Z", "completed"},
		{"a delivered one says when it completed", apiwire.StateDelivered, &done,
			"completed 2026-12-03T14:00:05Z\n", "next attempt"},
		{"a failed one says nothing more will be tried", apiwire.StateFailed, &done,
			"completed 2026-12-03T14:00:05Z, no further attempt (replay it once the cause is fixed)", "next attempt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			detail := apiwire.DeliveryDetail{
				Delivery: apiwire.Delivery{ID: "dlv_1", EndpointID: "ep_1", EventID: "evt_1", State: tt.state,
					Attempts: 1, CycleAttempts: 1, NextAttemptAt: next, CompletedAt: tt.completed},
				AttemptHistory: []apiwire.Attempt{},
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = json.NewEncoder(w).Encode(detail)
			}))
			defer srv.Close()
			var b bytes.Buffer
			if err := run(t.Context(), []string{"deliveries", "show", "dlv_1", "--server", srv.URL, "--token", "t"}, &b, &b); err != nil {
				t.Fatalf("deliveries show: %v\n%s", err, b.String())
			}
			out := b.String()
			if !strings.Contains(out, tt.want) {
				t.Errorf("deliveries show lacks %q:\n%s", tt.want, out)
			}
			if strings.Contains(out, tt.wantNot) {
				t.Errorf("deliveries show says %q:\n%s", tt.wantNot, out)
			}
		})
	}
}

// deliveries show hides the secrets of a URL that an attempt's error or
// the reason nothing was sent quotes, even when the server did not (an
// older one, or a third-party plugin's words): what is not secret stays.
func TestDeliveriesShowHidesURLSecrets(t *testing.T) {
	const target = "https://carol:pw@127.0.0.1:8443/hook?token=SECRET123&x=1"
	at := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	detail := apiwire.DeliveryDetail{
		Delivery: apiwire.Delivery{ID: "dlv_1", EndpointID: "ep_1", EventID: "evt_1", State: apiwire.StateFailed,
			NextAttemptAt: at, UnsentReason: "the transport refused " + target},
		AttemptHistory: []apiwire.Attempt{{Number: 1, Outcome: apiwire.OutcomeRetryable, StartedAt: at, FinishedAt: at,
			Error: `Post "` + target + `": dial tcp 127.0.0.1:8443: connect: connection refused`}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(detail)
	}))
	defer srv.Close()
	var b bytes.Buffer
	if err := run(t.Context(), []string{"deliveries", "show", "dlv_1", "--server", srv.URL, "--token", "t"}, &b, &b); err != nil {
		t.Fatalf("deliveries show: %v\n%s", err, b.String())
	}
	out := b.String()
	for _, leak := range []string{"SECRET123", "carol", ":pw"} {
		if strings.Contains(out, leak) {
			t.Errorf("deliveries show prints %q:\n%s", leak, out)
		}
	}
	const shown = "https://[redacted]@127.0.0.1:8443/hook?token=[redacted]&x=1"
	for _, want := range []string{"the transport refused " + shown, `Post "` + shown + `": dial tcp`} {
		if !strings.Contains(out, want) {
			t.Errorf("deliveries show lacks %q:\n%s", want, out)
		}
	}
}

// endpoints list follows the API's pages, endpoints delete asks for --yes
// and --force before it ends deliveries, and endpoints add, endpoints
// rotate-secret and replay with a repeated --idempotency-key do what they
// do once: against a real server.
func TestEndpointsDeleteAndPagesOnARealServer(t *testing.T) {
	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FORMS_SERVER_ADMIN_TOKEN", "test-admin-token-0123456789")
	base, _, _ := startServe(t, dir)
	hymical := func(args ...string) (string, error) {
		t.Helper()
		var b bytes.Buffer
		err := run(t.Context(), append(args, "--server", base), &b, &b)
		return b.String(), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := hymical(args...)
		if err != nil {
			t.Fatalf("hymical %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	idPattern := regexp.MustCompile(`ep_[0-9a-f]{32}`)
	var ids []string
	for i := range 5 {
		ids = append(ids, idPattern.FindString(must("endpoints", "add", "--url", "http://127.0.0.1:9/hook", "--form", fmt.Sprintf("form_%d", i))))
	}

	listed := func() []string { return idPattern.FindAllString(must("endpoints", "list", "--page-size", "2"), -1) }
	want := slices.Clone(ids)
	slices.Sort(want)
	slices.Reverse(want)
	if got := listed(); !slices.Equal(got, want) {
		t.Fatalf("endpoints list --page-size 2 listed %v, want every endpoint newest first %v", got, want)
	}

	gone := ids[0]
	if out, err := hymical("endpoints", "delete", gone); err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("endpoints delete without --yes: %v\n%s", err, out)
	}
	if got := listed(); len(got) != len(ids) {
		t.Fatalf("a delete without --yes deleted: %v", got)
	}
	must("submit", "--form", "form_0")
	out, err := hymical("endpoints", "delete", gone, "--yes")
	if err == nil || !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), "endpoint_busy") {
		t.Fatalf("endpoints delete of an endpoint with a delivery under way: %v\n%s", err, out)
	}
	out = must("endpoints", "delete", gone, "--yes", "--force")
	if !strings.Contains(out, "endpoint "+gone+" deleted at ") || !strings.Contains(out, `failed with the reason "endpoint deleted"`) {
		t.Fatalf("endpoints delete --force said: %s", out)
	}
	if got := listed(); slices.Contains(got, gone) || len(got) != len(ids)-1 {
		t.Fatalf("after the delete, endpoints list shows %v", got)
	}
	if out := must("deliveries", "list", "--endpoint", gone); !strings.Contains(out, "failed") {
		t.Fatalf("the deleted endpoint's delivery is not readable as failed:\n%s", out)
	}
	if out, err := hymical("endpoints", "delete", gone, "--yes"); err == nil || !strings.Contains(err.Error(), "endpoint_deleted") {
		t.Fatalf("a second delete: %v\n%s", err, out)
	}

	first := must("endpoints", "add", "--url", "http://127.0.0.1:9/again", "--idempotency-key", "add-once")
	again := must("endpoints", "add", "--url", "http://127.0.0.1:9/again", "--idempotency-key", "add-once")
	if first != again || idPattern.FindString(first) == "" {
		t.Fatalf("a repeated --idempotency-key answered differently:\n%s\n%s", first, again)
	}
	if got := listed(); len(got) != len(ids) {
		t.Fatalf("a repeated --idempotency-key made a second endpoint: %v", got)
	}
	if out, err := hymical("endpoints", "add", "--url", "http://127.0.0.1:9/other", "--idempotency-key", "add-once"); err == nil ||
		!strings.Contains(err.Error(), "idempotency_key_reused") {
		t.Fatalf("the key with other flags: %v\n%s", err, out)
	}

	// rotate-secret and replay take a key too: a repeat does nothing more.
	rotated := must("endpoints", "rotate-secret", ids[1], "--idempotency-key", "rotate-once")
	secret := regexp.MustCompile(`whsec_\S+`).FindString(rotated)
	repeated := must("endpoints", "rotate-secret", ids[1], "--idempotency-key", "rotate-once")
	if secret == "" || !strings.Contains(repeated, "already rotated") || !strings.Contains(repeated, secret) {
		t.Fatalf("a repeated rotate-secret --idempotency-key answered:\n%s\nafter:\n%s", repeated, rotated)
	}
	if out := must("endpoints", "rotate-secret", ids[1]); strings.Contains(out, secret) || strings.Contains(out, "already") {
		t.Fatalf("rotate-secret without a key did not rotate:\n%s", out)
	}
	if out, err := hymical("endpoints", "rotate-secret", ids[1], "--idempotency-key", "rotate-once"); err == nil || !strings.Contains(err.Error(), "secret_rotated") {
		t.Fatalf("a repeat after a later rotation: %v\n%s", err, out)
	}
	if out := must("replay", "--state", "failed", "--idempotency-key", "replay-once"); !strings.HasPrefix(out, "replayed 0 failed") {
		t.Fatalf("replay --idempotency-key said: %s", out)
	}
	if out := must("replay", "--state", "failed", "--idempotency-key", "replay-once"); !strings.Contains(out, "already replayed 0") {
		t.Fatalf("a repeated replay --idempotency-key said: %s", out)
	}
	if out, err := hymical("replay", "--state", "delivered", "--idempotency-key", "replay-once"); err == nil || !strings.Contains(err.Error(), "idempotency_key_reused") {
		t.Fatalf("the replay key with other flags: %v\n%s", err, out)
	}
}

// safeText escapes what would act on a terminal or forge a table's layout
// and keeps every other character as it is.
func TestSafeText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain text, café, 日本語, 😀, a\\b", "plain text, café, 日本語, 😀, a\\b"},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"a\r\nb\tc", `a\r\nb\tc`},
		{"bell\x07 nul\x00 del\x7f", `bell\x07 nul\x00 del\x7f`},
		{"c1 \u009b31m \u0085", `c1 \u009b31m \u0085`},
		{"rtl \u202egnp.exe \u2066x\u2069", `rtl \u202egnp.exe \u2066x\u2069`},
		{"line\u2028sep", `line\u2028sep`},
		{"not utf-8 \xff\xfe", `not utf-8 \xff\xfe`},
		{"a real \ufffd stays", "a real \ufffd stays"},
		{"", ""},
	} {
		if got := safeText(tc.in); got != tc.want {
			t.Errorf("safeText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// controlsIn lists the bytes and characters of out that act on a terminal:
// every control but the newlines that end its lines, and the C1 controls.
func controlsIn(out string) []string {
	var found []string
	for _, r := range out {
		if r != '\n' && (r < 0x20 || r >= 0x7f && r <= 0x9f || r == 0x202e) {
			found = append(found, fmt.Sprintf("%U", r))
		}
	}
	return found
}

// deliveries show prints a plugin's error, and the reason nothing was
// sent, with their control characters escaped: an ANSI escape stays
// inert, and a newline and tabs cannot add a forged row to the attempt
// table.
func TestDeliveriesShowEscapesControlCharacters(t *testing.T) {
	at := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	const forged = "\n2\tdelivered\t200\tfalse\t2026-12-03T14:00:01Z\t5ms\t-\t"
	detail := apiwire.DeliveryDetail{
		Delivery: apiwire.Delivery{ID: "dlv_1", EndpointID: "ep_1", EventID: "evt_1", State: apiwire.StateFailed,
			NextAttemptAt: at, UnsentReason: "refused \x1b]0;pwned\x07 \u009b2J"},
		AttemptHistory: []apiwire.Attempt{{Number: 1, Outcome: apiwire.OutcomeRetryable, StartedAt: at, FinishedAt: at,
			Error: "\x1b[31mreceiver said: café\r" + forged}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(detail)
	}))
	defer srv.Close()
	var b bytes.Buffer
	if err := run(t.Context(), []string{"deliveries", "show", "dlv_1", "--server", srv.URL, "--token", "t"}, &b, &b); err != nil {
		t.Fatalf("deliveries show: %v\n%s", err, b.String())
	}
	out := b.String()
	if c := controlsIn(out); len(c) > 0 {
		t.Fatalf("deliveries show prints the control characters %v:\n%q", c, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5 || strings.HasPrefix(lines[4], "2 ") {
		t.Fatalf("deliveries show prints %d lines, want 5 (two of the delivery, not sent, the table's header, one attempt):\n%s", len(lines), out)
	}
	for _, want := range []string{`refused \x1b]0;pwned\x07 \u009b2J`, `\x1b[31mreceiver said: café\r\n2\tdelivered\t200`} {
		if !strings.Contains(out, want) {
			t.Errorf("deliveries show lacks %q:\n%s", want, out)
		}
	}
	// -o json is the exact text, for a program.
	b.Reset()
	if err := run(t.Context(), []string{"deliveries", "show", "dlv_1", "--server", srv.URL, "--token", "t", "-o", "json"}, &b, &b); err != nil {
		t.Fatal(err)
	}
	var back apiwire.DeliveryDetail
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.AttemptHistory[0].Error != detail.AttemptHistory[0].Error {
		t.Fatalf("-o json: %v, %+v", err, back)
	}
}

// endpoints list, narrow and wide, and the status lines of endpoints set
// escape the control characters of what the endpoint's owner wrote.
func TestEndpointsListEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	now := time.Now()
	eps := []apiwire.Endpoint{
		{ID: "ep_1", Transport: "http", URL: "https://hooks.example.com/in\x1b[8m", Description: "ours\x1b[2J\u202e\tfake\tcolumn",
			FormIDs: []string{"contact\x1b[0m"}, Disabled: true, DisabledAt: &now, DisabledReason: "gone\r\nep_2  http  enabled"},
		{ID: "ep_2", Transport: "nats", Config: map[string]string{"subject": "forms.\x1b[1m", "url": "nats://n:4222"}},
	}
	for name, write := range map[string]func(*bytes.Buffer) error{
		"narrow": func(b *bytes.Buffer) error { return writeEndpoints(b, eps, listWidth) },
		"wide":   func(b *bytes.Buffer) error { return writeEndpointsWide(b, eps) },
		"status": func(b *bytes.Buffer) error { _, err := fmt.Fprintln(b, endpointStatus(eps[0])); return err },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if c := controlsIn(out); len(c) > 0 {
			t.Errorf("%s: prints the control characters %v:\n%q", name, c, out)
		}
		want := len(eps) + 1
		if name == "status" {
			want = 1
		}
		if n := strings.Count(out, "\n"); n != want {
			t.Errorf("%s: %d lines, want %d:\n%s", name, n, want, out)
		}
	}
}

// TestEnvRenamed: the CLI's variables take the new name first and read the
// old one, with a warning naming the new, only when the new is not set.
func TestEnvRenamed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		env      map[string]string
		want     string
		warnings []string // each must be in the warning; none: no warning
	}{
		{name: "neither set", want: ""},
		{name: "the new name", env: map[string]string{"FORMS_CLI_SERVER": "http://new:1"}, want: "http://new:1"},
		{name: "the old name alone", env: map[string]string{"HYMICAL_SERVER": "http://old:1"}, want: "http://old:1",
			warnings: []string{"HYMICAL_SERVER is deprecated", "set FORMS_CLI_SERVER instead"}},
		{name: "both", env: map[string]string{"FORMS_CLI_SERVER": "http://new:1", "HYMICAL_SERVER": "http://old:1"}, want: "http://new:1",
			warnings: []string{"HYMICAL_SERVER is ignored because FORMS_CLI_SERVER is set"}},
		{name: "the new name empty", env: map[string]string{"FORMS_CLI_SERVER": "", "HYMICAL_SERVER": "http://old:1"}, want: "http://old:1",
			warnings: []string{"set FORMS_CLI_SERVER instead"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var warn bytes.Buffer
			got := lookupRenamed(func(k string) string { return tc.env[k] }, envServer, envServerOld, &warn)
			if got != tc.want {
				t.Errorf("read %q, want %q", got, tc.want)
			}
			if len(tc.warnings) == 0 && warn.Len() > 0 {
				t.Errorf("warned %q, want no warning", warn.String())
			}
			for _, w := range tc.warnings {
				if !strings.Contains(warn.String(), w) {
					t.Errorf("warned %q, want it to say %q", warn.String(), w)
				}
			}
		})
	}
}

// TestCLIServerFromEnv runs a command against a server named in each way a
// user can name it: the warning for the old variable goes to stderr, once,
// and only when that variable is what the command used.
func TestCLIServerFromEnv(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"endpoints":[],"next_cursor":null}`))
	}))
	defer srv.Close()
	const nowhere = "http://127.0.0.1:9" // the discard port: a request there fails
	for _, tc := range []struct {
		name           string
		newVar, oldVar string
		args           []string
		warn           string // in stderr; "" for nothing on stderr
	}{
		{name: "FORMS_CLI_SERVER", newVar: srv.URL},
		{name: "HYMICAL_SERVER, deprecated", oldVar: srv.URL, warn: "HYMICAL_SERVER is deprecated and will stop working in the next release; set FORMS_CLI_SERVER instead"},
		{name: "both", newVar: srv.URL, oldVar: nowhere, warn: "HYMICAL_SERVER is ignored because FORMS_CLI_SERVER is set"},
		{name: "--server over both", newVar: nowhere, oldVar: nowhere, args: []string{"--server", srv.URL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FORMS_CLI_SERVER", tc.newVar)
			t.Setenv("HYMICAL_SERVER", tc.oldVar)
			t.Setenv("FORMS_SERVER_ADMIN_TOKEN", "test-admin-token-0123456789")
			asked.Store(0)
			var stdout, stderr bytes.Buffer
			if err := run(t.Context(), append([]string{"endpoints", "list"}, tc.args...), &stdout, &stderr); err != nil {
				t.Fatalf("endpoints list: %v\nstderr: %s", err, stderr.String())
			}
			if n := asked.Load(); n != 1 {
				t.Fatalf("the server was asked %d times, want once", n)
			}
			switch {
			case tc.warn == "" && stderr.Len() > 0:
				t.Errorf("stderr %q, want nothing", stderr.String())
			case tc.warn != "" && strings.Count(stderr.String(), tc.warn) != 1:
				t.Errorf("stderr %q, want it to say once %q", stderr.String(), tc.warn)
			}
		})
	}
}

// TestCLIEnvIsNotRefusedByServe: serve refuses a FORMS_ variable that is
// none of its settings, so the CLI's own are taken out of what it reads;
// a shell that sets FORMS_CLI_SERVER can still start the server.
func TestCLIEnvIsNotRefusedByServe(t *testing.T) {
	t.Parallel()
	environ := []string{"FORMS_CLI_SERVER=http://127.0.0.1:8080", "FORMS_SERVER_LISTEN=127.0.0.1:0", "PATH=/bin"}
	load := func(environ []string) error {
		_, _, err := config.Load(config.LoadOptions{Environ: environ, Program: "hymical serve", Output: io.Discard, GenerateAdminToken: randomToken})
		return err
	}
	if err := load(environ); !errors.Is(err, config.ErrUnknownKey) {
		t.Fatalf("config.Load with FORMS_CLI_SERVER: %v, want ErrUnknownKey (if serve now knows the CLI's variables, serverEnviron can go)", err)
	}
	if err := load(serverEnviron(environ)); err != nil {
		t.Fatalf("config.Load of serverEnviron: %v", err)
	}
	if got := serverEnviron(environ); !slices.Equal(got, environ[1:]) {
		t.Errorf("serverEnviron kept %q, want %q", got, environ[1:])
	}
}
