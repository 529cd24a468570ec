// Package proctest finds and kills the processes tests start by hand, such
// as a transport plugin the host launched, through /proc. It imports
// nothing of the server, so any package's tests may use it, the plugin
// host's own among them.
package proctest

import (
	"bytes"
	"errors"
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

// Alive lists the processes running the executable at path that have not
// ended (see Ended).
func Alive(path string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var alive []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || (exe != path && exe != path+" (deleted)") || Ended(pid) {
			continue
		}
		alive = append(alive, pid)
	}
	return alive, nil
}

// Ended reports whether process pid has ended: it is gone, or it is a
// zombie, which an orphan's new parent (PID 1 in some containers) may
// never reap.
func Ended(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state …, and comm may hold spaces or parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
