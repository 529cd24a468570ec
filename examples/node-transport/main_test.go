//go:build unix

package nodetransport

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
)

// scriptName is the plugin's executable, named as the host finds it: the
// endpoints' transport is "jsonl-node".
const (
	scriptName = "hymical-plugin-jsonl-node"
	transport  = "jsonl-node"
)

// install says how to get what these tests need.
const install = "node and npm are not installed, so the Node.js plugin cannot run: apt-get install nodejs npm (or run .ci/tools.sh)"

// setup is what TestMain prepared: a copy of the plugin with its npm
// dependencies installed, and a plugin directory holding a symlink to it,
// as an operator would install it; skip says why there is none. hymical
// is built once, for the serve tests, when the first of them asks.
var setup struct {
	app, pluginDir string
	skip           string
	err            error
	hymical        *e2etest.HymicalBuild
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "hymical-node-plugin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	setup.hymical = e2etest.NewHymicalBuild(tmp)
	prepare(tmp)
	return m.Run()
}

// prepare copies the plugin's files and the Node SDK it installs from
// (not node_modules, not the Go tests), keeping their places relative to
// each other (the plugin names the SDK as file:../../sdk/node-plugin), runs
// `npm ci` in the copy of the plugin, and links the script into
// dir/plugins. `npm ci` installs exactly package-lock.json, so a lock file
// that drifted from package.json fails here, as it would for a user.
func prepare(dir string) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			setup.skip = install
			return
		}
	}
	app := filepath.Join(dir, "repo", "examples", "node-transport")
	for src, dst := range map[string]string{".": app, "../../sdk/node-plugin": filepath.Join(dir, "repo", "sdk", "node-plugin")} {
		if err := copyTree(src, dst); err != nil {
			setup.err = fmt.Errorf("copying %s: %w", src, err)
			return
		}
	}
	start := time.Now()
	cmd := exec.Command("npm", "ci", "--prefer-offline", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = app
	if out, err := cmd.CombinedOutput(); err != nil {
		setup.err = fmt.Errorf("npm ci in a copy of the plugin: %w\n%s", err, out)
		return
	}
	fmt.Fprintf(os.Stderr, "npm ci took %s\n", time.Since(start).Round(time.Millisecond))
	plugins := filepath.Join(dir, "plugins")
	if err := os.Mkdir(plugins, 0o755); err != nil {
		setup.err = err
		return
	}
	if err := os.Symlink(filepath.Join(app, scriptName), filepath.Join(plugins, scriptName)); err != nil {
		setup.err = err
		return
	}
	setup.app, setup.pluginDir = app, plugins
}

// copyTree copies the files under src to dst, leaving out node_modules and
// the Go tests and docs, which a plugin's installation does not have.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "node_modules" {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md")) {
			return nil
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}

// nodePlugin returns the plugin directory holding the installed plugin.
// Without node and npm the test is skipped, saying how to install them,
// except under CI=true, where a test that silently did not run must fail.
func nodePlugin(t *testing.T) string {
	t.Helper()
	if setup.skip != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(setup.skip + " (CI=true: these tests must run in CI)")
		}
		t.Skip(setup.skip)
	}
	if setup.err != nil {
		t.Fatal(setup.err)
	}
	t.Log("hymical-test-uses: node") // counted by harness/testrun
	return setup.pluginDir
}

// The Node SDK reads the service from its own copy of the Go SDK's proto
// file, so a plugin still runs when installed away from this repository.
// The copy must be the Go SDK's, byte for byte.
func TestProtoCopyMatchesTheSDK(t *testing.T) {
	t.Parallel()
	sdk, err := os.ReadFile("../../sdk/transport/proto/transport.proto")
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile("../../sdk/node-plugin/proto/transport.proto")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sdk, copied) {
		t.Fatal("sdk/node-plugin/proto/transport.proto differs from sdk/transport/proto/transport.proto; " +
			"copy it again (cp sdk/transport/proto/transport.proto sdk/node-plugin/proto/) and make sdk/node-plugin/lib/transport.js serve what changed")
	}
}

// TestDependenciesAreLocked checks what `npm ci` installs from:
// package-lock.json names every package with its integrity hash (the SDK,
// a directory in this repository, has none), the SDK is installed as a
// copy, and node_modules is ignored, never committed.
func TestDependenciesAreLocked(t *testing.T) {
	t.Parallel()
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatalf("package-lock.json: %v; run npm install in examples/node-transport and commit it", err)
	}
	for _, dep := range []string{`"node_modules/@grpc/grpc-js"`, `"node_modules/@grpc/proto-loader"`, `"integrity": "sha512-`,
		`"node_modules/@hymical/transport-plugin"`, `"resolved": "file:../../sdk/node-plugin"`} {
		if !bytes.Contains(lock, []byte(dep)) {
			t.Errorf("package-lock.json lacks %s", dep)
		}
	}
	// A symlinked SDK would look for its dependencies beside its real path,
	// in sdk/node-plugin/node_modules, which npm ci here does not fill.
	if npmrc, err := os.ReadFile(".npmrc"); err != nil || !bytes.Contains(npmrc, []byte("install-links=true")) {
		t.Errorf(".npmrc must set install-links=true (%v)", err)
	}
	ignore, err := os.ReadFile(".gitignore")
	if err != nil || !bytes.Contains(ignore, []byte("node_modules/")) {
		t.Errorf(".gitignore must ignore node_modules/ (%v)", err)
	}
}
