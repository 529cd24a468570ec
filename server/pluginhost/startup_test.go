package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/transport"
)

// A plugin whose Configure hangs or whose process dies while configuring
// at start-up is an outage of its transport, as it would be at run time:
// New still starts the other plugins and returns, the plugin's sends are
// given back unsent, Up names it with a short reason, and the host keeps
// starting it until it comes right.
func TestAPluginThatHangsOrCrashesInConfigureIsConfinedToItsTransport(t *testing.T) {
	t.Parallel()
	tests := []struct {
		setting, reason string
	}{
		{"configure_hang_while", "configure timed out"},
		{"configure_exit_while", "crashed while configuring"},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			t.Parallel()
			// While this file exists the plugin's Configure misbehaves.
			flag := filepath.Join(t.TempDir(), "misbehave-now")
			if err := os.WriteFile(flag, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := Config{
				Plugins: []PluginConfig{
					{Name: "stuck", Path: misbehaveBin, Settings: map[string]string{tt.setting: flag}},
					{Name: "misbehave", Path: misbehaveBin},
				},
				StartTimeout: time.Second,
				RetryBackoff: 200 * time.Millisecond,
			}
			h, _ := newHost(t, cfg)

			if out := h.Send(context.Background(), "misbehave", mode("ok"), soon()); out.Kind != transport.OutcomeDelivered {
				t.Fatalf("the healthy transport's outcome = %+v, want delivered", out)
			}
			out := h.Send(context.Background(), "stuck", mode("ok"), soon())
			if out.Kind != transport.OutcomeRetryable || !out.NoRequest || !strings.Contains(out.Error, `transport plugin "stuck" is not running`) {
				t.Fatalf("the stuck transport's outcome = %+v, want retryable, no request, saying it is not running", out)
			}
			err := h.Up(context.Background())
			var down *DownError
			if !errors.As(err, &down) || len(down.Down) != 1 || down.Down[0].Name != "stuck" {
				t.Fatalf("Up = %v, want a *DownError naming only the stuck transport", err)
			}
			want := fmt.Sprintf(`transport plugin "stuck" is not running (%s)`, tt.reason)
			if brief := down.Brief(); brief != want || strings.Contains(brief, misbehaveBin) {
				t.Fatalf("Brief = %q, want %q", brief, want)
			}

			// Once Configure behaves, the background start brings the
			// transport back without a send or a probe asking for it.
			if err := os.Remove(flag); err != nil {
				t.Fatal(err)
			}
			testwait.For(t, 30*time.Second, func() error {
				if h.Restarts("stuck") == 0 {
					return errors.New("the stuck transport has not been started again")
				}
				return nil
			})
			if err := h.Up(context.Background()); err != nil {
				t.Fatalf("Up once Configure behaves: %v", err)
			}
			if out := h.Send(context.Background(), "stuck", mode("ok"), soon()); out.Kind != transport.OutcomeDelivered {
				t.Fatalf("the transport's outcome once it is back = %+v, want delivered", out)
			}
		})
	}
}

// A plugin that answers Configure with an error refuses the settings the
// operator wrote: no retry fixes that, so New fails, loudly, naming it.
// (TestDiscovery checks the error's text.)
func TestAPluginRefusingItsSettingsStillStopsStartUp(t *testing.T) {
	t.Parallel()
	cfg := Config{Plugins: []PluginConfig{
		{Name: "picky", Path: misbehaveBin, Settings: map[string]string{"fail_configure": "colour must be blue"}},
		{Name: "misbehave", Path: misbehaveBin},
	}}
	h, err := New(context.Background(), cfg, nil)
	if err == nil {
		h.Close()
		t.Fatal("New succeeded, want the plugin's refusal")
	}
	if !errors.Is(err, transport.ErrRejected) || !strings.Contains(err.Error(), `"picky"`) {
		t.Fatalf("New = %v, want transport.ErrRejected naming the plugin", err)
	}
}
