package transport

import (
	"os"
	"time"
)

// exitWhenOrphaned ends the plugin once the host that started it is gone.
// A host killed with SIGKILL cannot stop its plugins, and go-plugin does
// not notice; the plugin is then re-parented (to init or a subreaper), and
// that change of parent is what this watches for. A plugin left running
// would hold its connections and memory for ever, and be sent nothing.
func exitWhenOrphaned(interval time.Duration) {
	host := os.Getppid()
	for range time.Tick(interval) {
		if os.Getppid() != host {
			os.Exit(2)
		}
	}
}
