// Command hymical-plugin-kafka is the Kafka transport plugin of the Hymical
// delivery server: it produces each signed message to the endpoint's topic
// with acks=all and the idempotent producer, and reports delivered once
// the brokers have acknowledged it. The host starts it; run by hand it
// only says so.
//
// Install it as hymical-plugin-kafka in the server's plugin directory. The
// logic lives in package kafkatransport.
package main

import "github.com/hymical/hymical/plugins/kafka/kafkatransport"

func main() {
	kafkatransport.ServePlugin()
}
