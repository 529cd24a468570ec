package worker

import "time"

// SetClock makes p read the time from now instead of time.Now, so that a
// test can put the pool's clock ahead of the store's: a claim then reaches
// its sender with less of its lease left, as if it had waited that long in
// the queue. Call it before Run.
func SetClock(p *Pool, now func() time.Time) { p.now = now }
