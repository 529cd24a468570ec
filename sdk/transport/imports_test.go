package transport

import (
	"os/exec"
	"strings"
	"testing"
)

// The boundary is a rule of the design:
// plugin authors import this package, so it must not reach into the server.
func TestImportBoundary(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("checking imports needs the go command: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-test", "-f", "{{.ImportPath}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, forbidden := range []string{"github.com/hymical/hymical/server", "github.com/hymical/hymical/storage"} {
			if dep == forbidden || strings.HasPrefix(dep, forbidden+"/") {
				t.Errorf("depends on %s", dep)
			}
		}
	}
}
