// Command hymical-plugin-http is the HTTP transport plugin of the Hymical
// delivery server: it POSTs each signed message to the endpoint's URL and
// reports the outcome. The host starts it; run by hand it only says so.
//
// Install it as hymical-plugin-http in the server's plugin directory. The
// logic lives in package httptransport so it can also run in-process.
package main

import (
	"github.com/hymical/hymical/plugins/http/httptransport"
	"github.com/hymical/hymical/sdk/transport"
)

func main() {
	transport.Serve(httptransport.New(httptransport.Options{}))
}
