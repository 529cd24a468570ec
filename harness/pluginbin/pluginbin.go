// Package pluginbin is how one test run shares plugin binaries built once.
// The test command (harness/testrun) builds every plugin under plugins/
// into a directory before go test starts and names that directory in
// DirEnv; e2etest.BuildPlugins takes a binary from there instead of
// building it again in every package whose tests need it. Without DirEnv,
// as under a plain go test, each test builds its own as before.
//
// It imports only the standard library, so the test command, which uses
// it, stays quick to build.
package pluginbin

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
)

// DirEnv names the environment variable holding the directory of the
// binaries built for the run.
const DirEnv = "HYMICAL_TEST_PLUGIN_DIR"

// FileName is the name, in that directory, of the binary built from the
// main package at importPath. The whole path is kept, escaped, so two
// packages with the same last element cannot take each other's place.
func FileName(importPath string) string {
	return url.PathEscape(importPath)
}

// Lookup returns the binary built for the run from the package at
// importPath, found through getenv (os.Getenv). ok is false when the run
// built none: DirEnv is unset, or the package is not one it built (a test
// plugin under testdata, say), and the caller builds it itself. An error
// says the directory is set but cannot be read.
func Lookup(getenv func(string) string, importPath string) (path string, ok bool, err error) {
	dir := getenv(DirEnv)
	if dir == "" {
		return "", false, nil
	}
	path = filepath.Join(dir, FileName(importPath))
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("%s=%s: %w", DirEnv, dir, err)
	case !fi.Mode().IsRegular():
		return "", false, fmt.Errorf("%s=%s: %s is not a file", DirEnv, dir, path)
	}
	return path, true, nil
}
