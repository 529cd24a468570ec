package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// load is what a test's fairShare knows of one endpoint.
type load struct {
	// took is how long its last finished send took; 0 for none.
	took time.Duration
	// sendingFor is how long a send of it has been under way; 0 for none.
	// That send's claim is one of held.
	sendingFor time.Duration
	// held counts its claims not yet over.
	held int
}

// shareOf is a fairShare of 16 senders and a queue of 64 at the default
// share, so one endpoint's room, and what the slow ones share, is 4 and
// what one quick endpoint may hold alone is 80. Its clock stands still at
// now; each endpoint has the history and the claims its load says, built
// through the calls the pool makes.
func shareOf(t *testing.T, now time.Time, loads map[string]load) *fairShare {
	t.Helper()
	f := newFairShare(16, 64, DefaultEndpointShare, func() time.Time { return now })
	if f.room != 4 || f.slow != 4 || f.most != 80 {
		t.Fatalf("a share of 16 senders and a queue of 64: room %d, slow %d, most %d; want 4, 4, 80", f.room, f.slow, f.most)
	}
	for id, l := range loads {
		claim := []storage.Claim{{Delivery: storage.Delivery{EndpointID: id}}}
		if l.took > 0 {
			start := now.Add(-time.Minute)
			f.claimed(claim)
			f.sending(id, start)
			f.sent(id, start, l.took, true)
			f.done(id)
		}
		for range l.held {
			f.claimed(claim)
		}
		if l.sendingFor > 0 {
			f.sending(id, now.Add(-l.sendingFor))
		}
	}
	return f
}

// A quick endpoint's room, what it may take while others have due work,
// is its share less what it already holds; only its top-up, taken when
// the rooms leave part of a claim unused, reaches to what one endpoint may
// hold alone. A room that ignored the claims held would let a quick
// endpoint take its whole share again in every claim while it still holds
// the last, and crowd out the others.
func TestFairShareAQuickEndpointsRoomIsLessWhatItHolds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		held     int
		sending  time.Duration
		wantRoom int
	}{
		{held: 0, wantRoom: 4},
		{held: 1, wantRoom: 3},
		{held: 3, wantRoom: 1},
		{held: 4, wantRoom: 0},
		{held: 10, wantRoom: 0},
		// A send under way for less than slowSend leaves it quick.
		{held: 2, sending: slowSend / 2, wantRoom: 2},
	} {
		t.Run(fmt.Sprintf("holding %d, sending for %s", tc.held, tc.sending), func(t *testing.T) {
			t.Parallel()
			f := shareOf(t, now, map[string]load{"quick": {took: 10 * time.Millisecond, sendingFor: tc.sending, held: tc.held}})
			s := f.claimShare()
			if got := s.RoomOf("quick"); got != tc.wantRoom {
				t.Errorf("holding %d claims, the quick endpoint's room is %d, want %d (its 4 less what it holds)", tc.held, got, tc.wantRoom)
			}
			if got, want := s.Most("quick"), f.most-tc.held; got != want {
				t.Errorf("holding %d claims, the most the quick endpoint may take is %d, want %d (80 less what it holds)", tc.held, got, want)
			}
		})
	}
}

// The slow endpoints share one room between them, and what they hold
// already counts against it: a claim gives them only what their claims
// under way leave of it, the least-holding first. A shared room that
// ignored what they hold would hand them the whole of it in every claim,
// and endpoints that hang could take every sender, one claim at a time.
func TestFairShareSlowEndpointsShareWhatTheirClaimsLeaveOfOneRoom(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const slowTook = 2 * slowSend
	for _, tc := range []struct {
		name  string
		loads map[string]load
		// want is the room of each slow endpoint.
		want map[string]int
	}{
		{
			name:  "holding nothing: the room split between them",
			loads: map[string]load{"a": {took: slowTook}, "b": {took: slowTook}},
			want:  map[string]int{"a": 2, "b": 2},
		},
		{
			name:  "one holds three of the four: the one left goes to the other",
			loads: map[string]load{"a": {took: slowTook, held: 3}, "b": {took: slowTook}},
			want:  map[string]int{"a": 0, "b": 1},
		},
		{
			name:  "together they hold the room: nothing more for either",
			loads: map[string]load{"a": {took: slowTook, held: 2}, "b": {took: slowTook, held: 2}},
			want:  map[string]int{"a": 0, "b": 0},
		},
		{
			name:  "one alone holds three: one more",
			loads: map[string]load{"a": {took: slowTook, held: 3}},
			want:  map[string]int{"a": 1},
		},
		{
			// A send under way past slowSend makes an endpoint slow
			// whose last send was quick, and its claims count.
			name: "a quick endpoint hanging on a send holds three: the one left goes to the other",
			loads: map[string]load{
				"hung": {took: 10 * time.Millisecond, sendingFor: 2 * slowSend, held: 3},
				"b":    {took: slowTook},
			},
			want: map[string]int{"hung": 0, "b": 1},
		},
		{
			name: "a quick endpoint's claims do not count against the slow room",
			loads: map[string]load{
				"quick": {took: 10 * time.Millisecond, held: 4},
				"a":     {took: slowTook, held: 1},
			},
			want: map[string]int{"a": 3},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := shareOf(t, now, tc.loads).claimShare()
			for id, want := range tc.want {
				if got := s.RoomOf(id); got != want {
					t.Errorf("slow endpoint %s holding %d: room %d, want %d", id, tc.loads[id].held, got, want)
				}
				if top := s.TopUp[id]; top != 0 {
					t.Errorf("slow endpoint %s has a top-up of %d, want none", id, top)
				}
			}
		})
	}
}

// The account keeps an endpoint that holds nothing only for a while after
// its last claim ended: a quick one for forgetQuick, a slow one for
// forgetSlow, one that holds a claim for as long as it does. So a claim's
// share costs the endpoints sent to lately, not every endpoint ever sent
// to. A forgotten endpoint is new again: one sender (the default room).
func TestFairShareForgetsEndpointsIdleForAWhile(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name      string
		load      load
		idleFor   time.Duration
		remembers bool
	}{
		{"a quick endpoint, just idle", load{took: 10 * time.Millisecond}, forgetQuick - time.Second, true},
		{"a quick endpoint, idle for forgetQuick", load{took: 10 * time.Millisecond}, forgetQuick, false},
		{"a slow endpoint, idle for forgetQuick", load{took: 5 * time.Second}, forgetQuick, true},
		{"a slow endpoint, idle for forgetSlow", load{took: 5 * time.Second}, forgetSlow, false},
		{"a quick endpoint holding a claim, long after", load{took: 10 * time.Millisecond, held: 1}, 2 * forgetSlow, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			now := start
			f := shareOf(t, now, map[string]load{"ep_a": c.load})
			f.now = func() time.Time { return now }
			now = now.Add(c.idleFor)
			s := f.claimShare()
			_, kept := f.endpoints["ep_a"]
			_, roomed := s.Room["ep_a"]
			if kept != c.remembers {
				t.Fatalf("after %s, the account keeps the endpoint: %v, want %v", c.idleFor, kept, c.remembers)
			}
			if !kept && (roomed || s.RoomOf("ep_a") != 1) {
				t.Fatalf("a forgotten endpoint has room %d (its own: %v), want the default, 1", s.RoomOf("ep_a"), roomed)
			}
		})
	}
}
