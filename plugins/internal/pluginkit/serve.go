package pluginkit

import (
	"log/slog"
	"os"

	"github.com/hymical/hymical/sdk/transport"
)

// Serve runs a broker transport as a plugin process until the host stops
// it, then closes the transport's connections. The transport logs as text
// to standard error, which the host reads line by line and logs under the
// plugin's name.
func Serve[T interface {
	transport.Transport
	Close()
}](newTransport func(*slog.Logger) T) {
	t := newTransport(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	defer t.Close()
	transport.Serve(t)
}
