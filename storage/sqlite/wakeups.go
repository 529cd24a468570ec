package sqlite

import "context"

// Wakeups returns a channel that receives a value, coalesced, after each
// write of this Store that made a delivery due commits, and when a
// delivery it made due later comes due; until ctx ends.
func (s *Store) Wakeups(ctx context.Context) <-chan struct{} {
	return s.wake.Subscribe(ctx)
}
