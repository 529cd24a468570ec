package storage

import (
	"cmp"
	"context"
	"slices"
	"strings"
)

// A claim with a share finds its rows through the endpoints' queue heads:
// one row per endpoint that has had claimable deliveries, holding a
// position in the claim's (due, id) order no later than its first
// claimable one (its head). Every write that makes a delivery claimable
// lowers its endpoint's head, in the same transaction; a claim moves the
// heads of the endpoints it looked at to the first row it left behind. A
// head may be early (a delivery claimed or deferred by another path),
// never late, so walking the due heads in order finds every endpoint with
// due work, and the claim costs the endpoints it looks at, not the
// endpoints that exist or that have work.

// DueHead is an endpoint's queue head as a claim reads it: a position in
// the claim's (due, id) order no later than the endpoint's first claimable
// delivery. Due is in Unix microseconds; ID is a delivery's.
type DueHead struct {
	EndpointID string
	Due        int64
	ID         string
	// Version counts the writes to the head where a store shares it
	// between processes (PostgreSQL): a claim moves a head only if its
	// version is still the one read, so a write that made a delivery
	// claimable since, lowering the head or not, keeps the claim from
	// moving it past that delivery.
	Version int64
}

// before reports whether r comes before position (due, id) in the claim's
// order.
func (r DueRow) before(due int64, id string) bool {
	return r.Due < due || r.Due == due && r.ID < id
}

// DueRow is a claimable (pending, not held) delivery as a claim probes it:
// any due time, so that the row after the claimed ones gives the head.
type DueRow struct {
	ID  string
	Due int64
	// Held is set on a row another transaction holds (PostgreSQL): it
	// counts as taken by it, so the endpoint's next rows go instead, and
	// the endpoint's head stays no later than it.
	Held bool
}

// HeadSource is what PickShare reads from a store, inside the claim's
// transaction.
type HeadSource interface {
	// Heads returns up to n due heads (Due <= now), first by (Due, ID),
	// strictly after after (nil: from the first), leaving out
	// the endpoints in exclude or, when include is not nil, every endpoint
	// not in it, each with its Version. Nothing is locked: a claim moves
	// a head only if its version is still the one read (see DueHead).
	// next is the due head that follows the last returned, or nil when
	// there is none.
	Heads(ctx context.Context, after *DueHead, n int, exclude, include []string) (heads []DueHead, next *DueHead, err error)
	// Now is the claim's clock in Unix microseconds, once Heads was
	// called: on PostgreSQL, without a clock given, the database's.
	Now() int64
	// Probe returns, for each endpoint, its first counts[i] claimable rows
	// that are not Held, in (Due, ID) order, whenever they are due, with
	// the Held ones among them.
	Probe(ctx context.Context, endpoints []string, counts []int) (map[string][]DueRow, error)
}

// SharePick is what a claim with a share takes and how it moves the heads.
type SharePick struct {
	// IDs are the pending rows to claim, oldest due first.
	IDs []string
	// probed holds what was read of each endpoint looked at, and asked
	// how many rows were asked for.
	probed map[string][]DueRow
	asked  map[string]int
	// versions are the heads' versions as the walk read them.
	versions map[string]int64
}

// maxHeadRounds bounds how many times one claim walks on to further heads
// when those it looked at could not fill it with rows it may take: past
// it, the claim takes what it is sure of, and the claimer comes back.
const maxHeadRounds = 8

// PickShare chooses the pending rows a claim of limit with share takes, as
// ClaimShare says: each endpoint's oldest due
// up to its room; of those the oldest, to the limit; then the top-ups'.
// The clock is the source's (HeadSource.Now).
//
// It walks the due heads a limit's worth at a time and probes each
// endpoint's first rows. The endpoints not yet looked at have no row
// before the next head (heads are never late), so every row found before
// it is in the rule's answer as far as the order goes; the walk goes on
// until those fill the claim or no due head is left.
func PickShare(ctx context.Context, src HeadSource, share *ClaimShare, limit int) (SharePick, error) {
	pick := SharePick{probed: map[string][]DueRow{}, asked: map[string]int{}, versions: map[string]int64{}}
	var exclude, include []string
	if share.Default == 0 {
		// Only the endpoints named may give anything: look at theirs.
		include = []string{}
		for id := range share.Room {
			if share.Most(id) > 0 {
				include = append(include, id)
			}
		}
		for id := range share.TopUp {
			if _, named := share.Room[id]; !named && share.Most(id) > 0 {
				include = append(include, id)
			}
		}
		if len(include) == 0 {
			return pick, nil
		}
	} else {
		exclude = []string{}
		for id := range share.Room {
			if share.Most(id) == 0 {
				exclude = append(exclude, id)
			}
		}
	}
	var after *DueHead
	for round := 0; ; round++ {
		heads, next, err := src.Heads(ctx, after, limit, exclude, include)
		if err != nil {
			return pick, err
		}
		if len(heads) > 0 {
			ids, counts := make([]string, len(heads)), make([]int, len(heads))
			for i, h := range heads {
				// One row past what it may give: the claim's new head.
				ids[i], counts[i] = h.EndpointID, min(share.Most(h.EndpointID), limit)+1
				pick.asked[h.EndpointID] = counts[i]
				pick.versions[h.EndpointID] = h.Version
			}
			rows, err := src.Probe(ctx, ids, counts)
			if err != nil {
				return pick, err
			}
			for _, id := range ids {
				pick.probed[id] = rows[id]
			}
			after = &heads[len(heads)-1]
		}
		ids, sure := pickFromProbed(pick.probed, share, limit, src.Now(), next)
		if sure || round+1 == maxHeadRounds || len(heads) == 0 {
			pick.IDs = ids
			return pick, nil
		}
	}
}

