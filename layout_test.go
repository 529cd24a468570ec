package main

import (
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// importRule is one room of the tree and what it may not reach, with the
// reason, which a failure prints beside the offending import so that
// whoever breaks the rule reads why it is there. A forbidden entry is a
// path inside this module, or a full import path when it contains a dot,
// and forbids that package and every package below it; one ending in "="
// forbids only that package (so "server=" is the assembly, not its
// subpackages). stdOnly forbids everything outside the standard library
// but the pattern's own packages. Only the packages themselves are
// checked, not their tests.
type importRule struct {
	pattern   string
	forbidden []string
	stdOnly   bool
	why       string
}

// importRules are the layout's rules in one place (DESIGN.md, Layout).
func importRules() []importRule {
	// The assembly's rooms, under server/: none imports the assembly
	// (server=) or the harnesses, and none reaches sideways into a room
	// that is not its business.
	room := func(sideways ...string) []string { return append([]string{"server=", "harness"}, sideways...) }
	const roomWhy = "; no room under server/ imports the assembly (package server) or a harness"
	return []importRule{
		{pattern: ".", forbidden: []string{"harness", "examples", "internal/testwait"},
			why: "the hymical binary is the product: it links no harness (benchmarks and test drivers are commands of their own under harness/) and no test helper (internal/testwait fails tests)"},
		{pattern: "./server/...", forbidden: []string{"plugins"},
			why: "the server runs every transport as a process of its own through the plugin host, never in-process: a transport that crashes or hangs must not take the server with it. The hymical command carries the shipped transports only for `hymical plugin NAME` (plugin.go), which the host starts as a child"},
		{pattern: "./sdk/...", forbidden: []string{"server", "storage", "plugins", "harness", "internal"},
			why: "plugin authors and receivers import sdk/, so it must not drag the server in"},
		{pattern: "./sdk/webhook/...", forbidden: []string{"sdk/transport", "modernc.org/sqlite", "github.com/jackc/pgx", "github.com/lib/pq", "github.com/mattn/go-sqlite3"},
			why: "receivers import sdk/webhook into their own services: its SQL deduper speaks database/sql and the receiver picks the driver, and it carries no plugin SDK"},
		{pattern: "./plugins/...", forbidden: []string{"server", "storage", "harness", "internal"},
			why: "a plugin sends an already-signed message and reports the outcome: it never sees the store or delivery state, only the SDK"},
		{pattern: "./examples/...", forbidden: []string{"server", "storage", "harness", "internal"},
			why: "the examples show what a third party can build with the SDK alone"},
		{pattern: "./storage/...", forbidden: []string{"server", "sdk/transport", "sdk/webhook", "plugins", "harness"},
			why: "storage is the state machine below the server and knows no transport; it shares one primitive with the SDK (sdk/boundtext), not its contracts"},
		{pattern: "./internal/...", forbidden: []string{"server", "storage", "harness", "plugins", "sdk"},
			why: "internal/ holds small primitives that any layer may use, so it imports none of the layers"},
		{pattern: "./server/api/...", forbidden: room("server/worker", "server/database", "server/pluginhost", "server/console", "server/fleet", "plugins", "modernc.org/sqlite", "github.com/jackc/pgx"),
			why: "the API sees the store through its interface: it links no database driver nor the package that opens one, never claims, sends or reaches a plugin (it checks retry schedules with server/retrypolicy, not the worker)" + roomWhy},
		{pattern: "./server/api/apiwire", stdOnly: true,
			why: "the API's JSON types are imported by clients (the CLI, tests, other programs), which must get no driver, no worker, nothing of the server"},
		{pattern: "./server/console/...", forbidden: room("server/worker", "server/database", "server/pluginhost", "server/api", "server/fleet", "plugins", "modernc.org/sqlite", "github.com/jackc/pgx"),
			why: "the console sees the store through its interface and shares endpoint changes through server/endpoint: it links no driver, never claims, sends or reaches a plugin, and is not the API" + roomWhy},
		{pattern: "./server/access", forbidden: room("server/api", "server/console", "server/worker", "server/database", "server/pluginhost", "server/fleet", "plugins", "modernc.org/sqlite", "github.com/jackc/pgx"),
			why: "the scope rules and credential checks sit below the API and the portal that enforce them: the store's interface and the standard library, no face, no driver" + roomWhy},
		{pattern: "./server/config/...", forbidden: room("server/api", "server/console", "server/database", "server/fleet", "server/endpoint"),
			why: "config reads and checks settings; the faces, the database and the jobs read it, not the other way round" + roomWhy},
		{pattern: "./server/database/...", forbidden: room("server/api", "server/console", "server/worker", "server/pluginhost", "server/fleet", "server/endpoint"),
			why: "database opens the store a URL names and checks its schema, for whoever needs one; it serves no request and delivers nothing" + roomWhy},
		{pattern: "./server/endpoint/...", forbidden: room("server/api", "server/console", "server/worker", "server/pluginhost", "server/database", "server/fleet"),
			why: "the endpoint operations that the API, the console and endpoint health share sit below all three and take the store they are given" + roomWhy},
		{pattern: "./server/event/...", forbidden: room("server/api", "server/console", "server/worker", "server/pluginhost", "server/database", "server/fleet", "server/endpoint"),
			why: "the events the server makes are built from what the store holds, below every part that creates them" + roomWhy},
		{pattern: "./server/faceopts", stdOnly: true,
			why: "config imports the HTTP faces' defaults and bounds from here, so this leaf must link neither face nor anything else"},
		{pattern: "./server/backup/...", forbidden: room("server/api", "server/console", "server/worker", "server/pluginhost", "server/fleet", "server/endpoint"),
			why: "backup copies a SQLite store while servers run on it: it serves no request, delivers nothing, and refuses PostgreSQL, whose own tools back it up" + roomWhy},
		{pattern: "./server/plugincheck/...", forbidden: room("server/api", "server/console", "server/worker", "server/database", "server/fleet", "storage", "plugins"),
			why: "plugincheck holds a plugin author's plugin to the host's rules through the plugin host alone: no store, no face, no delivery loop, no shipped transport" + roomWhy},
		{pattern: "./server/secrets/...", forbidden: room("server/api", "server/console", "server/worker", "server/pluginhost"),
			why: "rotating the key of secrets at rest is an operator's job on the store, run with the fleet stopped: it serves no request and delivers nothing" + roomWhy},
		{pattern: "./server/fleet/...", forbidden: room("server/api", "server/console", "server/worker", "server/pluginhost", "server/database"),
			why: "the jobs beside the loop (registry, health, retention) work on the store alone: no face, no delivery loop, no plugin" + roomWhy},
		{pattern: "./server/pluginhost/...", forbidden: room("storage", "server/worker", "server/api", "server/console"),
			why: "the plugin host moves messages to plugins and back and never sees the store or delivery state" + roomWhy},
		{pattern: "./server/connlimit", forbidden: room("storage", "server/api", "server/console", "server/worker", "server/database", "server/pluginhost", "server/fleet", "server/telemetry", "server/config"),
			why: "the connection limit counts TCP connections by client address and knows no request, store or plugin; it reports through callbacks, so metrics and config stay the assembly's" + roomWhy},
		{pattern: "./server/retrypolicy", stdOnly: true,
			why: "the API and the worker both import the retry bounds, which must bring neither of them along"},
		{pattern: "./server/telemetry/...", forbidden: room("server/api", "server/console", "server/worker", "server/database"),
			why: "every part reports through telemetry, so it depends on none of them" + roomWhy},
		{pattern: "./server/worker/...", forbidden: room("server/api", "server/console", "server/database", "server/fleet", "server/endpoint"),
			why: "the worker claims, signs, sends and records through the store and the plugin host; it serves no request and is handed an open store" + roomWhy},
		{pattern: "./server", forbidden: []string{"harness"},
			why: "the assembly is the product that serve and demo run: it links no harness"},
	}
}

// listedPackage is one line of go list -deps for a rule's pattern.
type listedPackage struct {
	path     string
	standard bool // in the standard library
	depOnly  bool // a dependency, not a package of the pattern itself
}

// listFormat has go list print what parseListed reads.
const listFormat = "{{.ImportPath}} {{.Standard}} {{.DepOnly}}"

func parseListed(out string) ([]listedPackage, error) {
	var pkgs []listedPackage
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("go list printed %q, not %q", line, listFormat)
		}
		pkgs = append(pkgs, listedPackage{path: f[0], standard: f[1] == "true", depOnly: f[2] == "true"})
	}
	return pkgs, nil
}

