package apiwire_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/api/apiwire"
)

// declaredCodes reads the package's source for every constant of type Code,
// so a code added to the const block but not to Codes or Status is caught
// here rather than by a client that meets it.
func declaredCodes(t *testing.T) map[apiwire.Code]string {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	out := map[apiwire.Code]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
					continue
				}
				for i, name := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s is not a string literal", name.Name)
					}
					out[apiwire.Code(strings.Trim(lit.Value, `"`))] = name.Name
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("found no constant of type Code in the package source")
	}
	return out
}

func TestEveryCodeIsListedWithOneStatus(t *testing.T) {
	t.Parallel()
	declared := declaredCodes(t)
	listed := apiwire.Codes()
	seen := map[apiwire.Code]bool{}
	for _, c := range listed {
		if seen[c] {
			t.Errorf("Codes lists %q twice", c)
		}
		seen[c] = true
		if _, ok := declared[c]; !ok {
			t.Errorf("Codes lists %q, which no constant declares", c)
		}
		if s := c.Status(); s < 400 || s > 599 {
			t.Errorf("%q has status %d; every code needs one 4xx or 5xx status in Status", c, s)
		}
	}
	for _, c := range slices.Sorted(maps.Keys(declared)) {
		if !seen[c] {
			t.Errorf("%s (%q) is declared but not in Codes: add it there and to Status", declared[c], c)
		}
	}
	if got := apiwire.Code("no_such_code").Status(); got != 0 {
		t.Errorf("an unknown code has status %d, want 0", got)
	}
}

// TestCodeNamesAreSnakeCase: a code is a program's key, so it is written
// one way only: lowercase words joined by underscores.
func TestCodeNamesAreSnakeCase(t *testing.T) {
	t.Parallel()
	for _, c := range apiwire.Codes() {
		s := string(c)
		ok := s != "" && s[0] != '_' && s[len(s)-1] != '_' && !strings.Contains(s, "__")
		for _, r := range s {
			ok = ok && (r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
		}
		if !ok {
			t.Errorf("code %q is not lowercase words joined by underscores", c)
		}
	}
}