// pickFromProbed applies the share's rule to the rows probed: within the
// rooms first, then past them. Endpoints not looked at have no row before
// the head cutoff (nil: there is none), so the rows within the rooms
// before it are the first of the rule's. sure reports whether the pick is
// the rule's answer: those rows fill the claim, or no head is left. When
// it is not, ids holds only those rows, which the answer holds too; the
// top-ups wait until every endpoint's rooms are known.
func pickFromProbed(probed map[string][]DueRow, share *ClaimShare, limit int, now int64, cutoff *DueHead) (ids []string, sure bool) {
	var within, past []DueRow
	for id, rows := range probed {
		var free []DueRow
		for _, r := range rows {
			if !r.Held && r.Due <= now {
				free = append(free, r)
			}
		}
		room := min(share.RoomOf(id), len(free))
		within = append(within, free[:room]...)
		past = append(past, free[room:min(len(free), room+share.TopUpOf(id))]...)
	}
	SortDueRows(within)
	sure = true
	if cutoff != nil {
		if w := beforeCutoff(within, cutoff); len(w) < limit {
			within, past, sure = w, nil, false
		}
	}
	SortDueRows(past)
	within = within[:min(len(within), limit)]
	take := append(within, past[:min(len(past), limit-len(within))]...)
	SortDueRows(take)
	ids = make([]string, len(take))
	for i, r := range take {
		ids[i] = r.ID
	}
	return ids, sure
}

func beforeCutoff(rows []DueRow, cutoff *DueHead) []DueRow {
	n := 0
	for n < len(rows) && rows[n].before(cutoff.Due, cutoff.ID) {
		n++
	}
	return rows[:n]
}

// SortDueRows sorts rows in the claim's (due, id) order.
func SortDueRows(rows []DueRow) {
	slices.SortFunc(rows, func(a, b DueRow) int {
		return cmp.Or(cmp.Compare(a.Due, b.Due), strings.Compare(a.ID, b.ID))
	})
}

// HeadMove is where a claim moves the head of an endpoint it looked at:
// to the first of Rows (those probed) it did not claim (one another
// transaction held, one not due, one past the share), or, when it claimed
// them all, to Fallback: the last of them if the probe was full (more may
// follow), none (nil) if it was not. A head moves only to a row the claim
// saw, so none goes past a row it did not.
type HeadMove struct {
	EndpointID string
	// Version is the head's as the claim read it (see DueHead.Version).
	Version  int64
	Rows     []DueRow
	Fallback *DueRow
}

// Head is where m moves the head once the rows in claimed are claimed.
func (m HeadMove) Head(claimed map[string]bool) *DueRow {
	for _, r := range m.Rows {
		if !claimed[r.ID] {
			return &r
		}
	}
	return m.Fallback
}

// Moves are the heads the pick looked at, in endpoint order.
func (p SharePick) Moves() []HeadMove {
	moves := make([]HeadMove, 0, len(p.probed))
	for id, rows := range p.probed {
		m := HeadMove{EndpointID: id, Version: p.versions[id], Rows: rows}
		free := 0
		for _, r := range rows {
			if !r.Held {
				free++
			}
		}
		if free > 0 && free == p.asked[id] {
			m.Fallback = &rows[len(rows)-1]
		}
		moves = append(moves, m)
	}
	slices.SortFunc(moves, func(a, b HeadMove) int { return strings.Compare(a.EndpointID, b.EndpointID) })
	return moves
}
