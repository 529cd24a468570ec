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

// slowSend is how long a send may take before its endpoint counts as slow.
// A receiver that answers within it keeps its endpoint trusted; one that
// takes longer, or hangs, makes its endpoint untrusted until a send to it
// is quick again.
const slowSend = time.Second

// fairShare is this process's account of who holds its senders, and the
// policy that keeps one endpoint from holding them all:
//
//   - While other endpoints have due work, no endpoint holds more than its
//     room: Concurrency × EndpointShare senders (at least one), counting
//     the claims waiting for a sender as held.
//   - Endpoints not yet trusted (none of its sends has finished in this
//     process yet, or one took longer than slowSend, or one has been under
//     way longer than that) share half of the senders between them
//     (at least one room): so a handful of endpoints that hang cannot take
//     every sender, and a new endpoint gets one.
//   - A trusted endpoint may use every sender when the others have nothing
//     due: a claim that the rooms left short is topped up from the trusted
//     endpoints that filled their room.
//
// Each process keeps its own account: with several processes on one
// PostgreSQL, the rule holds for the senders of each of them.
type fairShare struct {
	senders   int // the process's senders: Concurrency
	room      int // one endpoint's room while others have due work
	untrusted int // the senders untrusted endpoints share
	now       func() time.Time

	mu        sync.Mutex
	endpoints map[string]*endpointLoad
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
}

func newFairShare(senders int, share float64, now func() time.Time) *fairShare {
	room := max(1, int(math.Floor(float64(senders)*share)))
	return &fairShare{
		senders:   senders,
		room:      room,
		untrusted: max(room, (senders+1)/2),
		now:       now,
		endpoints: map[string]*endpointLoad{},
	}
}

// trusted says whether e's sends have been quick: one finished within
// slowSend, and none under way has taken longer.
func (l *endpointLoad) trusted(now time.Time) bool {
	if l.lastTook <= 0 || l.lastTook >= slowSend {
		return false
	}
	for _, s := range l.sending {
		if now.Sub(s) >= slowSend {
			return false
		}
	}
	return true
}

// rooms is the share of a claim while other endpoints may have due work:
// each endpoint up to its room, the untrusted ones within what they share.
func (f *fairShare) rooms() *storage.ClaimShare {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	untrustedHeld := 0
	for _, l := range f.endpoints {
		if !l.trusted(now) {
			untrustedHeld += l.held
		}
	}
	left := max(0, f.untrusted-untrustedHeld)
	// Default is the room of an endpoint this process does not know, which
	// is untrusted.
	s := &storage.ClaimShare{Default: min(f.room, left), Room: map[string]int{}}
	for id, l := range f.endpoints {
		trusted := l.trusted(now)
		if l.held == 0 && trusted && left >= f.room {
			continue // its room is the default
		}
		r := max(0, f.room-l.held)
		if !trusted {
			r = min(r, left)
		}
		s.Room[id] = r
	}
	return s
}

// topUp is the share of a claim that rooms left short: the trusted
// endpoints that filled their room may take the rest; nil when none did.
func (f *fairShare) topUp() *storage.ClaimShare {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	var s *storage.ClaimShare
	for id, l := range f.endpoints {
		if l.held >= f.room && l.held < f.senders && l.trusted(now) {
			if s == nil {
				s = &storage.ClaimShare{Room: map[string]int{}}
			}
			s.Room[id] = f.senders - l.held
		}
	}
	return s
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

// sent notes that the send to endpoint that started at start took took.
func (f *fairShare) sent(endpoint string, start time.Time, took time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.endpoints[endpoint]; l != nil {
		if i := slices.Index(l.sending, start); i >= 0 {
			l.sending = slices.Delete(l.sending, i, i+1)
		}
		l.lastTook = took
	}
}

// done ends one claim of endpoint: sent, given back or failed before a
// send. An endpoint none of whose sends has finished is forgotten once it
// holds nothing; the others are kept, for whether they are trusted.
func (f *fairShare) done(endpoint string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.endpoints[endpoint]
	if l == nil {
		return
	}
	l.held--
	if l.held <= 0 && l.lastTook == 0 {
		delete(f.endpoints, endpoint)
	}
}
