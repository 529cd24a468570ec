package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/config"
)

func TestConsoleSettings(t *testing.T) {
	t.Parallel()
	def := config.Default().Console
	if !def.Enabled || def.TraceURLTemplate != "" || def.SessionTTL != 12*time.Hour {
		t.Errorf("default console config = %+v, want enabled, no trace links, 12h sessions", def)
	}
	cfg, warnings := mustLoad(t, "console:\n  trace_url_template: https://jaeger.example.com/trace/{trace_id}\n",
		withToken("FORMS_CONSOLE_SESSION_TTL=1h", "FORMS_CONSOLE_ENABLED=false"))
	if len(warnings) > 0 {
		t.Errorf("warnings: %q", warnings)
	}
	if cfg.Console.Enabled || cfg.Console.SessionTTL != time.Hour || cfg.Console.TraceURLTemplate != "https://jaeger.example.com/trace/{trace_id}" {
		t.Errorf("console config = %+v", cfg.Console)
	}
}

func TestConsoleValuesAreChecked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  []string
		key  string
		want []string
	}{
		{"template without the placeholder", []string{"FORMS_CONSOLE_TRACE_URL_TEMPLATE=https://jaeger.example.com/trace/"},
			"console.trace_url_template", []string{"{trace_id}", "e.g. https://jaeger.example.com/trace/{trace_id}", "FORMS_CONSOLE_TRACE_URL_TEMPLATE"}},
		{"template that is not http", []string{"FORMS_CONSOLE_TRACE_URL_TEMPLATE=javascript:alert(1)/{trace_id}"},
			"console.trace_url_template", []string{"http:// or https://"}},
		{"template without a host", []string{"FORMS_CONSOLE_TRACE_URL_TEMPLATE=https:///{trace_id}"},
			"console.trace_url_template", []string{"no host"}},
		{"zero session lifetime", []string{"FORMS_CONSOLE_SESSION_TTL=0s"}, "console.session_ttl", []string{"positive duration", "12h"}},
		// The portal's colour and frame origins are written into a
		// stylesheet and a CSP header: nothing that could end either.
		{"accent colour that is not a hex colour", []string{"FORMS_PORTAL_ACCENT_COLOR=red;} body{display:none"},
			"portal.accent_color", []string{"#rgb or #rrggbb"}},
		{"frame origin with a path", []string{"FORMS_PORTAL_FRAME_ANCESTORS=https://forms.example.com/embed"},
			"portal.frame_ancestors", []string{"scheme and host, no path"}},
		{"frame origin that adds a directive", []string{"FORMS_PORTAL_FRAME_ANCESTORS=https://a.example.com; script-src *"},
			"portal.frame_ancestors", []string{"not an origin"}},
		{"none among origins", []string{"FORMS_PORTAL_FRAME_ANCESTORS='none',https://a.example.com"},
			"portal.frame_ancestors", []string{"cannot be listed with other values"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := load(t, "", withToken(tt.env...))
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			p := problemFor(t, err, tt.key)
			for _, w := range append(tt.want, tt.key) {
				if !strings.Contains(p.Message, w) {
					t.Errorf("message %q does not say %q", p.Message, w)
				}
			}
		})
	}
}
