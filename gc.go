package main

import (
	"fmt"
	"runtime/debug"
)

// serveGCPercent is the Go collector's target (GOGC) that serve and bench
// run with unless GOGC is set in their environment. Go's default, 100,
// collects each time the heap doubles; serve's live heap is small (tens of
// MiB) and it allocates per request and per delivery, so at 100 it
// collects many times a second flat out. At 400, perf put the collector's
// marking at 1.1 % of serve's CPU instead of 5.0 %, and allocation and
// stack growth a further 2.3 points lower, for about 11 MiB more resident
// memory in the same run (docs/performance.md).
const serveGCPercent = 400

// setGCPercent applies serveGCPercent unless the environment chose a
// target with GOGC (which the runtime has applied already), and says in a
// line of serve's banner which one is in force.
func setGCPercent(getenv func(string) string) string {
	if v := getenv("GOGC"); v != "" {
		return fmt.Sprintf("GOGC=%s, from the environment", v)
	}
	debug.SetGCPercent(serveGCPercent)
	return fmt.Sprintf("GOGC=%d, serve's default (set GOGC to choose another; GOMEMLIMIT caps the heap)", serveGCPercent)
}
