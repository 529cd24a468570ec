package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportBoundaries holds the layout's rules in one place: what each
// room of the tree may not reach. Plugin authors import sdk/, so it must not
// drag in the server; plugins must not touch delivery state; the plugin host
// moves messages and never sees the store; storage knows no transport.
// Receivers import sdk/webhook into their own services, so it carries no
// database driver (its SQL deduper speaks database/sql and the receiver
// picks the driver) and not the plugin SDK. The API and the console see the
// store through its interface and share endpoint changes through
// server/endpoint: they link no driver, never claim, send or reach a
// plugin. internal/ holds primitives only; the harnesses sit on top and
// nothing imports them. Only the packages themselves are checked, not
// their tests. A forbidden entry is a path inside this module, or a full
// import path when it contains a dot, and forbids that package and every
// package below it; one ending in "=" forbids only that package (so
// "server=" is the assembly, not its subpackages).
func TestImportBoundaries(t *testing.T) {
	t.Parallel()
	const mod = "github.com/hymical/hymical/"
	// The assembly's rooms, under server/: none imports the assembly
	// (server=) or the harnesses, and none reaches sideways into a room
	// that is not its business.
	room := func(sideways ...string) []string { return append([]string{"server=", "harness"}, sideways...) }
	rules := []struct {
		pattern   string
		forbidden []string
	}{
		{"./sdk/...", []string{"server", "storage", "plugins", "harness", "internal"}},
		{"./sdk/webhook/...", []string{"sdk/transport", "modernc.org/sqlite", "github.com/jackc/pgx", "github.com/lib/pq", "github.com/mattn/go-sqlite3"}},
		{"./plugins/...", []string{"server", "storage", "harness", "internal"}},
		{"./examples/...", []string{"server", "storage", "harness", "internal"}},
		// storage shares one primitive with the SDK (sdk/boundtext), not its contracts.
		{"./storage/...", []string{"server", "sdk/transport", "sdk/webhook", "plugins", "harness"}},
		// internal/ holds only primitives that any layer may use.
		{"./internal/...", []string{"server", "storage", "harness", "plugins", "sdk"}},
		// The HTTP faces see the store through its interface: no database
		// driver, not the package that opens one, and no delivery loop.
		{"./server/api/...", room("server/worker", "server/database", "server/pluginhost", "server/console", "server/fleet", "plugins", "modernc.org/sqlite", "github.com/jackc/pgx")},
		{"./server/console/...", room("server/worker", "server/database", "server/pluginhost", "server/api", "server/fleet", "plugins", "modernc.org/sqlite", "github.com/jackc/pgx")},
		{"./server/config/...", room("server/api", "server/console", "server/database", "server/fleet", "server/endpoint")},
		{"./server/database/...", room("server/api", "server/console", "server/worker", "server/pluginhost", "server/fleet", "server/endpoint")},
		{"./server/endpoint/...", room("server/api", "server/console", "server/worker", "server/pluginhost", "server/database", "server/fleet")},
		{"./server/event/...", room("server/api", "server/console", "server/worker", "server/pluginhost", "server/database", "server/fleet", "server/endpoint")},
		{"./server/fleet/...", room("server/api", "server/console", "server/worker", "server/pluginhost", "server/database")},
		// The plugin host moves messages and never sees the store.
		{"./server/pluginhost/...", room("storage", "server/worker", "server/api", "server/console")},
		{"./server/telemetry/...", room("server/api", "server/console", "server/worker", "server/database")},
		{"./server/worker/...", room("server/api", "server/console", "server/database", "server/fleet", "server/endpoint")},
		{"./server", []string{"harness"}},
	}
	for _, r := range rules {
		t.Run(r.pattern, func(t *testing.T) {
			t.Parallel()
			// Packages of the pattern itself, with their non-test imports.
			out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", r.pattern).CombinedOutput()
			if err != nil {
				if strings.Contains(string(out), "matched no packages") {
					return
				}
				t.Fatalf("go list %s: %v\n%s", r.pattern, err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, f := range r.forbidden {
					exact := strings.HasSuffix(f, "=")
					f = strings.TrimSuffix(f, "=")
					if !strings.Contains(f, ".") {
						f = mod + f
					}
					if dep == f || !exact && strings.HasPrefix(dep, f+"/") {
						t.Errorf("%s depends on %s", r.pattern, dep)
					}
				}
			}
		})
	}
}
