//go:build unix

package pluginhost

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hymical/hymical/sdk/transport"
)

// builtInArgs is how the tests' built-in executable is told which
// transport to serve; the misbehave plugin's "args" mode answers with them.
func builtInArgs(name string) []string { return []string{"plugin", name} }

// A transport the server's own executable carries runs from it, with its
// arguments, when no executable of its name is in the directory or
// configured; one that is wins, so a user can run a newer transport without
// replacing the server. Plugins says which runs and from where.
func TestBuiltInTransports(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	withOverride := t.TempDir()
	override := filepath.Join(withOverride, BinaryPrefix+"beta")
	copyBinary(t, misbehaveBin, override)
	builtIn := BuiltIn{Executable: misbehaveBin, Names: []string{"alpha", "beta"}, Args: builtInArgs}

	tests := []struct {
		name string
		cfg  Config
		// want is, by plugin, the path it runs and the arguments it
		// says it was given.
		want map[string][2]string
	}{
		{"built-ins run from the executable with their arguments",
			Config{Dir: empty, BuiltIn: builtIn},
			map[string][2]string{"alpha": {misbehaveBin, "plugin alpha"}, "beta": {misbehaveBin, "plugin beta"}}},
		{"an executable in the directory overrides the built-in of its name",
			Config{Dir: withOverride, BuiltIn: builtIn},
			map[string][2]string{"alpha": {misbehaveBin, "plugin alpha"}, "beta": {override, ""}}},
		{"a configured path overrides the built-in of its name",
			Config{Dir: empty, BuiltIn: builtIn, Plugins: []PluginConfig{{Name: "alpha", Path: override}}},
			map[string][2]string{"alpha": {override, ""}, "beta": {misbehaveBin, "plugin beta"}}},
		{"a configured plugin with no path and no file runs built in, with its settings",
			Config{Dir: empty, BuiltIn: builtIn, Plugins: []PluginConfig{{Name: "beta", Settings: map[string]string{"marker": "m"}}}},
			map[string][2]string{"alpha": {misbehaveBin, "plugin alpha"}, "beta": {misbehaveBin, "plugin beta"}}},
		{"no directory: built-ins alone",
			Config{BuiltIn: builtIn},
			map[string][2]string{"alpha": {misbehaveBin, "plugin alpha"}, "beta": {misbehaveBin, "plugin beta"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, _ := newHost(t, tt.cfg)
			infos := h.Plugins()
			if len(infos) != len(tt.want) {
				t.Fatalf("Plugins() = %+v, want %d plugins", infos, len(tt.want))
			}
			for _, p := range infos {
				want := tt.want[p.Name]
				if p.Path != want[0] || p.BuiltIn != (want[1] != "") || strings.Join(p.Args, " ") != want[1] {
					t.Errorf("%s: path %s, built in %v, args %q; want %s, %v, %q", p.Name, p.Path, p.BuiltIn, p.Args, want[0], want[1] != "", want[1])
				}
				out := h.Send(context.Background(), p.Name, mode("args"), soon())
				if out.Kind != transport.OutcomeDelivered || out.Error != want[1] {
					t.Errorf("%s was started with %q (%+v), want %q", p.Name, out.Error, out, want[1])
				}
			}
		})
	}
}

// The pin of a built-in transport is the pin of the executable that
// serves it: the host hashes that file before every start.
func TestBuiltInTransportPin(t *testing.T) {
	t.Parallel()
	good := sha256File(t, misbehaveBin)
	wrong := strings.Repeat("cd", 32)
	tests := []struct {
		name   string
		pin    string
		wantIs error
	}{
		{"the executable's SHA-256 runs it", good, nil},
		{"another SHA-256 is refused", wrong, ErrChecksumMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{
				Dir:     t.TempDir(),
				BuiltIn: BuiltIn{Executable: misbehaveBin, Names: []string{"alpha"}, Args: builtInArgs},
				Plugins: []PluginConfig{{Name: "alpha", SHA256: tt.pin}},
			}
			h, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
			if tt.wantIs == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				defer h.Close()
				if p := h.Plugins(); len(p) != 1 || !p[0].Pinned || !p[0].BuiltIn {
					t.Errorf("Plugins() = %+v, want alpha built in and pinned", p)
				}
				return
			}
			if err == nil {
				h.Close()
				t.Fatal("New succeeded, want the pin refused")
			}
			if !errors.Is(err, tt.wantIs) || !strings.Contains(err.Error(), misbehaveBin) {
				t.Errorf("New: %v, want %v naming %s", err, tt.wantIs, misbehaveBin)
			}
		})
	}
}

func TestBuiltInExecutableThatIsGone(t *testing.T) {
	t.Parallel()
	gone := filepath.Join(t.TempDir(), "hymical")
	_, err := New(context.Background(), Config{BuiltIn: BuiltIn{Executable: gone, Names: []string{"alpha"}, Args: builtInArgs}}, slog.New(slog.DiscardHandler))
	if !errors.Is(err, ErrPluginNotFound) || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "built-in transports") {
		t.Fatalf("New: %v, want ErrPluginNotFound saying the built-in transports' executable is not there", err)
	}
}
