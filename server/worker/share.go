package worker

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hymical/hymical/storage"
)

// DefaultEndpointShare is the fraction of a process's senders one endpoint
// may hold while other endpoints have due work.
const DefaultEndpointShare = 0.25

// forgetQuick and forgetSlow are how long this process remembers the pace
// of an endpoint that holds nothing, after its last claim ended. The
// account is then O(endpoints sent to lately), not O(every endpoint ever
// sent to): after delivering to 10,000 endpoints, every claim walked all of
// them, and an idle serve kept spending a core's 7% on it. A quick endpoint
// forgotten is new again, with one sender until a send to it ends; a slow
// one is kept longer, past the early retries of a receiver that hangs, so
// that it does not come back as new, with a sender of its own outside what
// the slow endpoints share.
const (
	forgetQuick = time.Minute
	forgetSlow  = 15 * time.Minute
)

// slowSend is how long a send may take before its endpoint counts as slow
// (see fairShare): a receiver that answers within it is quick; one that
// takes longer, or hangs, is slow until a send to it is quick again.
const slowSend = time.Second

// fairShare is this process's account of who holds its senders, and the
// policy that keeps one endpoint from holding them all. Each endpoint is, in
// this process:
//
//   - new: none of its sends has finished yet. It may hold one sender until
//     one does, so a flood of endpoints nobody knows yet cannot fill the
//     senders with requests that may hang.
//   - quick: its last send finished within slowSend and none under way has
//     taken longer. It may hold its room, Concurrency × EndpointShare
//     senders (at least one), while other endpoints have due work; what a
//     claim finds too little else due for is topped up from the quick
//     endpoints, each up to every sender and a full queue in front of
//     them, so one alone keeps every sender busy.
//   - slow: its last send took slowSend or more, or one under way has. All
//     slow endpoints together hold at most one room, so a handful that hang
//     cannot take the senders from the rest.
//
// Claims count as held from the claim until their send (or the claim given
// back) is over. Each process keeps its own account: with several
// processes on one PostgreSQL, the rule holds for the senders of each.
type fairShare struct {
	most int // what one quick endpoint may hold alone: senders and queue
	room int // one endpoint's room while others have due work
	slow int // the senders slow endpoints share: one room
	now  func() time.Time

	mu        sync.Mutex
	endpoints map[string]*endpointLoad
	// listed holds the loads of the endpoints a claim's share names: those
	// that hold claims, and the slow ones. A quick endpoint that holds
	// nothing is left to the share's Idle lookup, asked only of the
	// endpoints a claim looks at, so building a share costs the endpoints
	// in flight, not every endpoint known: at 10,000 endpoints that walk
	// was a fifth of a drain's CPU on SQLite.
	listed map[string]*endpointLoad
	// swept is when the forgotten endpoints were last let go.
	swept time.Time
	// ended counts the claims that ended (done), so the claimer can tell
	// whether one ended while it claimed with rooms read before.
	ended uint64
	// capped is set while the claimer waits after a claim that the share
	// may have left due deliveries behind in (see Pool.claim): then the
	// end of any claim may make room for them, and wakes it.
	capped bool
}

// endpointLoad is what this process knows of one endpoint.
type endpointLoad struct {
	// held counts its claims from the claim until their send (or the claim
	// given back) is over.
	held int
	// sending holds when each of its sends under way started.
	sending []time.Time
	// lastTook is how long its last finished send took; 0 before any.
	lastTook time.Duration
	// idleSince is when its last claim ended, while it holds none.
	idleSince time.Time
}

// forgotten reports whether an endpoint that holds nothing has been idle
// long enough at now to be forgotten.
func (l *endpointLoad) forgotten(now time.Time) bool {
	if l.held > 0 {
		return false
	}
	after := forgetQuick
	if l.lastTook >= slowSend {
		after = forgetSlow
	}
	return now.Sub(l.idleSince) >= after
}

// endpointPace is what an endpoint is in this process; see fairShare.
type endpointPace int

const (
	paceNew endpointPace = iota
	paceQuick
	paceSlow
)

func (l *endpointLoad) pace(now time.Time) endpointPace {
	for _, s := range l.sending {
		if now.Sub(s) >= slowSend {
			return paceSlow
		}
	}
	switch {
	case l.lastTook == 0:
		return paceNew
	case l.lastTook >= slowSend:
		return paceSlow
	}
	return paceQuick
}

