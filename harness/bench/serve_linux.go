package bench

import "syscall"

// serveSysProcAttr has the kernel stop serve when the bench dies without
// stopping it (killed, or a crash), so that no server is left running on
// a bench database nobody will remove.
func serveSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
