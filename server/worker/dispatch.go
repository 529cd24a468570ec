package worker

import (
	"sync"
	"time"
)

// dispatch is where claims wait for a sender: one queue per endpoint. A
// sender that comes free takes the next claim of the endpoint with the
// fewest sends in flight, the one served longest ago among equals, so a
// claim of an endpoint that has just become due waits for the next sender
// that comes free, never behind another endpoint's backlog. (A single
// queue in claim order put a healthy endpoint's deliveries behind a full
// batch of endpoints answering in 950 ms, for seconds; issue 34.)
//
// Past shared sends in flight, the senders left are a reserve for the
// endpoints with light work: none in flight, and what they have waiting
// would take at most lightWork at the pace of their last send (one claim,
// for an endpoint with no send finished yet). An endpoint whose receiver
// takes longer than that, or hangs, never takes them, backlog or not: an
// endpoint that becomes due now and then, or whose receiver answers in
// milliseconds, finds a sender free within lightWork, unless as many new
// endpoints hold every one. The rule has no edge a receiver can aim
// under: answering faster only makes the work it may send from the
// reserve, one request at a time, shorter.
type dispatch struct {
	shared int
	// took is how long an endpoint's last send took (0: none known).
	took func(endpoint string) time.Duration

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
	// sleeping counts the senders waiting for a claim they may start.
	sleeping int
	// starved hears a sender go to sleep while claims wait that it may
	// not start: every waiting claim is of an endpoint at its limit, so
	// the sender is free for an endpoint with nothing waiting, which the
	// claimer may have to claim for (see Pool.claimLoop).
	starved chan struct{}
}

// lightWork bounds the work an endpoint with none in flight may have
// waiting and still take a reserve sender: its claims waiting, each
// taking as long as its last send.
const lightWork = 100 * time.Millisecond

func newDispatch(shared int, took func(endpoint string) time.Duration) *dispatch {
	if took == nil {
		took = func(string) time.Duration { return 0 }
	}
	d := &dispatch{shared: shared, took: took, waiting: map[string][]queued{}, inFlight: map[string]int{}, starved: make(chan struct{}, 1)}
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
		if d.queued > 0 {
			select {
			case d.starved <- struct{}{}:
			default:
			}
		}
		d.sleeping++
		d.cond.Wait()
		d.sleeping--
	}
}

// starving reports whether a sender waits while every claim waiting is
// one it may not start.
func (d *dispatch) starving() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sleeping > 0 && d.queued > 0 && d.next() < 0
}

// waitingEndpoints is the endpoints with a claim waiting for a sender:
// no more than the claims queued.
func (d *dispatch) waitingEndpoints() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]bool, len(d.turns))
	for _, id := range d.turns {
		out[id] = true
	}
	return out
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
		if d.busy >= d.shared && (n > 0 || !d.light(id)) {
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

// light reports whether what endpoint has waiting is light work (see
// dispatch): claims its last send's pace sends within lightWork, or, for
// an endpoint with no send finished yet, one claim.
func (d *dispatch) light(endpoint string) bool {
	n := len(d.waiting[endpoint])
	took := d.took(endpoint)
	if took == 0 {
		return n <= 1
	}
	return time.Duration(n)*took <= lightWork
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