// newFairShare is the share of a process with senders senders and a queue
// of claims waiting for them that holds queued.
func newFairShare(senders, queued int, share float64, now func() time.Time) *fairShare {
	room := max(1, int(math.Floor(float64(senders)*share)))
	return &fairShare{
		most:      senders + queued,
		room:      room,
		slow:      room,
		now:       now,
		endpoints: map[string]*endpointLoad{},
		listed:    map[string]*endpointLoad{},
	}
}

// claimShare is the share of the next claim. Its rooms are for while other
// endpoints may have due work: one sender for a new endpoint (and for one
// this process does not know), each other endpoint up to its room, the
// slow ones within what they share. Its top-ups are for what the rooms
// leave of the claim: past its room, a quick endpoint may take up to what
// one endpoint may hold alone.
func (f *fairShare) claimShare() *storage.ClaimShare {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if now.Sub(f.swept) >= forgetQuick/4 {
		f.swept = now
		for id, l := range f.endpoints {
			if l.forgotten(now) {
				delete(f.endpoints, id)
				delete(f.listed, id)
			}
		}
	}
	slowHeld := 0
	for _, l := range f.listed {
		if l.pace(now) == paceSlow {
			slowHeld += l.held
		}
	}
	slowLeft := max(0, f.slow-slowHeld)
	s := &storage.ClaimShare{Default: 1, Room: map[string]int{}, Idle: f.idle}
	var slow []string
	for id, l := range f.listed {
		switch l.pace(now) {
		case paceNew:
			s.Room[id] = max(0, 1-l.held)
		case paceQuick:
			if l.held > 0 {
				s.Room[id] = max(0, f.room-l.held)
			} else if f.room != 1 {
				s.Room[id] = f.room
			}
			if top := f.most - l.held - s.RoomOf(id); top > 0 {
				if s.TopUp == nil {
					s.TopUp = map[string]int{}
				}
				s.TopUp[id] = top
			}
		case paceSlow:
			s.Room[id] = 0
			slow = append(slow, id)
		}
	}
	// What the slow endpoints may still hold is one budget between them:
	// handed out a sender at a time, to those holding least first, so one
	// claim cannot give each of them the whole of it.
	slices.SortFunc(slow, func(a, b string) int { return f.listed[a].held - f.listed[b].held })
	for given := true; slowLeft > 0 && given; {
		given = false
		for _, id := range slow {
			if slowLeft == 0 {
				break
			}
			if f.listed[id].held+s.Room[id] < f.room {
				s.Room[id]++
				slowLeft--
				given = true
			}
		}
	}
	return s
}

// newcomerShare is the share of a claim made while the senders' queue is
// more than half full (see Pool.claimNewcomers): only the endpoints with
// no claim waiting here (waiting lists those that have), and not slow, may take
// anything. One that holds nothing may take its room (one sender for an
// endpoint this process does not know, or new); one with sends in
// flight, what its room leaves, and at least one: the next claim it
// sends, ready when a sender is. What the rooms leave of the claim tops
// each quick one up by what its pace sends within lightWork: an
// endpoint answering in milliseconds gets a queue of its work, one
// answering in 600 ms none, with nothing in between that a receiver can
// aim just under. Those with claims waiting have their supply, and get
// more once the queue drains.
func (f *fairShare) newcomerShare(waiting map[string]bool) *storage.ClaimShare {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	s := &storage.ClaimShare{Default: 1, Room: map[string]int{}, Idle: f.idle}
	for id, l := range f.listed {
		switch {
		case l.pace(now) == paceSlow || waiting[id]:
			s.Room[id] = 0
		case l.pace(now) == paceNew:
			s.Room[id] = max(0, 1-l.held)
		default:
			s.Room[id] = max(1, f.room-l.held)
			top := min(f.most-l.held-s.Room[id], int(lightWork/max(l.lastTook, time.Millisecond)))
			if top > 0 {
				if s.TopUp == nil {
					s.TopUp = map[string]int{}
				}
				s.TopUp[id] = top
			}
		}
	}
	return s
}