// violations are the packages of deps that r forbids, each said with r's
// reason.
func (r importRule) violations(deps []listedPackage) []string {
	const mod = "github.com/hymical/hymical/"
	var out []string
	for _, dep := range deps {
		if r.stdOnly && dep.depOnly && !dep.standard {
			out = append(out, fmt.Sprintf("%s depends on %s, outside the standard library, which it must not: %s", r.pattern, dep.path, r.why))
			continue
		}
		for _, f := range r.forbidden {
			exact := strings.HasSuffix(f, "=")
			f = strings.TrimSuffix(f, "=")
			if !strings.Contains(f, ".") {
				f = mod + f
			}
			if dep.path == f || !exact && strings.HasPrefix(dep.path, f+"/") {
				out = append(out, fmt.Sprintf("%s depends on %s, which it must not: %s", r.pattern, dep.path, r.why))
			}
		}
	}
	return out
}

// TestImportBoundaries holds every room of the tree to its rule, on what
// go list says the packages import now.
func TestImportBoundaries(t *testing.T) {
	t.Parallel()
	for _, r := range importRules() {
		t.Run(r.pattern, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command("go", "list", "-deps", "-f", listFormat, r.pattern).Output()
			if err != nil {
				var stderr []byte
				if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
					stderr = ee.Stderr
				}
				t.Fatalf("go list %s: %v\n%s", r.pattern, err, stderr)
			}
			deps, err := parseListed(string(out))
			if err != nil {
				t.Fatal(err)
			}
			own := 0
			for _, d := range deps {
				if !d.depOnly {
					own++
				}
			}
			if own == 0 {
				// A rule whose pattern names nothing holds nothing.
				t.Fatalf("%s matches no package: the rule guards nothing; point it at where the room is now", r.pattern)
			}
			for _, v := range r.violations(deps) {
				t.Error(v)
			}
		})
	}
}

