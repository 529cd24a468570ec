package storage

import (
	"math"
	"time"
)

// ConcurrencyRecheck is how long a delivery deferred by an endpoint's
// in-flight cap waits before it is offered again, divided among the cap's
// slots: an endpoint capped at 4 sees a deferred delivery come back every
// 12.5ms. The store cannot know when a send ends, only that it has, so the
// deferred ones are paced rather than woken.
const ConcurrencyRecheck = 50 * time.Millisecond

// Throttle is an endpoint's shared limiter state, kept by the store and
// locked while a claim is admitted. TAT is the GCRA theoretical arrival
// time; DeferredUntil is the last slot given to a deferred delivery, so
// deferred deliveries come back one slot apart instead of all at once.
type Throttle struct {
	TAT           time.Time
	DeferredUntil time.Time
}

// Admission is what Admit decided for a run of claims to one endpoint.
type Admission struct {
	// Admitted is how many of the claims, from the first, may be sent now.
	Admitted int
	// Due is when each of the rest is due again, in claim order.
	Due []time.Time
	// Next is the limiter state to store.
	Next Throttle
}

// Admit decides which of n claimed deliveries to e may be sent at now, given
// the endpoint's limiter state and the sends already under way to it
// (inFlight, not counting these n). The rate is a GCRA: sends are spaced
// 1/RateLimit apart, with up to Burst() at once after a quiet spell. The
// first claim that does not fit defers it and every later one; deferring
// spends nothing, the delivery is just due again later.
func Admit(e Endpoint, st Throttle, inFlight, n int, now time.Time) Admission {
	var interval, tolerance time.Duration
	if e.RateLimit > 0 {
		interval = time.Duration(math.Max(1, float64(time.Second)/e.RateLimit))
		tolerance = interval * time.Duration(e.Burst()-1)
	}
	tat := st.TAT
	if tat.Before(now) {
		tat = now
	}
	admitted := 0
	capped := false
	for admitted < n {
		if e.MaxInFlight > 0 && inFlight+admitted >= e.MaxInFlight {
			capped = true
			break
		}
		if interval > 0 && tat.Sub(now) > tolerance {
			break
		}
		if interval > 0 {
			tat = tat.Add(interval)
		}
		admitted++
	}
	out := Admission{Admitted: admitted, Next: Throttle{TAT: tat, DeferredUntil: st.DeferredUntil}}
	deferred := n - admitted
	if deferred == 0 {
		return out
	}
	// The earliest a deferred delivery could go: when the next token is
	// there, and for a full cap, one recheck step on.
	earliest := now
	step := interval
	if interval > 0 {
		earliest = tat.Add(-tolerance)
	}
	if e.MaxInFlight > 0 {
		cstep := ConcurrencyRecheck / time.Duration(e.MaxInFlight)
		step = max(step, cstep)
		if capped && earliest.Before(now.Add(cstep)) {
			earliest = now.Add(cstep)
		}
	}
	base := earliest
	if st.DeferredUntil.After(base) {
		base = st.DeferredUntil
	}
	out.Due = make([]time.Time, deferred)
	for j := range out.Due {
		out.Due[j] = base.Add(time.Duration(j) * step)
	}
	out.Next.DeferredUntil = base.Add(time.Duration(deferred) * step)
	return out
}

// Admitted keeps the claims whose keep is true, in order, in claims' own
// backing array.
func Admitted(claims []Claim, keep []bool) []Claim {
	out := claims[:0]
	for i, c := range claims {
		if keep[i] {
			out = append(out, c)
		}
	}
	return out
}
