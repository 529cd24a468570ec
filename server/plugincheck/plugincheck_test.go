//go:build unix

package plugincheck

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The plugins the tests check, built once: the shipped http plugin, which
// must pass, and the plugin host's misbehaving test plugin, which must
// not.
var httpBin, misbehaveBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "plugincheck-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/hymical/hymical/plugins/http",
		"github.com/hymical/hymical/server/pluginhost/testdata/misbehave")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the plugins:", err)
		return 1
	}
	httpBin, misbehaveBin = filepath.Join(dir, "http"), filepath.Join(dir, "misbehave")
	return m.Run()
}

func table(t *testing.T, r Report) string {
	t.Helper()
	var b strings.Builder
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestCheck(t *testing.T) {
	t.Parallel()
	all := []string{RowHandshake, RowValidateGood, RowValidateBad, RowSend, RowNoRequest, RowDeadline, RowShutdown}
	tests := []struct {
		name string
		opts Options
		// fail are the rows that must fail, and only those.
		fail []string
		// says is text a row's detail must hold, by row.
		says map[string]string
	}{
		{"the shipped http plugin passes every row", Options{Path: httpBin}, nil, nil},
		{
			// Validate accepts anything with a known mode, and a send
			// never answers, whatever its deadline: every row that sends
			// fails, the deadline's naming the host's restart.
			"a plugin that never answers a send fails the rows that send",
			Options{Path: misbehaveBin, Config: map[string]string{"mode": "hang"}},
			[]string{RowValidateBad, RowSend, RowNoRequest, RowDeadline},
			map[string]string{RowDeadline: "restarted it; stop the send when its deadline passes"},
		},
		{
			// It answers at once, delivered, wherever it is sent: it
			// sends nothing, and does not refuse what it must.
			"a plugin that claims delivery without sending fails",
			Options{Path: misbehaveBin, Config: map[string]string{"mode": "ok"}},
			[]string{RowValidateBad, RowSend, RowNoRequest, RowDeadline},
			map[string]string{RowSend: "0 messages arrived", RowNoRequest: "outcome delivered", RowValidateBad: unknownKey},
		},
		{
			"a plugin that refuses its settings fails the handshake and runs nothing else",
			Options{Path: misbehaveBin, Settings: map[string]string{"fail_configure": "no settings, please"}},
			all,
			map[string]string{RowHandshake: "no settings, please", RowShutdown: "not run"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := Run(t.Context(), tc.opts)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			got := table(t, r)
			t.Logf("\n%s", got)
			if len(r.Rows) != len(all) {
				t.Fatalf("%d rows, want %d:\n%s", len(r.Rows), len(all), got)
			}
			if failed := r.Failed(); !slices.Equal(failed, tc.fail) {
				t.Errorf("failed rows %v, want %v:\n%s", failed, tc.fail, got)
			}
			for _, row := range r.Rows {
				if want, ok := tc.says[row.Name]; ok && !strings.Contains(row.Detail, want) {
					t.Errorf("row %s says %q, want it to say %q", row.Name, row.Detail, want)
				}
			}
		})
	}
}
