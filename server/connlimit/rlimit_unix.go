//go:build unix

package connlimit

import "syscall"

// FDLimit is how many descriptors this process may open (the soft
// RLIMIT_NOFILE), or 0 when it cannot be read.
func FDLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	// The field's type differs between systems.
	return uint64(rl.Cur)
}