// TestImportRulesCatchTheirBreaks feeds the rules the go list output of a
// tree that breaks them, so a rule that could never fire cannot pass
// unnoticed: the hymical command linking the bench again or a test
// helper, the API linking the worker, the API's wire types or the retry
// bounds importing anything outside the standard library.
func TestImportRulesCatchTheirBreaks(t *testing.T) {
	t.Parallel()
	const mod = "github.com/hymical/hymical/"
	rules := map[string]importRule{}
	for _, r := range importRules() {
		if r.why == "" {
			t.Errorf("the rule for %s gives no reason", r.pattern)
		}
		if len(r.forbidden) == 0 && !r.stdOnly {
			t.Errorf("the rule for %s forbids nothing", r.pattern)
		}
		rules[r.pattern] = r
	}
	tests := []struct {
		pattern string
		listed  string // go list -deps -f listFormat
		want    string // in the one violation; "" for none
	}{
		{".", mod + "harness/bench false true\n" + mod + " false false", "depends on " + mod + "harness/bench, which it must not: the hymical binary is the product"},
		{"./server/...", mod + "plugins/http/httptransport false true\n" + mod + "server/worker false false", "never in-process"},
		{".", mod + "internal/testwait false true\n" + mod + " false false", "no test helper"},
		{".", "fmt true true\n" + mod + "server false true\n" + mod + " false false", ""},
		{"./server/api/...", mod + "server/worker false true\n" + mod + "server/api false false", "server/api/... depends on " + mod + "server/worker"},
		{"./server/api/...", mod + "server/retrypolicy false true\n" + mod + "server/api false false", ""},
		{"./server/api/...", mod + "server false true\n" + mod + "server/api false false", "imports the assembly"},
		{"./server/api/...", mod + "server/endpoint false true\n" + mod + "server/api false false", ""},
		{"./server/api/apiwire", "github.com/jackc/pgx/v5 false true\n" + mod + "server/api/apiwire false false", "outside the standard library"},
		{"./server/api/apiwire", "encoding/json true true\n" + mod + "server/api/apiwire false false", ""},
		{"./server/retrypolicy", mod + "internal/wakeup false true\n" + mod + "server/retrypolicy false false", "must bring neither of them along"},
		{"./server/retrypolicy", "time true true\n" + mod + "server/retrypolicy false false", ""},
		{"./server/faceopts", mod + "server/api false true\n" + mod + "server/faceopts false false", "must link neither face"},
		{"./server/access", "github.com/jackc/pgx/v5 false true\n" + mod + "server/access false false", "no face, no driver"},
		{"./server/access", mod + "storage false true\n" + mod + "server/access false false", ""},
	}
	for _, tt := range tests {
		r, ok := rules[tt.pattern]
		if !ok {
			t.Fatalf("no rule for %s", tt.pattern)
		}
		deps, err := parseListed(tt.listed)
		if err != nil {
			t.Fatal(err)
		}
		got := r.violations(deps)
		switch {
		case tt.want == "" && len(got) > 0:
			t.Errorf("%s with %q: %q, want no violation", tt.pattern, tt.listed, got)
		case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
			t.Errorf("%s with %q: %q, want one violation saying %q", tt.pattern, tt.listed, got, tt.want)
		}
	}
	if _, err := parseListed("one two"); err == nil {
		t.Error("parseListed took a line without the three fields")
	}
}

