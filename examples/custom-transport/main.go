// Command hymical-plugin-jsonl is an example transport plugin for the
// Hymical delivery server, written only against sdk/transport as any
// third-party plugin would be. It appends each signed message, headers and
// exact body, as one JSON line to the file an endpoint names in its config
// ("path"), so a batch job or a queue shipper can pick the messages up and
// verify them with sdk/webhook.
//
// It owns nothing but that file format and the checks on an endpoint's
// path. It must not import anything from the server's server/ or storage/
// trees: a plugin sees only what the host hands it.
//
// Build it into the server's plugin directory under the name the host
// discovers:
//
//	go build -o bin/hymical-plugin-jsonl ./examples/custom-transport
//
// See README.md beside this file.
package main

import (
	"log/slog"
	"os"

	"github.com/hymical/hymical/sdk/transport"
)

func main() {
	log := slog.New(slog.NewTextHandler(stderr{}, nil))
	transport.Serve(NewJSONL(log))
}

// stderr writes to whatever os.Stderr is at the time of the write. Serve
// replaces os.Stderr with the stream the host logs under the plugin's
// name; a logger handed os.Stderr before Serve would keep the original,
// which the host logs only at debug level.
type stderr struct{}

func (stderr) Write(p []byte) (int, error) { return os.Stderr.Write(p) }
