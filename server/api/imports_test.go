package api_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAPIDoesNotLinkTheWorker: the API checks endpoints' retry schedules
// against server/retrypolicy, and must not pull in the worker (claim, sign,
// send) to do it.
func TestAPIDoesNotLinkTheWorker(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/hymical/hymical/server/worker" || strings.HasPrefix(dep, "github.com/hymical/hymical/server/worker/") {
			t.Errorf("server/api depends on %s", dep)
		}
	}
}
