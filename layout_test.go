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
// picks the driver) and not the plugin SDK. The console is pages over the
// store and the endpoint changes it shares with the API through package
// server: it never claims, sends or reaches a plugin, and does not borrow the
// API's internals. Only the packages themselves are
// checked, not their tests. A forbidden entry is a path inside this module,
// or a full import path when it contains a dot.
func TestImportBoundaries(t *testing.T) {
	t.Parallel()
	const mod = "github.com/hymical/hymical/"
	rules := []struct {
		pattern   string
		forbidden []string
	}{
		{"./sdk/...", []string{"server", "storage", "plugins", "internal", "harness"}},
		{"./sdk/webhook/...", []string{"sdk/transport", "modernc.org/sqlite", "github.com/jackc/pgx", "github.com/lib/pq", "github.com/mattn/go-sqlite3"}},
		{"./plugins/...", []string{"server", "storage"}},
		{"./examples/...", []string{"server", "storage"}},
		{"./server/pluginhost/...", []string{"storage"}},
		{"./storage/...", []string{"server", "sdk/transport", "sdk/webhook", "plugins"}},
		{"./server/console/...", []string{"server/api", "server/worker", "server/pluginhost", "plugins"}},
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
					if !strings.Contains(f, ".") {
						f = mod + f
					}
					if dep == f || strings.HasPrefix(dep, f+"/") {
						t.Errorf("%s depends on %s", r.pattern, dep)
					}
				}
			}
		})
	}
}
