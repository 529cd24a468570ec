package pluginhost

import (
	"os"
	"syscall"
)

// procAttr puts a plugin in a process group of its own, which the host
// kills whole, and has the kernel SIGKILL it should the host die without
// stopping it (killed with SIGKILL, or crashed): a plugin built without
// the SDK's Serve, which watches for that itself, would otherwise run on.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup SIGKILLs the process group p leads, and p itself should it
// have left it.
func killGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
}
