package amqptransport

import (
	"log/slog"
	"os"

	"github.com/hymical/hymical/sdk/transport"
)

// ServePlugin runs this transport as a plugin process until the host stops
// it. It is the whole of hymical-plugin-amqp's main and of
// `hymical plugin amqp`, so the standalone binary and the one built into
// hymical run the same code. The host reads the plugin's standard error
// line by line and logs it under the plugin's name, so that is where the
// log goes.
func ServePlugin() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	t := New(Options{Logger: logger})
	defer t.Close()
	transport.Serve(t)
}
