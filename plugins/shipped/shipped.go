// Package shipped is the list of the transports Hymical ships (amqp, http,
// kafka, mqtt, nats, redis) and the one way to run one of them as a plugin
// process. The hymical command imports it for `hymical plugin NAME`, which
// its plugin host starts as a child process of its own executable; each
// plugins/NAME/main.go calls the same ServePlugin of its transport
// package, so a standalone hymical-plugin-NAME and the built-in one run
// the same code.
//
// It is a package of its own, outside plugins/internal (which Go keeps to
// plugins/), so that the hymical command reaches the transports through
// this one door and nothing under server/ has a reason to.
package shipped

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hymical/hymical/plugins/amqp/amqptransport"
	"github.com/hymical/hymical/plugins/http/httptransport"
	"github.com/hymical/hymical/plugins/kafka/kafkatransport"
	"github.com/hymical/hymical/plugins/mqtt/mqtttransport"
	"github.com/hymical/hymical/plugins/nats/natstransport"
	"github.com/hymical/hymical/plugins/redis/redistransport"
)

// ErrUnknown is Serve's error for a name that is not a shipped transport.
var ErrUnknown = errors.New("not a transport shipped with hymical")

// servers maps each shipped transport's name to what serves it. A function,
// not a package variable, so that no caller can change the list.
func servers() map[string]func() {
	return map[string]func(){
		"amqp":  amqptransport.ServePlugin,
		"http":  httptransport.ServePlugin,
		"kafka": kafkatransport.ServePlugin,
		"mqtt":  mqtttransport.ServePlugin,
		"nats":  natstransport.ServePlugin,
		"redis": redistransport.ServePlugin,
	}
}

// Names returns the shipped transports' names, sorted.
func Names() []string {
	names := make([]string, 0, len(servers()))
	for name := range servers() {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Serve runs the named transport as a plugin process until the host stops
// it, speaking go-plugin's handshake on standard output as
// hymical-plugin-NAME does. Run by hand (without the host's handshake
// cookie in the environment) it prints what it is for and exits the
// process with status 1, as every go-plugin plugin does. A name that is not
// shipped returns an error wrapping ErrUnknown that lists those that are.
func Serve(name string) error {
	serve, ok := servers()[name]
	if !ok {
		return fmt.Errorf("%w: %q; the shipped transports are %s (a plugin of your own runs as its own executable, hymical-plugin-NAME in plugins.dir)",
			ErrUnknown, name, strings.Join(Names(), ", "))
	}
	serve()
	return nil
}
