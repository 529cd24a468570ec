package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hymical/hymical/harness/pluginbin"
)

const mod = "github.com/hymical/hymical/"

func TestGoTestArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "test -race -json -timeout 20m ./... ./sdk/..."},
		{[]string{"-run", "Conformance", "./storage/..."}, "test -race -json -timeout 20m -run Conformance ./storage/..."},
		{[]string{"-count=1"}, "test -race -json -timeout 20m -count=1 ./... ./sdk/..."},
		{[]string{"-short", "./server/..."}, "test -race -json -timeout 20m -short ./server/..."},
		{[]string{"-timeout", "5m", "./server/..."}, "test -race -json -timeout 5m ./server/..."},
		{[]string{"-timeout=30m"}, "test -race -json -timeout=30m ./... ./sdk/..."},
	} {
		if got := strings.Join(goTestArgs(c.args), " "); got != c.want {
			t.Errorf("goTestArgs(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

// TestSummary feeds a go test -json stream like the suite's and checks the
// summary names the resource that was used, the one whose tests skipped and
// why, and prints a failing test's output.
func TestSummary(t *testing.T) {
	const pg = "storage/postgres"
	events := []event{
		{Action: "run", Package: pg, Test: "TestConformance"},
		{Action: "output", Package: pg, Test: "TestConformance", Output: "=== RUN   TestConformance\n"},
		{Action: "output", Package: pg, Test: "TestConformance", Output: "    pgtest.go:33: HYMICAL_TEST_POSTGRES_DSN is not set: run it\n"},
		{Action: "skip", Package: pg, Test: "TestConformance"},
		{Action: "pass", Package: pg, Elapsed: 0.5},
		{Action: "output", Package: "plugins/nats", Test: "TestOutage", Output: "    brokertest.go:30: hymical-test-uses: nats-server\n"},
		{Action: "output", Package: "plugins/nats", Test: "TestOutage/sub", Output: "    x.go:1: hymical-test-uses: nats-server\n"},
		{Action: "pass", Package: "plugins/nats", Test: "TestOutage/sub"},
		{Action: "pass", Package: "plugins/nats", Test: "TestOutage"},
		{Action: "output", Package: "plugins/nats", Test: "TestBroken", Output: "    broken_test.go:9: lost a delivery\n"},
		{Action: "fail", Package: "plugins/nats", Test: "TestBroken"},
		{Action: "fail", Package: "plugins/nats", Elapsed: 1},
		// Off unless HYMICAL_TEST_RELEASE=1: shown as skipped, by its reason.
		{Action: "output", Package: "hymical", Test: "TestReleaseArchive", Output: "    release_test.go:35: HYMICAL_TEST_RELEASE is not set to 1: release builds take minutes\n"},
		{Action: "skip", Package: "hymical", Test: "TestReleaseArchive"},
		{Action: "pass", Package: "hymical", Elapsed: 2},
		{Action: "output", Package: "sdk/webhook", Output: "ok  \tsdk/webhook\t(cached)\n"},
		{Action: "pass", Package: "sdk/webhook"},
	}
	var out bytes.Buffer
	r := newRun(&out)
	for _, e := range events {
		// Through JSON, as the stream arrives.
		b, _ := json.Marshal(e)
		var back event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		r.event(back)
	}
	r.summary(0)
	got := out.String()
	for _, want := range []string{
		"ok  \tstorage/postgres\t0.500s",
		"FAIL\tplugins/nats\t1.000s",
		"ok  \tsdk/webhook\t(cached)",
		"broken_test.go:9: lost a delivery",
		"1 top-level tests passed, 1 failed, 2 skipped",
		"postgres      SKIPPED: 1 tests did not run",
		"nats-server   used by 1 tests",
		"HYMICAL_TEST_POSTGRES_DSN is not set: run it\n         in storage/postgres",
		"HYMICAL_TEST_RELEASE is not set to 1: release builds take minutes\n         in hymical",
		"   plugins/nats TestBroken",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the summary lacks %q:\n%s", want, got)
		}
	}
	if !slices.Equal(r.pkgFails, []string{"plugins/nats"}) {
		t.Errorf("failed packages %q", r.pkgFails)
	}
}

// The plugins are built into the directory under pluginbin's names, which
// keep the whole import path; two that go build would give one name are
// refused rather than one taking the other's place.
func TestBuildPlugins(t *testing.T) {
	t.Parallel()
	const a, b = mod + "harness/testrun/testdata/a/hello", mod + "harness/testrun/testdata/b/hello"
	dir := t.TempDir()
	if err := buildPlugins(t.Context(), dir, []string{a}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(dir, pluginbin.FileName(a))).Output()
	if err != nil || string(out) != "hello from a\n" {
		t.Errorf("the built binary said %q, %v", out, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the directory holds %d entries, want the one binary (no staging left)", len(entries))
	}
	if err := buildPlugins(t.Context(), t.TempDir(), []string{a, b}); err == nil || !strings.Contains(err.Error(), "would both be built as hello") {
		t.Errorf("two plugins named hello: %v", err)
	}
}

// The shipped plugins are main packages under plugins/, which is where
// the test command looks.
func TestMainPackagesFindsThePlugins(t *testing.T) {
	t.Parallel()
	pkgs, err := mainPackages(t.Context(), "../../"+strings.TrimPrefix(pluginPattern, "./"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pkgs, mod+"plugins/http") || slices.ContainsFunc(pkgs, func(p string) bool { return strings.Contains(p, "/internal/") }) {
		t.Errorf("main packages under plugins/: %q, want plugins/http and nothing under internal/", pkgs)
	}
}
