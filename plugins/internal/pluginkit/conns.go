package pluginkit

import "sync"

// Conns holds a transport's plugin-wide settings and the connections (or
// clients, or pools) made under them, one per key: a broker URL, a server
// or broker list. One lock guards both, so Configure replaces the settings
// and forgets the connections at once, and no send is handed a connection
// made under settings other than the ones it read. It is safe for
// concurrent use.
//
// Conns never closes a connection itself: Configure and Close hand back
// the ones they forgot, for the transport to close its own way.
type Conns[S any, C comparable] struct {
	// errClosed is what Get says after Close: the transport's own
	// sentinel, which its classify turns into a deferred outcome.
	errClosed error

	mu       sync.Mutex
	settings S
	conns    map[string]C
	closed   bool
}

// NewConns returns a Conns holding initial (the transport's defaults) and
// no connection. errClosed is what Get and Lookup return after Close.
func NewConns[S any, C comparable](initial S, errClosed error) *Conns[S, C] {
	return &Conns[S, C]{errClosed: errClosed, settings: initial, conns: map[string]C{}}
}

// Settings returns the current settings.
func (p *Conns[S, C]) Settings() S {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settings
}

// Configure replaces the settings and forgets every connection, which it
// returns for the caller to close; new ones are made on the next send.
func (p *Conns[S, C]) Configure(next S) []C {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settings = next
	return p.forget()
}

// Close forgets every connection, which it returns for the caller to
// close; Get and Lookup fail from now on.
func (p *Conns[S, C]) Close() []C {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return p.forget()
}

func (p *Conns[S, C]) forget() []C {
	old := make([]C, 0, len(p.conns))
	for _, c := range p.conns {
		old = append(old, c)
	}
	p.conns = map[string]C{}
	return old
}

// Lookup returns the connection for key, if one is made, without making
// one; after Close it returns the errClosed given to NewConns.
func (p *Conns[S, C]) Lookup(key string) (C, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var zero C
	if p.closed {
		return zero, false, p.errClosed
	}
	c, ok := p.conns[key]
	return c, ok, nil
}

// Get returns the connection for key, making it with open on first use.
// Before a connection is made, check (if not nil) is asked, without the
// lock held since it may resolve names: its error is returned and nothing
// is made. open runs with the lock held, so it must not block; it starts
// a connection rather than waiting for one. After Close, Get returns the
// errClosed given to NewConns.
func (p *Conns[S, C]) Get(key string, check func() error, open func() C) (C, error) {
	var zero C
	_, cached, err := p.Lookup(key)
	if err != nil {
		return zero, err
	}
	if !cached && check != nil {
		if err := check(); err != nil {
			return zero, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return zero, p.errClosed
	}
	c, ok := p.conns[key]
	if !ok {
		c = open()
		p.conns[key] = c
	}
	return c, nil
}

// Forget drops key's connection if it is still c, as when making it
// failed and the next send should try again. The caller closes c.
func (p *Conns[S, C]) Forget(key string, c C) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.conns[key]; ok && cur == c {
		delete(p.conns, key)
	}
}

// Len is how many connections are kept.
func (p *Conns[S, C]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}
