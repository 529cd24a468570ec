package worker

import (
	"context"
	"time"

	"github.com/hymical/hymical/storage"
)

// queued is one claim waiting for a sender, with the claim's span context
// and when it was claimed.
type queued struct {
	ctx   context.Context
	claim storage.Claim
	at    time.Time
}

// queuedClaims are claims as they wait for a sender: with the claim's span
// context and when they were claimed.
func queuedClaims(ctx context.Context, claims []storage.Claim, at time.Time) []queued {
	out := make([]queued, len(claims))
	for i, c := range claims {
		out[i] = queued{ctx: ctx, claim: c, at: at}
	}
	return out
}

// claimLoop keeps the senders' queue d topped up until ctx ends: it claims
// a batch once the queue is half empty, claims apart for the endpoints
// with nothing waiting here while the queue stays full, and between claims
// waits for something to become due. taken hears a sender take a claim;
// record is Run's recording context, which the claims' spans descend from.
func (p *Pool) claimLoop(ctx, record context.Context, d *dispatch, taken <-chan struct{}) {
	// Subscribed before the first claim, so nothing that becomes due
	// after it goes unheard.
	wake := p.store.Wakeups(ctx)
	backoff := p.cfg.PollInterval
	low := p.cfg.BatchSize / 2
	var lastClaim time.Time
	var lastTook time.Duration
	// With the share off, claims take the oldest due whoever they go to:
	// there are no newcomers to claim for apart.
	newcomers, starved := wake, d.starved
	if p.cfg.EndpointShare >= 1 {
		newcomers, starved = nil, nil
	}
	// newcomersDue fires when a claim for the endpoints with nothing
	// waiting here is to be made; nil while none is. armed says something
	// may be due for them: a wake-up or the poll came since such a claim
	// last found nothing.
	var newcomersDue <-chan time.Time
	armed := false
	schedule := func() {
		if newcomersDue == nil {
			newcomersDue = time.After(p.newcomerGap(lastClaim, lastTook, d.starving()))
		}
	}
	poll := time.NewTicker(p.cfg.PollInterval)
	defer poll.Stop()
	for {
		for d.waitingCount() > low {
			select {
			case <-taken:
			case <-newcomers:
				// Something became due while the senders have plenty to
				// do. If the queue does not drain soon (a claim of the
				// main loop would take it), claim what endpoints with
				// nothing waiting here have due, so that it waits for its
				// turn at a sender, not for the queue to drain.
				armed = true
				schedule()
			case <-starved:
				// A sender is free, but every claim waiting is of an
				// endpoint at its limit: what the others have due is for
				// it, at once, not once the queue drains at the pace of
				// the endpoints holding it up.
				if armed {
					schedule()
				}
			case <-poll.C:
				// A retry may have come due, which wakes nobody.
				if starved != nil && d.starving() {
					armed = true
					schedule()
				}
			case <-newcomersDue:
				newcomersDue = nil
				if gap := p.newcomerGap(lastClaim, lastTook, d.starving()); gap > 0 {
					// A claim was made meanwhile: wait from it.
					newcomersDue = time.After(gap)
					continue
				}
				lastClaim = p.now()
				var found int
				lastTook, found = p.claimNewcomers(ctx, record, d)
				// One that found some may have left more behind.
				if armed = found > 0; armed && d.starving() {
					schedule()
				}
			case <-ctx.Done():
				return
			}
		}
		// The claim below takes what the newcomers' would have.
		newcomersDue = nil
		if ctx.Err() != nil {
			return
		}
		n := p.cfg.BatchSize - d.waitingCount()
		claimStart := p.now()
		// The claim statement is not cut short by shutdown: cancelled
		// midway, it could commit claims this process never hears of, and
		// those would wait out their lease. Claims that arrive after
		// shutdown began are given back unspent by the senders.
		stmtCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.Lease)
		ended := p.share.endedCount()
		claims, capped, err := p.claim(stmtCtx, n)
		cancel()
		at := p.now()
		claimCtx := p.claimSpan(record, n, claims, err, claimStart, at)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// The database is away, or full: nothing is lost (every
			// delivery is still in it), so wait and try again, backing off
			// to a cap.
			p.observe(err)
			p.log.Error("claiming deliveries failed; retrying", "error", err, "retry_in", backoff)
			backoff = min(backoff*2, 30*time.Second)
			if !sleep(ctx, backoff) {
				return
			}
			continue
		}
		backoff = p.cfg.PollInterval
		lastClaim, lastTook = claimStart, at.Sub(claimStart)
		d.add(queuedClaims(claimCtx, claims, at))
		// A full claim may have left more behind: claim again at once. A
		// short one drained what was due, but for what the fair share
		// kept back: wait for a wake-up, the end of a claim when the share
		// kept some back, or the poll. Each brings one claim, so however
		// many arrive the claimer never spins.
		if len(claims) >= n {
			continue
		}
		if p.share.waiting(capped, ended) {
			// A claim ended while this one read the rooms from before.
			continue
		}
		if !p.idle(ctx, wake, claimStart, at.Sub(claimStart)) {
			return
		}
	}
}

