package postgres

// ClaimSQL lets the plan test EXPLAIN the exact statement DeliveryClaim runs.
const ClaimSQL = claimSQL

// EventBatches reports how many batches of creates s has taken and how
// many creates wait for one.
func EventBatches(s *Store) (batches, waiting int) { return s.events.Stats() }

// FanOutLockKey lets a test hold the fan-out lock as a create does.
const FanOutLockKey = fanOutLockKey

// WakeChannel lets a test listen for the wake-ups as another process does.
const WakeChannel = wakeChannel

// FanOutEndpointsSQL lets the plan test EXPLAIN the exact read a batch of
// creates makes of its endpoints.
const FanOutEndpointsSQL = fanOutEndpointsSQL

// HeadsSQL and ProbeSQL let the plan test EXPLAIN the share claim's walk of
// the queue heads and its probe of their endpoints.
const (
	HeadsSQL = headsSQL
	ProbeSQL = probeSQL
)