// transportImportViolations are the imports, of the hymical command's files
// (file name to import paths), that link a transport anywhere but through
// plugins/shipped in plugin.go: the command carries the shipped transports
// for `hymical plugin NAME` alone, which the plugin host runs as a child
// process, so that no other command path can start calling a transport
// in-process.
func transportImportViolations(imports map[string][]string) []string {
	const plugins, door = "github.com/hymical/hymical/plugins", "github.com/hymical/hymical/plugins/shipped"
	var out []string
	for file, paths := range imports {
		for _, p := range paths {
			if p != plugins && !strings.HasPrefix(p, plugins+"/") {
				continue
			}
			if p != door || file != "plugin.go" {
				out = append(out, fmt.Sprintf("%s imports %s: only plugin.go may reach the transports, and only through %s, for hymical plugin NAME; the server runs them as child processes", file, p, door))
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestTransportsLinkedOnlyForThePluginCommand(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string][]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			imports[f] = append(imports[f], path)
		}
	}
	if !slices.Contains(imports["plugin.go"], "github.com/hymical/hymical/plugins/shipped") {
		t.Errorf("plugin.go does not import plugins/shipped: the rule guards nothing; point it at where hymical plugin NAME is now")
	}
	for _, v := range transportImportViolations(imports) {
		t.Error(v)
	}
	breaks := []map[string][]string{
		{"serve.go": {"github.com/hymical/hymical/plugins/shipped"}},
		{"plugin.go": {"github.com/hymical/hymical/plugins/http/httptransport"}},
		{"demo.go": {"github.com/hymical/hymical/plugins"}},
	}
	for _, b := range breaks {
		if v := transportImportViolations(b); len(v) != 1 {
			t.Errorf("%v: %q, want one violation", b, v)
		}
	}
}

// storageGroupFiles are the files, one per group of the storage contract,
// that storage/postgres, storage/sqlite and storage/storagetest each have:
// a rule's two SQL implementations and its conformance tests sit in files
// of the same name. Beside them each store has driver-only files (store.go
// opens and closes it, migrate.go, doc.go) and the suite harness-only ones.
var storageGroupFiles = map[string][]string{
	"storage/postgres": {"store.go", "doc.go"},
	"storage/sqlite":   {"store.go", "doc.go"},
	// away.go: its rule (a database that is away is ErrUnavailable) holds
	// for every group at once and has no SQL of its own in either store.
	"storage/storagetest": {"harness.go", "run.go", "model.go", "bench.go", "away.go"},
}

// TestStorageFilesGroupedByNoun holds the three storage packages to the
// same set of group files, so that a new rule lands in a predictable place
// in each and a file added to one store is missed in no other.
func TestStorageFilesGroupedByNoun(t *testing.T) {
	t.Parallel()
	sets := map[string][]string{}
	for dir, own := range storageGroupFiles {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || slices.Contains(own, name) {
				continue
			}
			sets[dir] = append(sets[dir], name)
		}
	}
	want := sets["storage/storagetest"]
	if len(want) < 10 {
		t.Fatalf("storagetest has %d group files (%v): the walk found too few to compare", len(want), want)
	}
	for dir, got := range sets {
		if !slices.Equal(got, want) {
			t.Errorf("%s has the group files %v, storage/storagetest %v: every group has a file of the same name in both stores and the suite (a file only one store needs is driver-only: list it in storageGroupFiles with the reason)", dir, got, want)
		}
	}
}
