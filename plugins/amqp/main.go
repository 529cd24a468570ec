// Command hymical-plugin-amqp is the AMQP 0-9-1 (RabbitMQ) transport plugin
// of the Hymical delivery server: it publishes each signed message to the
// endpoint's exchange with publisher confirms and reports delivered once
// the broker has acknowledged it. The host starts it; run by hand it only
// says so.
//
// Install it as hymical-plugin-amqp in the server's plugin directory. The
// logic lives in package amqptransport.
package main

import "github.com/hymical/hymical/plugins/amqp/amqptransport"

func main() {
	amqptransport.ServePlugin()
}