// newcomerWait is how long after the last claim, while the senders' queue
// stays more than half full, a wake-up brings a claim for the endpoints
// holding nothing here. When the senders drain the queue quickly, the main
// loop's next claim comes first and takes their deliveries, so a stream of
// submissions costs no claims apart; when they do not (receivers that take
// their time), newcomers wait this long at most for a claim of their own.
const newcomerWait = 50 * time.Millisecond

// newcomerGap is how long from now a claim for the newcomers waits after a
// claim that started at last and took took: newcomerWait, or only
// minClaimGap while a sender is starving (free, with nothing it may
// start), and at least claimGapFactor times took, as idle spaces claims.
func (p *Pool) newcomerGap(last time.Time, took time.Duration, starving bool) time.Duration {
	wait := newcomerWait
	if starving {
		wait = minClaimGap
	}
	return max(wait, claimGapFactor*took) - p.now().Sub(last)
}

// claimNewcomers claims, while the senders' queue is more than half full,
// what the endpoints with no claim waiting in this process have due (see
// fairShare.newcomerShare), up to half a batch and at most two batches
// queued in all, and queues it for the senders. It returns how long the
// claim took and how many it claimed. A claim that fails is logged; the
// next claim of the main loop tries again.
func (p *Pool) claimNewcomers(ctx, record context.Context, d *dispatch) (time.Duration, int) {
	n := min(max(1, p.cfg.BatchSize/2), 2*p.cfg.BatchSize-d.waitingCount())
	if n <= 0 {
		return 0, 0
	}
	start := p.now()
	stmtCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.Lease)
	claims, err := p.store.DeliveryClaim(stmtCtx, storage.DeliveryClaimParams{Limit: n, Lease: p.cfg.Lease, Share: p.share.newcomerShare(d.waitingEndpoints())})
	cancel()
	at := p.now()
	claimCtx := p.claimSpan(record, n, claims, err, start, at)
	if err != nil {
		if ctx.Err() == nil {
			p.observe(err)
			p.log.Error("claiming deliveries of endpoints with none waiting failed; the next claim tries again", "error", err)
		}
		return at.Sub(start), 0
	}
	p.share.claimed(claims)
	d.add(queuedClaims(claimCtx, claims, at))
	return at.Sub(start), len(claims)
}

// minClaimGap is the least time between the starts of two claims that a
// wake-up brings. Under a stream of submissions each would otherwise claim
// a delivery or two, every claim a write transaction that, on SQLite,
// takes the one writer from the creates and completions; waiting this
// long lets a few gather per claim, and adds at most this much latency.
const minClaimGap = 5 * time.Millisecond

// claimGapFactor keeps the claims a wake-up brings to at most about a
// third of the time: the gap after a claim is at least this many times
// as long as that claim took, so on SQLite, whose one writer also takes
// the creates and completions, a slow claim is followed by a longer wait.
const claimGapFactor = 3

// idle waits, after a claim that found less than it asked for and started
// at last, until something may be due: a wake-up from the store, the end of
// a claim when the fair share kept some back, or the poll interval
// passing; then at least until minClaimGap, or claimGapFactor times took
// (how long that claim took), after last. It returns false when ctx ends.
func (p *Pool) idle(ctx context.Context, wake <-chan struct{}, last time.Time, took time.Duration) bool {
	poll := time.NewTimer(p.cfg.PollInterval)
	defer poll.Stop()
	select {
	case <-wake:
	case <-p.freed:
	case <-poll.C:
	case <-ctx.Done():
		return false
	}
	if gap := max(minClaimGap, claimGapFactor*took) - p.now().Sub(last); gap > 0 {
		return sleep(ctx, gap)
	}
	return true
}

// claim claims up to n deliveries within the endpoints' fair share, in
// one claim that tops what the rooms leave of it up from the quick
// endpoints: with nothing else due, one endpoint may use every sender.
// The claims count as held from here until process is done with them.
// capped reports whether a short claim may have left due deliveries
// behind: an endpoint had no room, or filled what it was given.
func (p *Pool) claim(ctx context.Context, n int) (claims []storage.Claim, capped bool, err error) {
	if p.cfg.EndpointShare >= 1 {
		// The share is off: the oldest due, whoever they go to.
		claims, err = p.store.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: n, Lease: p.cfg.Lease})
		return claims, false, err
	}
	share := p.share.claimShare()
	claims, err = p.store.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: n, Lease: p.cfg.Lease, Share: share})
	if err != nil {
		return nil, false, err
	}
	// Before the claims count as held: share's Idle lookup answers for
	// endpoints as they were when it was made.
	capped = len(claims) < n && filled(share, claims)
	p.share.claimed(claims)
	return claims, capped, nil
}
