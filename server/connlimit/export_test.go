package connlimit

// Waiting is how many connections wait for their first request and how
// many are idle between requests.
func (l *Listener) Waiting() (fresh, idle int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fresh.Len(), l.idle.Len()
}
