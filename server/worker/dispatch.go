package worker

import "sync"

// dispatch is where claims wait for a sender: one queue per endpoint. A
// sender that comes free takes the next claim of the endpoint with the
// fewest sends in flight, the one served longest ago among equals, so a
// claim of an endpoint that has just become due waits for the next sender
// that comes free, never behind another endpoint's backlog. (A single
// queue in claim order put a healthy endpoint's deliveries behind a full
// batch of endpoints answering in 950 ms, for seconds; issue 34.)
//
// Past shared sends in flight, the senders left are a reserve for the
// endpoints that hold nothing else here: none in flight and no other claim
// waiting. An endpoint with a backlog, however slow its receiver, always
// has another claim waiting, so it cannot take them: an endpoint that
// becomes due now and then finds a sender free at once, unless as many
// such endpoints hold every one.
type dispatch struct {
	shared int

	mu   sync.Mutex
	cond *sync.Cond
	// waiting holds each endpoint's claims in the order claimed; turns is
	// the endpoints that have some, in the order they are served.
	waiting map[string][]queued
	turns   []string
	queued  int
	// inFlight counts each endpoint's claims taken by a sender and not yet
	// done; busy is their sum.
	inFlight map[string]int
	busy     int
	closed   bool
}

func newDispatch(shared int) *dispatch {
	d := &dispatch{shared: shared, waiting: map[string][]queued{}, inFlight: map[string]int{}}
	d.cond = sync.NewCond(&d.mu)
	return d
}

// add queues claims, each behind its endpoint's earlier ones.
func (d *dispatch) add(claims []queued) {
	if len(claims) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range claims {
		id := q.claim.Delivery.EndpointID
		if len(d.waiting[id]) == 0 {
			d.turns = append(d.turns, id)
		}
		d.waiting[id] = append(d.waiting[id], q)
	}
	d.queued += len(claims)
	d.cond.Broadcast()
}

// take waits for a claim a sender may start and counts it in flight until
// done. Once closed, it hands out whatever is left, to be given back
// unsent, and then reports false.
func (d *dispatch) take() (queued, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		if i := d.next(); i >= 0 {
			id := d.turns[i]
			q := d.waiting[id][0]
			copy(d.turns[i:], d.turns[i+1:])
			if rest := d.waiting[id][1:]; len(rest) > 0 {
				d.waiting[id] = rest
				// Served: to the back of the turns.
				d.turns[len(d.turns)-1] = id
			} else {
				delete(d.waiting, id)
				d.turns = d.turns[:len(d.turns)-1]
			}
			d.queued--
			d.inFlight[id]++
			d.busy++
			return q, true
		}
		if d.closed && d.queued == 0 {
			return queued{}, false
		}
		d.cond.Wait()
	}
}

// next is the index in turns of the endpoint whose next claim a sender
// takes, or -1 when none may start. Closed, any will do.
func (d *dispatch) next() int {
	if d.closed {
		if len(d.turns) > 0 {
			return 0
		}
		return -1
	}
	best := -1
	for i, id := range d.turns {
		n := d.inFlight[id]
		if d.busy >= d.shared && (n > 0 || len(d.waiting[id]) > 1) {
			continue
		}
		if best < 0 || n < d.inFlight[d.turns[best]] {
			best = i
			if n == 0 {
				break
			}
		}
	}
	return best
}

// done ends a claim taken for endpoint.
func (d *dispatch) done(endpoint string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inFlight[endpoint]--; d.inFlight[endpoint] <= 0 {
		delete(d.inFlight, endpoint)
	}
	d.busy--
	// The sender that called goes on to take the claim this makes
	// possible; one more may have become possible (another endpoint's
	// extra send, once fewer than shared are in flight), so one waiting
	// sender looks too. Senders are alike: if it finds nothing, none would.
	d.cond.Signal()
}

// waitingCount is how many claims wait for a sender.
func (d *dispatch) waitingCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.queued
}

// close lets the senders take what is left and then stop.
func (d *dispatch) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	d.cond.Broadcast()
}