// lastTook is how long endpoint's last finished send took, 0 when none is
// known: the dispatch's measure of the work it has waiting.
func (f *fairShare) lastTook(endpoint string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.endpoints[endpoint]; l != nil {
		return l.lastTook
	}
	return 0
}

// idle is the share's Idle lookup: the room and top-up of a quick
// endpoint that holds nothing, as claimShare would list it; not ok for
// one this process does not know (the default room, one sender) or one
// the share lists.
func (f *fairShare) idle(endpoint string) (room, topUp int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.endpoints[endpoint]
	if l == nil || l.held > 0 || l.pace(f.now()) != paceQuick {
		return 0, 0, false
	}
	return f.room, max(0, f.most-f.room), true
}

// maySend reports whether a claim of endpoint that waited in the queue may
// be sent now: not when the endpoint turned slow meanwhile and the slow
// endpoints' sends under way already fill what they share. Such a claim is
// given back unsent, so that the claims queued for an endpoint while it was
// quick do not hold the senders, one timeout after another, when it hangs.
func (f *fairShare) maySend(endpoint string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if l := f.endpoints[endpoint]; l == nil || l.pace(now) != paceSlow {
		return true
	}
	sending := 0
	for _, l := range f.listed { // a slow endpoint with sends holds claims: listed
		if l.pace(now) == paceSlow {
			sending += len(l.sending)
		}
	}
	return sending < f.slow
}

// claimed counts claims as held by their endpoints.
func (f *fairShare) claimed(claims []storage.Claim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range claims {
		l := f.endpoints[c.Delivery.EndpointID]
		if l == nil {
			l = &endpointLoad{}
			f.endpoints[c.Delivery.EndpointID] = l
		}
		l.held++
		f.listed[c.Delivery.EndpointID] = l
	}
}

// sending notes that a send to endpoint started at start.
func (f *fairShare) sending(endpoint string, start time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.endpoints[endpoint]; l != nil {
		l.sending = append(l.sending, start)
	}
}

// sent notes that the send to endpoint that started at start is over
// after took. Only one that made a request (or may have) says how quick the
// receiver is.
func (f *fairShare) sent(endpoint string, start time.Time, took time.Duration, requested bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.endpoints[endpoint]; l != nil {
		if i := slices.Index(l.sending, start); i >= 0 {
			l.sending = slices.Delete(l.sending, i, i+1)
		}
		if requested {
			l.lastTook = took
			if took >= slowSend {
				f.listed[endpoint] = l
			}
		}
	}
}

// done ends one claim of endpoint: sent, given back or failed before a
// send. An endpoint none of whose sends has finished is forgotten once it
// holds nothing; the others are kept, for their pace, until forgotten
// (forgetQuick, forgetSlow). It reports whether
// the claimer waits after a claim the share may have left due deliveries
// behind in: then it should look again, now that there is room.
func (f *fairShare) done(endpoint string) (wake bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended++
	wake = f.capped
	l := f.endpoints[endpoint]
	if l == nil {
		return wake
	}
	l.held--
	if l.held <= 0 {
		switch {
		case l.lastTook == 0:
			delete(f.endpoints, endpoint)
			delete(f.listed, endpoint)
		case l.lastTook < slowSend:
			l.idleSince = f.now()
			delete(f.listed, endpoint)
		default:
			l.idleSince = f.now()
		}
	}
	return wake
}

// endedCount is how many claims have ended so far.
func (f *fairShare) endedCount() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended
}

// waiting notes whether the claimer now waits after a claim the share may
// have left due deliveries behind in, and reports whether a claim ended
// since ended was read: its room was not seen by that claim, so the
// claimer should claim again rather than wait.
func (f *fairShare) waiting(capped bool, ended uint64) (missed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.capped = capped
	return capped && f.ended != ended
}

// filled reports whether a claim made with share s left an endpoint at or
// past the most it could take, so that due deliveries of it may have been
// left behind: an endpoint given nothing, or one that took all it was
// given.
func filled(s *storage.ClaimShare, claims []storage.Claim) bool {
	for id := range s.Room {
		if s.Most(id) == 0 {
			return true
		}
	}
	taken := map[string]int{}
	for _, c := range claims {
		taken[c.Delivery.EndpointID]++
	}
	for id, n := range taken {
		if n >= s.Most(id) {
			return true
		}
	}
	return false
}
