package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/harness/proctest"
	"github.com/hymical/hymical/server/pluginhost"
)

// `hymical plugins list` starts each plugin to prove it answers. A plugin
// whose process dies in Configure no longer stops the host, so the
// listing must say so itself: it names the plugin and fails.
func TestPluginsListFailsNamingAPluginThatCrashesInConfigure(t *testing.T) {
	t.Parallel()
	binDir := t.TempDir()
	if err := e2etest.BuildPlugins(binDir, map[string]string{
		// serve's default configuration runs the http plugin too.
		"http":      "github.com/hymical/hymical/plugins/http",
		"misbehave": "github.com/hymical/hymical/server/pluginhost/testdata/misbehave",
	}); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, pluginhost.BinaryPrefix+"misbehave")
	t.Cleanup(func() { _, _ = proctest.KillExecutable(bin) })
	flag := filepath.Join(t.TempDir(), "exit-now")
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "hymical.yaml")
	yaml := fmt.Sprintf("plugins:\n  dir: %q\n  list:\n    - name: misbehave\n      settings:\n        configure_exit_while: %q\n", binDir, flag)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := runPluginsList(context.Background(), []string{"--config", cfgPath}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), `transport plugin "misbehave" is not running`) {
		t.Fatalf("plugins list = %v, want an error naming the plugin that is not running\nstdout:\n%s", err, stdout.String())
	}
	if !strings.Contains(stdout.String(), "misbehave") {
		t.Errorf("plugins list printed no line for the plugin:\n%s", stdout.String())
	}
}
