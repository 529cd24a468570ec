// Command testrun is the README's test command: it runs
//
//	go test -race -json ./... ./sdk/...
//
// prints one line per package as go test does (with the whole output of
// anything that failed), and ends with what ran and what did not: the tests
// that used each real server or tool (PostgreSQL, nats-server, redis-server,
// rabbitmq-server, mosquitto, Chromium, OpenSSL, Node) and the tests skipped, grouped by the reason they
// gave. Plain `go test` prints "ok" for a package whose every test skipped
// for want of a database; this says so instead.
//
// Arguments are passed to go test: flags are added to -race, and package
// patterns replace ./... ./sdk/... . The exit status is go test's.
//
// Before go test starts it builds every plugin under plugins/ once, into a
// temporary directory it names to the tests in HYMICAL_TEST_PLUGIN_DIR
// (see harness/pluginbin): the packages whose tests run a real plugin copy
// it from there instead of each building it again. The tests that build
// release archives and fresh checkouts run only with HYMICAL_TEST_RELEASE=1,
// which .ci/run sets; without it the summary lists them as skipped, under
// that reason.
//
// A test says it used a resource by logging a line "hymical-test-uses: NAME"
// (pgtest, brokertest and the browser and interoperability tests do);
// go test -json runs tests verbosely, so those lines reach this command
// even for tests that pass.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hymical/hymical/harness/pluginbin"
)

// usesMarker starts the log line a test writes when it uses a resource.
const usesMarker = "hymical-test-uses: "

// resource is a real server or tool the suite may need, with the text a
// test's skip reason holds when it was missing.
type resource struct{ name, skipHint string }

// resources lists them in the order the summary does.
func resources() []resource {
	return []resource{
		{"postgres", "HYMICAL_TEST_POSTGRES_DSN"},
		{"nats-server", "nats-server"},
		{"redis-server", "redis-server"},
		{"rabbitmq-server", "rabbitmq-server"},
		{"mosquitto", "mosquitto"},
		{"chromium", "chromium"},
		{"openssl", "openssl"},
		{"node", "node"},
		{"python3-grpcio", "python3-grpcio"},
	}
}

// event is one line of go test -json (see go doc test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Output     string
	Elapsed    float64
}

type testKey struct{ pkg, test string }

// run collects what one go test -json stream says.
type run struct {
	out      io.Writer
	output   map[testKey][]string // until the test ends; kept for failures
	build    map[string][]string  // build output per import path
	uses     map[string]map[testKey]bool
	skipped  map[string][]testKey // by the first line of the skip reason
	passed   int
	failed   []testKey
	pkgFails []string
}

func newRun(out io.Writer) *run {
	return &run{
		out:     out,
		output:  map[testKey][]string{},
		build:   map[string][]string{},
		uses:    map[string]map[testKey]bool{},
		skipped: map[string][]testKey{},
	}
}

func (r *run) event(e event) {
	switch e.Action {
	case "build-output":
		r.build[e.ImportPath] = append(r.build[e.ImportPath], e.Output)
		return
	case "build-fail":
		fmt.Fprint(r.out, strings.Join(r.build[e.ImportPath], ""))
		return
	}
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "output":
		r.output[k] = append(r.output[k], e.Output)
		if name, ok := usesLine(e.Output); ok && e.Test != "" {
			if r.uses[name] == nil {
				r.uses[name] = map[testKey]bool{}
			}
			r.uses[name][topLevel(k)] = true
		}
	case "pass", "fail", "skip":
		if e.Test == "" {
			r.packageDone(e)
			return
		}
		if !strings.Contains(e.Test, "/") {
			switch e.Action {
			case "pass":
				r.passed++
			case "fail":
				r.failed = append(r.failed, k)
			case "skip":
				reason := skipReason(r.output[k])
				r.skipped[reason] = append(r.skipped[reason], k)
			}
		}
		if e.Action == "fail" {
			fmt.Fprint(r.out, strings.Join(r.output[k], ""))
		}
		delete(r.output, k)
	}
}

