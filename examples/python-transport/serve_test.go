//go:build unix

package pythontransport

import (
	"testing"

	"github.com/hymical/hymical/harness/e2etest"
)

// TestServeDeliversThroughThePythonPlugin runs the real server, `hymical
// serve` as its own process, with the Python plugin installed and pinned
// as an operator would, and drives it over HTTP as a user would with
// curl (e2etest.ServeJSONLPlugin): Validate refuses a bad endpoint; 100
// submissions arrive in the file, each verified and once after
// deduplication; a retryable outcome is retried into a delivery and a
// refused send fails its delivery at once.
func TestServeDeliversThroughThePythonPlugin(t *testing.T) {
	t.Parallel()
	e2etest.ServeJSONLPlugin(t, e2etest.JSONLPlugin{
		Hymical:    hymical.Path(t),
		Script:     plugin(t),
		Transport:  "jsonl-python",
		MissingDir: "No such file or directory",
	})
}
