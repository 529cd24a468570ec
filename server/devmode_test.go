package server_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/hymical/hymical/server"
	"github.com/hymical/hymical/server/config"
)

// TestDevModeStartsOnlyOnLoopback: a server without a token that other
// machines can reach is refused at start, naming the keys and the fix.
func TestDevModeStartsOnlyOnLoopback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		listen string
		ok     bool
	}{
		{"0.0.0.0:0", false},
		{"127.0.0.1:0", true},
		{"localhost:0", true},
	}
	for _, tt := range tests {
		t.Run(tt.listen, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig("sqlite:" + filepath.Join(t.TempDir(), "hymical.db"))
			cfg.Server.InsecureDevMode, cfg.Server.AdminToken, cfg.Server.Listen = true, config.Secret(""), tt.listen
			if tt.ok {
				start(t, cfg)
				return
			}
			// New itself, past Load's own refusal of the same config.
			srv, err := server.New(t.Context(), cfg, nil)
			if err == nil || srv != nil {
				t.Fatal("New started a dev-mode server on every interface")
			}
			for _, want := range []string{"server.insecure_dev_mode", "server.listen " + tt.listen, "127.0.0.1", "FORMS_SERVER_ADMIN_TOKEN"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}
