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
// A test says it used a resource by logging a line "hymical-test-uses: NAME"
// (pgtest, brokertest and the browser and interoperability tests do);
// go test -json runs tests verbosely, so those lines reach this command
// even for tests that pass.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
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

func main() {
	start := time.Now()
	cmd := exec.Command("go", goTestArgs(os.Args[1:])...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testrun: starting go test:", err)
		os.Exit(2)
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
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "testrun:", err)
		os.Exit(2)
	}
}
