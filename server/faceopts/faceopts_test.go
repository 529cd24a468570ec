package faceopts_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportsOnlyTheStandardLibrary holds the package to its doc: the
// configuration imports it and must not link the faces through it.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if deps := strings.Fields(string(out)); !slices.Equal(deps, []string{"github.com/hymical/hymical/server/faceopts"}) {
		t.Fatalf("faceopts depends on %v beyond the standard library", deps)
	}
}
