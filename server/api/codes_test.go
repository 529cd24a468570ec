package api_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/api/apiwire"
)

// TestErrorCodesInTheDocs holds docs/api.md's table of error codes to
// apiwire: every code in the row of its own status, once, and no code the
// server does not send.
func TestErrorCodesInTheDocs(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(\\d{3})` \\| ([^|]*) \\|")
	code := regexp.MustCompile("`([a-z0-9_]+)`")
	rows := row.FindAllStringSubmatch(string(raw), -1)
	if len(rows) == 0 {
		t.Fatal("docs/api.md has no row \"| `STATUS` | `code`, … | when |\"")
	}
	listed := map[apiwire.Code]int{}
	for _, r := range rows {
		status, _ := strconv.Atoi(r[1])
		for _, m := range code.FindAllStringSubmatch(r[2], -1) {
			c := apiwire.Code(m[1])
			if _, twice := listed[c]; twice {
				t.Errorf("docs/api.md lists %q twice", c)
			}
			listed[c] = status
			switch s := c.Status(); {
			case s == 0:
				t.Errorf("docs/api.md lists %q under %d, but the server sends no such code: drop it", c, status)
			case s != status:
				t.Errorf("docs/api.md lists %q under %d, but it is sent with %d: move it", c, status, s)
			}
		}
	}
	var missing []string
	for _, c := range apiwire.Codes() {
		if _, ok := listed[c]; !ok {
			missing = append(missing, string(c))
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/api.md's table of errors does not list %s: add each to the row of its status", strings.Join(missing, ", "))
	}
}