// packageDone prints the package's line, and all it printed outside any
// test when it failed (a panic, a failing TestMain, a timeout).
func (r *run) packageDone(e event) {
	k := testKey{e.Package, ""}
	switch e.Action {
	case "fail":
		fmt.Fprint(r.out, strings.Join(r.output[k], ""))
		r.pkgFails = append(r.pkgFails, e.Package)
		fmt.Fprintf(r.out, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
	case "skip":
		fmt.Fprintf(r.out, "?   \t%s\t[no test files]\n", e.Package)
	default:
		took := fmt.Sprintf("%.3fs", e.Elapsed)
		// go test's own line says when the result came from its cache.
		for _, l := range r.output[k] {
			if strings.HasPrefix(l, "ok") && strings.Contains(l, "(cached)") {
				took = "(cached)"
			}
		}
		fmt.Fprintf(r.out, "ok  \t%s\t%s\n", e.Package, took)
	}
	delete(r.output, k)
}

func usesLine(line string) (string, bool) {
	i := strings.Index(line, usesMarker)
	if i < 0 {
		return "", false
	}
	return strings.TrimSpace(line[i+len(usesMarker):]), true
}

func topLevel(k testKey) testKey {
	top, _, _ := strings.Cut(k.test, "/")
	return testKey{k.pkg, top}
}

// skipReason is the first line a skipped test logged with t.Skip, which
// go test prints as "    file.go:NN: reason".
func skipReason(lines []string) string {
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") || t == "" {
			continue
		}
		if _, rest, ok := strings.Cut(t, ".go:"); ok {
			if _, msg, ok := strings.Cut(rest, ": "); ok {
				return msg
			}
		}
		return t
	}
	return "(no reason given)"
}

// summary prints what ran and what did not.
func (r *run) summary(took time.Duration) {
	w := r.out
	skippedTotal := 0
	for _, ks := range r.skipped {
		skippedTotal += len(ks)
	}
	fmt.Fprintf(w, "\n== what ran: %d top-level tests passed, %d failed, %d skipped, in %s\n",
		r.passed, len(r.failed), skippedTotal, took.Round(time.Second))
	fmt.Fprintln(w, "== real servers and tools:")
	for _, res := range resources() {
		used := len(r.uses[res.name])
		missing := 0
		for reason, ks := range r.skipped {
			if strings.Contains(reason, res.skipHint) {
				missing += len(ks)
			}
		}
		switch {
		case missing > 0 && used > 0:
			fmt.Fprintf(w, "   %-13s used by %d tests; %d more SKIPPED without it\n", res.name, used, missing)
		case missing > 0:
			fmt.Fprintf(w, "   %-13s SKIPPED: %d tests did not run (reason below)\n", res.name, missing)
		case used > 0:
			fmt.Fprintf(w, "   %-13s used by %d tests\n", res.name, used)
		default:
			fmt.Fprintf(w, "   %-13s not used by the tests that ran\n", res.name)
		}
	}
	if skippedTotal > 0 {
		fmt.Fprintln(w, "== skipped, by reason:")
		for _, reason := range slices.Sorted(maps.Keys(r.skipped)) {
			ks := r.skipped[reason]
			pkgs := map[string]bool{}
			for _, k := range ks {
				pkgs[k.pkg] = true
			}
			fmt.Fprintf(w, "   %4d  %s\n         in %s\n", len(ks), reason, strings.Join(slices.Sorted(maps.Keys(pkgs)), ", "))
		}
	}
	if len(r.failed) > 0 || len(r.pkgFails) > 0 {
		fmt.Fprintln(w, "== FAILED:")
		for _, k := range r.failed {
			fmt.Fprintf(w, "   %s %s\n", k.pkg, k.test)
		}
		for _, p := range r.pkgFails {
			fmt.Fprintf(w, "   %s\n", p)
		}
	}
}

// packageTimeout is how long one package's tests may run unless the
// arguments give -timeout.
const packageTimeout = "20m"

// goTestArgs builds go test's arguments from this command's.
func goTestArgs(args []string) []string {
	flags, pkgs := []string{}, []string{}
	for _, a := range args {
		if strings.HasPrefix(a, "-") || len(flags) > 0 && needsValue(flags[len(flags)-1]) {
			flags = append(flags, a)
		} else {
			pkgs = append(pkgs, a)
		}
	}
	if len(pkgs) == 0 {
		pkgs = []string{"./...", "./sdk/..."}
	}
	if !slices.ContainsFunc(flags, func(f string) bool { return f == "-timeout" || strings.HasPrefix(f, "-timeout=") }) {
		// go test's own default, 10 minutes a package, is for a quiet
		// machine: on two cores running every package at once, the root
		// package (release archives, fresh checkouts, real servers) has
		// run past it without a test hanging. A hung test still ends the
		// run, later.
		flags = append([]string{"-timeout", packageTimeout}, flags...)
	}
	return append(append([]string{"test", "-race", "-json"}, flags...), pkgs...)
}

