//go:build unix

package nodetransport

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/pluginhost"
)

// minimalPlugin is the smallest plugin the Node SDK serves: a send
// function and nothing else.
const minimalPlugin = `#!/usr/bin/env node
const { serve, delivered } = require('@hymical/transport-plugin');
serve({ name: 'hymical-plugin-minimal', send: async () => delivered(202) });
`

// TestSendAloneIsAPlugin holds the Node SDK to what it does for a plugin
// that gives only send: settings, which it cannot take, are refused with
// their names, and every endpoint passes Validate.
func TestSendAloneIsAPlugin(t *testing.T) {
	t.Parallel()
	nodePlugin(t)
	// Beside the installed example, so that it finds the SDK in the same
	// node_modules.
	path := filepath.Join(setup.app, "hymical-plugin-minimal")
	if err := os.WriteFile(path, []byte(minimalPlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		settings map[string]string
		refused  string // what New's error must say; "" for none
	}{
		{"settings it cannot take are refused, named", map[string]string{"colour": "blue"}, "unknown settings colour: this plugin takes none"},
		{"without settings it starts, validates and sends", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := pluginhost.New(t.Context(), pluginhost.Config{
				Plugins: []pluginhost.PluginConfig{{Name: "minimal", Path: path, Settings: tc.settings}},
			}, slog.New(slog.DiscardHandler))
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("New = %v, want a refusal saying %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer h.Close()
			ep := sdk.Endpoint{URL: "anything://at-all", Config: map[string]string{"any": "key"}}
			if err := h.Validate(t.Context(), "minimal", ep); err != nil {
				t.Errorf("Validate = %v, want every endpoint accepted without a validate function", err)
			}
			out := h.Send(t.Context(), "minimal", sdk.Message{DeliveryID: "dlv_min", Attempt: 1, Endpoint: ep, Body: []byte("{}")}, time.Now().Add(10*time.Second))
			if out.Kind != sdk.OutcomeDelivered || out.StatusCode != 202 {
				t.Errorf("Send = %+v, want delivered with status 202", out)
			}
		})
	}
}
