//go:build unix

package nodetransport

import (
	"path/filepath"
	"testing"

	"github.com/hymical/hymical/harness/e2etest"
)

// TestServeDeliversThroughTheNodePlugin runs the real server, `hymical
// serve` as its own process, with the Node.js plugin installed and pinned
// as an operator would, and drives it over HTTP as a user would with
// curl (e2etest.ServeJSONLPlugin): Validate refuses a bad endpoint; 100
// submissions arrive in the file, each verified and once after
// deduplication; a retryable outcome is retried into a delivery and a
// refused send fails its delivery at once.
func TestServeDeliversThroughTheNodePlugin(t *testing.T) {
	t.Parallel()
	script, err := filepath.EvalSymlinks(filepath.Join(nodePlugin(t), scriptName))
	if err != nil {
		t.Fatal(err)
	}
	e2etest.ServeJSONLPlugin(t, e2etest.JSONLPlugin{
		Hymical:    setup.hymical.Path(t),
		Script:     script,
		Transport:  transport,
		MissingDir: "ENOENT",
	})
}
