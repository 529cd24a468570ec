// Command hymical-plugin-mqtt is the MQTT 3.1.1 transport plugin
// of the Hymical delivery server: it publishes each signed message, in a JSON
// envelope with its webhook headers, to the endpoint's topic with QoS 1 and
// reports delivered once the broker has sent its PUBACK. The host starts it; run by hand it only
// says so.
//
// Install it as hymical-plugin-mqtt in the server's plugin directory. The
// logic lives in package mqtttransport.
package main

import "github.com/hymical/hymical/plugins/mqtt/mqtttransport"

func main() {
	mqtttransport.ServePlugin()
}
