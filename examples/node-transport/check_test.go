//go:build unix

package nodetransport

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/plugincheck"
)

// TestPluginsCheckPasses runs `hymical plugins check`'s checks on the
// installed plugin, as its author would: every row passes. The deadline
// row holds the Node SDK to answering when the attempt's deadline passes
// even though this plugin's append to a FIFO nobody reads never ends.
func TestPluginsCheckPasses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(nodePlugin(t), scriptName)
	r, err := plugincheck.Run(t.Context(), plugincheck.Options{Path: path, Target: plugincheck.TargetJSONL})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", b.String())
	if failed := r.Failed(); len(failed) > 0 || len(r.Rows) == 0 {
		t.Fatalf("rows %v failed:\n%s", failed, b.String())
	}
}
