// Command hymical-plugin-nats is the NATS JetStream transport plugin of the
// Hymical delivery server: it publishes each signed message to the
// endpoint's JetStream subject and reports delivered only once JetStream
// has acknowledged storing it. The host starts it; run by hand it only says
// so.
//
// Install it as hymical-plugin-nats in the server's plugin directory. The
// logic lives in package natstransport.
package main

import "github.com/hymical/hymical/plugins/nats/natstransport"

func main() {
	natstransport.ServePlugin()
}
