package pluginbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	const http = "github.com/hymical/hymical/plugins/http"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName(http)), []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Two plugins whose import paths end alike keep their own files.
	if err := os.Mkdir(filepath.Join(dir, FileName("example.com/a/plugins/http")), 0o755); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == DirEnv {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		name    string
		dir     string
		pkg     string
		want    string
		wantErr string
	}{
		{"no run directory: the caller builds", "", http, "", ""},
		{"built for the run", dir, http, filepath.Join(dir, FileName(http)), ""},
		{"not built for the run: the caller builds", dir, "github.com/hymical/hymical/server/pluginhost/testdata/misbehave", "", ""},
		{"a relative pattern, which the run does not build", dir, "./plugins/http", "", ""},
		{"not a file", dir, "example.com/a/plugins/http", "", "is not a file"},
		{"unreadable directory", filepath.Join(dir, FileName(http), "below"), http, "", DirEnv},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok, err := Lookup(env(tt.dir), tt.pkg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Lookup = %q, %v, %v; want an error saying %q", got, ok, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || ok != (tt.want != "") {
				t.Errorf("Lookup = %q, %v, %v; want %q", got, ok, err, tt.want)
			}
		})
	}
}

// The file name keeps the whole import path, so it is one file in the
// directory whatever the path holds.
func TestFileNameIsOneFileName(t *testing.T) {
	t.Parallel()
	a, b := FileName("example.com/x/plugins/http"), FileName("example.com/y/plugins/http")
	if a == b || strings.ContainsRune(a, '/') || filepath.Base(a) != a {
		t.Errorf("FileName: %q and %q", a, b)
	}
}