// needsValue reports whether a go test flag given without "=" takes the
// next argument as its value.
func needsValue(flag string) bool {
	if strings.Contains(flag, "=") {
		return false
	}
	switch strings.TrimLeft(flag, "-") {
	case "run", "skip", "count", "timeout", "p", "parallel", "tags", "bench", "benchtime", "cpu", "coverprofile", "fuzz", "fuzztime", "shuffle", "exec", "o", "vet":
		return true
	}
	return false
}

// pluginPattern is where the plugins the tests share are.
const pluginPattern = "./plugins/..."

// mainPackages lists the import paths of the main packages pattern matches.
func mainPackages(ctx context.Context, pattern string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, pattern).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("go list %s: %w\n%s", pattern, err, exit.Stderr)
		}
		return nil, fmt.Errorf("go list %s: %w", pattern, err)
	}
	return strings.Fields(string(out)), nil
}

// buildPlugins builds the main packages pkgs into dir, each under the
// name pluginbin gives it, with one go build so that the toolchain spreads
// the work over the cores.
func buildPlugins(ctx context.Context, dir string, pkgs []string) error {
	// go build -o DIR/ names each binary for its import path's last
	// element: build into a directory of their own, then rename.
	stage, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	byName := map[string]string{}
	for _, p := range pkgs {
		if other, ok := byName[path.Base(p)]; ok {
			return fmt.Errorf("%s and %s would both be built as %s", other, p, path.Base(p))
		}
		byName[path.Base(p)] = p
	}
	if out, err := exec.CommandContext(ctx, "go", append([]string{"build", "-o", stage + string(filepath.Separator)}, pkgs...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	for name, p := range byName {
		if err := os.Rename(filepath.Join(stage, name), filepath.Join(dir, pluginbin.FileName(p))); err != nil {
			return err
		}
	}
	return nil
}

// sharePlugins builds the plugins into a new temporary directory and
// returns the environment variable that names it to the tests, and the
// function that removes it. When that fails, it says so and the tests
// build their own, as under plain go test.
func sharePlugins(ctx context.Context, w io.Writer) (env string, cleanup func()) {
	start := time.Now()
	dir, err := os.MkdirTemp("", "hymical-test-plugins-")
	if err != nil {
		fmt.Fprintf(w, "== plugins: not built once for the run (%v); each package's tests build their own\n", err)
		return "", func() {}
	}
	cleanup = func() { os.RemoveAll(dir) }
	pkgs, err := mainPackages(ctx, pluginPattern)
	if err == nil {
		err = buildPlugins(ctx, dir, pkgs)
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(w, "== plugins: stopped while they were built")
		return "", cleanup
	case err != nil:
		fmt.Fprintf(w, "== plugins: not built once for the run; each package's tests build their own:\n%v\n", err)
		return "", cleanup
	}
	names := make([]string, len(pkgs))
	for i, p := range pkgs {
		names[i] = path.Base(p)
	}
	fmt.Fprintf(w, "== plugins built once for the run, in %s: %s\n", time.Since(start).Round(100*time.Millisecond), strings.Join(names, ", "))
	return pluginbin.DirEnv + "=" + dir, cleanup
}

func main() {
	start := time.Now()
	// Stopped, this command stops what it runs (go test gets the signal,
	// and prints what it has) and still prints the summary and removes
	// the plugins' directory.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	pluginEnv, removePlugins := sharePlugins(ctx, os.Stdout)
	code := runTests(ctx, start, pluginEnv)
	removePlugins()
	stop()
	os.Exit(code)
}

// runTests runs go test with the arguments given, prints what it says,
// and returns the exit status.
func runTests(ctx context.Context, start time.Time, pluginEnv string) int {
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "testrun: stopped before the tests started")
		return 2
	}
	cmd := exec.CommandContext(ctx, "go", goTestArgs(os.Args[1:])...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.Stderr = os.Stderr
	if pluginEnv != "" {
		cmd.Env = append(os.Environ(), pluginEnv)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testrun: starting go test:", err)
		return 2
	}
	r := newRun(os.Stdout)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not JSON: go test itself printed it (a build error in an
			// older toolchain, a flag error). Pass it on.
			fmt.Println(sc.Text())
			continue
		}
		r.event(e)
	}
	err = cmd.Wait()
	r.summary(time.Since(start))
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintln(os.Stderr, "testrun:", err)
		return 2
	}
	return 0
}
