//go:build !unix

package pluginhost

import (
	"os"
	"syscall"
)

// procAttr asks for nothing: there are no process groups to use.
func procAttr() *syscall.SysProcAttr { return nil }

// killGroup kills the plugin process; a child it started is not reached.
func killGroup(p *os.Process) { _ = p.Kill() }
