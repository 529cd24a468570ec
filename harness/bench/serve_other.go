//go:build !linux

package bench

import "syscall"

// serveSysProcAttr: only Linux can stop a child when its parent dies.
func serveSysProcAttr() *syscall.SysProcAttr { return nil }
