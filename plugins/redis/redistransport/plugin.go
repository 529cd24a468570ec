package redistransport

import (
	"log/slog"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
)

// ServePlugin runs this transport as a plugin process until the host stops
// it. It is the whole of hymical-plugin-redis's main and of
// `hymical plugin redis`, so the standalone binary and the one built into
// hymical run the same code.
func ServePlugin() {
	pluginkit.Serve(func(logger *slog.Logger) *Transport { return New(Options{Logger: logger}) })
}
