// Package testwait is the one way the server module's tests wait for
// something that happens in its own time: a delivery reaching a state, a
// process starting, a listener coming back. It is for tests and test
// helpers only; the product must not link it (layout_test.go holds that).
//
// A condition says what is still wrong as an error, so that a test that
// gives up says what it was waiting for and what it saw last, not only
// that time ran out.
package testwait

import (
	"testing"
	"time"
)

// The pause between two calls of a condition starts short, so that a
// condition that holds almost at once costs almost nothing, and grows to a
// bound, so that a long wait does not busy a loaded machine with queries.
const (
	firstPause = time.Millisecond
	maxPause   = 20 * time.Millisecond
)

// For calls cond until it returns nil. If max passes first, it fails the
// test with cond's last error. cond runs on the caller's goroutine, so it
// may itself fail the test on an error that waiting cannot cure.
func For(t testing.TB, max time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(max)
	pause := firstPause
	for {
		err := cond()
		if err == nil {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("gave up after %s: %v", max, err)
			return // for a testing.TB whose Fatalf returns
		}
		// The last call comes at the deadline, not a pause past it.
		time.Sleep(min(pause, left))
		pause = min(2*pause, maxPause)
	}
}
