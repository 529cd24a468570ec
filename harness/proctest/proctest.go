// Package proctest finds and kills the processes tests start by hand, such
// as a transport plugin the host launched, through /proc. It imports
// nothing of the server, so any package's tests may use it, the plugin
// host's own among them.
package proctest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// KillExecutable SIGKILLs every process running the executable at path,
// which may have been removed already, and says how many it killed.
func KillExecutable(path string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	killed := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || (exe != path && exe != path+" (deleted)") {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed, nil
}
