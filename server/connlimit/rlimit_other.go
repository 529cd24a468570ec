//go:build !unix

package connlimit

// FDLimit is 0, unknown, where there is no RLIMIT_NOFILE to read.
func FDLimit() uint64 { return 0 }
