package pluginhost

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hymical/hymical/internal/syncbuf"
)

func TestHCLogAdapterWritesToSlog(t *testing.T) {
	t.Parallel()
	var buf syncbuf.Buffer
	base := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})).With("plugin", "http")
	var l hclog.Logger = newHCLogAdapter(base)
	l = l.Named("stdio").With("id", 7)

	l.Debug("hidden")
	l.Trace("hidden too")
	l.Warn("plugin process exited", "plugin", "/usr/lib/hymical/hymical-plugin-http", "error", "signal: killed")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("got %d log lines, want 1 (debug and trace are below Info):\n%s", len(lines), buf.String())
	}
	var rec struct {
		Level    string
		Msg      string
		Plugin   string
		GoPlugin map[string]any `json:"goplugin"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Level != "WARN" || rec.Msg != "plugin process exited" || rec.Plugin != "http" {
		t.Errorf("record = %+v, want WARN, the message, and the host's plugin attribute kept", rec)
	}
	if rec.GoPlugin["logger"] != "stdio" || rec.GoPlugin["id"] != 7.0 || rec.GoPlugin["plugin"] != "/usr/lib/hymical/hymical-plugin-http" || rec.GoPlugin["error"] != "signal: killed" {
		t.Errorf("go-plugin attributes = %v, want logger, implied and call args grouped", rec.GoPlugin)
	}
	if l.IsDebug() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Errorf("IsDebug %v IsInfo %v GetLevel %v, want the slog handler's level (Info)", l.IsDebug(), l.IsInfo(), l.GetLevel())
	}
}
