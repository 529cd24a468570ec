// Package gctarget holds the Go collector's target that serve runs with,
// so that the bench's in-process phases run the server's parts under the
// same one. It owns that one setting and touches nothing else of the
// runtime.
package gctarget

import (
	"fmt"
	"runtime/debug"
)

// Serve is the collector's target (GOGC) that serve and the bench run
// with unless GOGC is set in their environment. Go's default, 100,
// collects each time the heap doubles; serve's live heap is small (tens of
// MiB) and it allocates per request and per delivery, so at 100 it
// collects many times a second flat out. At 400, perf put the collector's
// marking at 1.1 % of serve's CPU instead of 5.0 %, and allocation and
// stack growth a further 2.3 points lower, for about 11 MiB more resident
// memory in the same run (docs/performance.md).
const Serve = 400

// Apply sets Serve as the process's target unless the environment chose
// one with GOGC (which the runtime has applied already), and returns a
// line for a banner saying which one is in force.
func Apply(getenv func(string) string) string {
	if v := getenv("GOGC"); v != "" {
		return fmt.Sprintf("GOGC=%s, from the environment", v)
	}
	debug.SetGCPercent(Serve)
	return fmt.Sprintf("GOGC=%d, serve's default (set GOGC to choose another; GOMEMLIMIT caps the heap)", Serve)
}
