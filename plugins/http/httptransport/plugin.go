package httptransport

import "github.com/hymical/hymical/sdk/transport"

// ServePlugin runs this transport as a plugin process until the host stops
// it. It is the whole of hymical-plugin-http's main and of `hymical plugin
// http`, so the standalone binary and the one built into hymical run the
// same code.
func ServePlugin() {
	transport.Serve(New(Options{}))
}
