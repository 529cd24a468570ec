// Command hymical-plugin-redis is the Redis Streams transport plugin of the
// Hymical delivery server: it appends each signed message to the endpoint's
// stream with XADD and reports delivered once Redis has stored the entry.
// The host starts it; run by hand it only says so.
//
// Install it as hymical-plugin-redis in the server's plugin directory. The
// logic lives in package redistransport.
package main

import "github.com/hymical/hymical/plugins/redis/redistransport"

func main() {
	redistransport.ServePlugin()
}
