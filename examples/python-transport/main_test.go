//go:build unix

package pythontransport

import (
	"fmt"
	"os"
	"testing"

	"github.com/hymical/hymical/harness/e2etest"
)

// hymical is the hymical command, built once for the serve tests when the
// first of them asks; TestMain sets it.
var hymical *e2etest.HymicalBuild

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "hymical-python-plugin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	hymical = e2etest.NewHymicalBuild(tmp)
	return m.Run()
}
