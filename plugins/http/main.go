// Command hymical-plugin-http is the HTTP transport plugin of the Hymical
// delivery server: it POSTs each signed message to the endpoint's URL and
// reports the outcome. The host starts it; run by hand it only says so.
//
// Install it as hymical-plugin-http in the server's plugin directory. The
// logic lives in package httptransport, which hymical itself also runs as
// `hymical plugin http`.
package main

import "github.com/hymical/hymical/plugins/http/httptransport"

func main() {
	httptransport.ServePlugin()
}
