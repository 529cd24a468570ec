//go:build unix && !linux

package pluginhost

import (
	"os"
	"syscall"
)

// procAttr puts a plugin in a process group of its own, which the host
// kills whole. Plugins built on the SDK's Serve exit on their own when the
// host dies; no kernel help is asked for here.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// killGroup SIGKILLs the process group p leads, and p itself should it
// have left it.
func killGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
}
