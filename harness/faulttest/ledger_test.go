//go:build fault

package faulttest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hymical/hymical/storage"
)

// ledger is what a run's numbers came to.
type ledger struct {
	backend string
	runs    int
	counts  faultCounts
	// submissions the API accepted, and the deliveries they fanned out to.
	submissions, deliveries int
	// requests is every request the receiver got; retries are those after
	// a non-2xx answer; duplicates are 2xx answers beyond the first for one
	// delivery: what a receiver must dedupe on the submission id.
	requests, retries, duplicates, duplicatedDeliveries int
	// attempts and late are what the attempt history holds.
	attempts, late int
	// unrecorded are requests whose answer the history does not show,
	// each while a fault cut its sender off; unexplained would be one
	// outside every fault's window.
	unrecorded, unexplained                int
	lost, stuck, reused, phantom, badSigns int
	// failed counts deliveries to the healthy endpoint that failed.
	failed int
	// noRequest counts attempt rows whose request never reached a
	// receiver and that no kill explains: a send that made no request,
	// recorded as one. cutOff counts those a kill explains: started before
	// a plugin was killed, or within killGrace after, so handed to it, and
	// it may or may not have sent them.
	noRequest, cutOff int

	// The plugin outage: how long the binary was away against the whole
	// retry schedule; requests that reached the receiver meanwhile (none
	// can); deliveries made at least a whole schedule before its end, all
	// first sent after it; and what /readyz said.
	away, schedule                        time.Duration
	awayRequests, waitedOut               int
	readyServers, readyDown, readyUp      int
	readyTransitions, readyFlaps          int
	hungDeliveries, hungDelivered         int
	hungFailed, hungWaiting, hungRequests int
	// hungMaxOpen is the most requests the hung receiver held at once:
	// with fair share, one sender's room per server.
	hungMaxOpen int
	// The slow endpoints: their deliveries (every one must be delivered,
	// like the healthy endpoint's), those delivered, the requests their
	// receiver got, and the most it held at once.
	slowDeliveries, slowDelivered, slowRequests, slowMaxOpen int
	// healthyN, healthyP99 and healthyMax are the create→received
	// latencies of the healthy deliveries made while the hung receiver
	// held requests.
	healthyN               int
	healthyP99, healthyMax time.Duration
	problems               []string
}

func (l *ledger) problem(format string, args ...any) {
	if len(l.problems) < 30 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

func (l *ledger) add(o *ledger) {
	l.runs += o.runs
	l.counts.serverKills += o.counts.serverKills
	l.counts.pluginKills += o.counts.pluginKills
	l.counts.pgRestarts += o.counts.pgRestarts
	l.counts.pauses += o.counts.pauses
	l.counts.outages += o.counts.outages
	l.submissions += o.submissions
	l.deliveries += o.deliveries
	l.requests += o.requests
	l.retries += o.retries
	l.duplicates += o.duplicates
	l.duplicatedDeliveries += o.duplicatedDeliveries
	l.attempts += o.attempts
	l.late += o.late
	l.unrecorded += o.unrecorded
	l.unexplained += o.unexplained
	l.lost += o.lost
	l.stuck += o.stuck
	l.reused += o.reused
	l.phantom += o.phantom
	l.badSigns += o.badSigns
	l.failed += o.failed
	l.noRequest += o.noRequest
	l.cutOff += o.cutOff
	l.away = max(l.away, o.away)
	l.schedule = max(l.schedule, o.schedule)
	l.awayRequests += o.awayRequests
	l.waitedOut += o.waitedOut
	l.readyServers += o.readyServers
	l.readyDown += o.readyDown
	l.readyUp += o.readyUp
	l.readyTransitions += o.readyTransitions
	l.readyFlaps += o.readyFlaps
	l.hungDeliveries += o.hungDeliveries
	l.hungDelivered += o.hungDelivered
	l.hungFailed += o.hungFailed
	l.hungWaiting += o.hungWaiting
	l.hungRequests += o.hungRequests
	l.hungMaxOpen = max(l.hungMaxOpen, o.hungMaxOpen)
	l.slowDeliveries += o.slowDeliveries
	l.slowDelivered += o.slowDelivered
	l.slowRequests += o.slowRequests
	l.slowMaxOpen = max(l.slowMaxOpen, o.slowMaxOpen)
	l.healthyN += o.healthyN
	// Percentiles do not add up: the total shows the worse backend's.
	l.healthyP99 = max(l.healthyP99, o.healthyP99)
	l.healthyMax = max(l.healthyMax, o.healthyMax)
}

func (l *ledger) String() string {
	return fmt.Sprintf("%s: server runs %d, kills %d (server %d, plugin %d), postgres restarts %d, pauses %d, plugin outages %d | "+
		"submissions %d, deliveries %d, requests %d (retries %d), duplicates %d (on %d deliveries), "+
		"attempts %d, late %d, unrecorded %d (unexplained %d) | lost %d, failed %d, stuck %d, reused %d, phantom %d, bad signatures %d, "+
		"attempts without a request %d (%d cut off by a kill) | "+
		"plugin away %.1fs > schedule %.1fs: requests while away %d, deliveries that waited it out %d, "+
		"readyz 503 naming \"http\" on %d of %d servers, 200 again on %d (%d transitions, %d flaps) | "+
		"hung endpoint: deliveries %d (delivered %d, failed %d, waiting %d), requests %d, at most %d open at once; "+
		"%d slow endpoints (%dms): deliveries %d (delivered %d), requests %d, at most %d open at once; "+
		"healthy create→received during the hang p99 %dms (max %dms, n %d, bound %dms)",
		l.backend, l.runs, l.counts.serverKills+l.counts.pluginKills, l.counts.serverKills, l.counts.pluginKills,
		l.counts.pgRestarts, l.counts.pauses, l.counts.outages, l.submissions, l.deliveries, l.requests, l.retries, l.duplicates,
		l.duplicatedDeliveries, l.attempts, l.late, l.unrecorded, l.unexplained, l.lost, l.failed, l.stuck, l.reused, l.phantom, l.badSigns,
		l.noRequest, l.cutOff,
		l.away.Seconds(), l.schedule.Seconds(), l.awayRequests, l.waitedOut,
		l.readyDown, l.readyServers, l.readyUp, l.readyTransitions, l.readyFlaps,
		l.hungDeliveries, l.hungDelivered, l.hungFailed, l.hungWaiting, l.hungRequests, l.hungMaxOpen,
		slowEndpoints, slowAnswer.Milliseconds(), l.slowDeliveries, l.slowDelivered, l.slowRequests, l.slowMaxOpen,
		l.healthyP99.Milliseconds(), l.healthyMax.Milliseconds(), l.healthyN, healthyP99Bound.Milliseconds())
}

func (l *ledger) balanced() bool {
	return l.lost == 0 && l.failed == 0 && l.stuck == 0 && l.reused == 0 && l.phantom == 0 && l.badSigns == 0 &&
		l.unexplained == 0 && l.noRequest == 0 && l.hungDelivered == 0 && len(l.problems) == 0
}

// answer is a request's key in the history: an attempt's start second,
// which the request carries as webhook-timestamp, and the status the
// receiver gave (0: none).
type answer struct {
	unix   int64
	status int
}

// balance builds the ledger from the receivers' logs and the database.
func (h *harness) balance() *ledger {
	h.t.Helper()
	h.mu.Lock()
	subs := append([]submission(nil), h.subs...)
	faults := append([]fault(nil), h.faults...)
	o, hg := h.outage, h.hang
	l := &ledger{backend: h.backend, runs: h.runs, counts: h.counts, submissions: len(subs) + len(hg.subs) + len(hg.slowSubs)}
	h.mu.Unlock()

	byDelivery := map[string][]request{}
	for _, r := range h.recv.requests() {
		l.requests++
		if !r.verified {
			l.badSigns++
			l.problem("a request for %s did not verify against the endpoint's secret", r.deliveryID)
		}
		byDelivery[r.deliveryID] = append(byDelivery[r.deliveryID], r)
	}
	hungBy, slowBy := map[string][]request{}, map[string][]request{}
	if hg.ran {
		for _, r := range hg.recv.requests() {
			l.hungRequests++
			hungBy[r.deliveryID] = append(hungBy[r.deliveryID], r)
		}
		for _, r := range hg.slowRecv.requests() {
			l.slowRequests++
			slowBy[r.deliveryID] = append(slowBy[r.deliveryID], r)
		}
	}

	known := map[string]bool{}
	var latencies []time.Duration
	for _, sub := range subs {
		known[sub.deliveryID] = true
		d := h.account(l, sub, byDelivery[sub.deliveryID], faults)
		got := byDelivery[sub.deliveryID]
		answered := 0
		for _, r := range got {
			if r.status/100 == 2 {
				answered++
			}
		}
		if answered > 1 {
			l.duplicates += answered - 1
			l.duplicatedDeliveries++
		}
		if len(got) > 1 {
			l.retries += len(got) - 1 - max(answered-1, 0)
		}
		switch {
		case d.State == storage.StatePending || d.State == storage.StateProcessing:
			l.stuck++
			l.problem("submission %s (key %s) is stuck: delivery %s is %s after the run", sub.submissionID, sub.key, d.ID, d.State)
		case d.State != storage.StateDelivered || answered == 0:
			l.lost++
			if d.State == storage.StateFailed {
				l.failed++
			}
			l.problem("submission %s (key %s) was lost: delivery %s is %s (unsent reason %q) and the receiver answered 2xx %d times",
				sub.submissionID, sub.key, d.ID, d.State, d.UnsentReason, answered)
		}
		first := firstArrival(got)
		if o.ran && !first.IsZero() && d.CreatedAt.After(o.began) && !d.CreatedAt.After(o.back.Add(-wholeSchedule())) {
			// Made while the plugin was away, at least a whole schedule
			// before it came back: it can only have gone after.
			l.waitedOut++
			if first.Before(o.back) {
				l.problem("delivery %s, made while the plugin was away, reached the receiver at %s, before it was back",
					d.ID, first.Format(time.StampMilli))
			}
		}
		if hg.ran && !first.IsZero() && !sub.at.Before(hg.from) && !sub.at.After(hg.to) {
			latencies = append(latencies, first.Sub(d.CreatedAt))
		}
	}
	for _, sub := range hg.slowSubs {
		known[sub.deliveryID] = true
		l.slowDeliveries++
		d := h.account(l, sub, slowBy[sub.deliveryID], faults)
		switch d.State {
		case storage.StateDelivered:
			l.slowDelivered++
		case storage.StatePending, storage.StateProcessing:
			l.stuck++
			l.problem("submission %s to a slow endpoint is stuck: delivery %s is %s after the run", sub.submissionID, d.ID, d.State)
		default:
			l.lost++
			l.problem("submission %s to a slow endpoint was lost: delivery %s is %s (unsent reason %q)", sub.submissionID, d.ID, d.State, d.UnsentReason)
		}
	}
	for id, rs := range slowBy {
		if !known[id] {
			l.problem("the slow receiver got %d requests for delivery %s, which no accepted submission made", len(rs), id)
		}
	}
	for _, sub := range hg.subs {
		known[sub.deliveryID] = true
		l.hungDeliveries++
		d := h.account(l, sub, hungBy[sub.deliveryID], faults)
		switch d.State {
		case storage.StateDelivered:
			l.hungDelivered++
			l.problem("delivery %s to the receiver that never answers is delivered", d.ID)
		case storage.StateFailed:
			l.hungFailed++
		default:
			l.hungWaiting++
		}
	}
	for id, rs := range byDelivery {
		if !known[id] {
			l.problem("the receiver got %d requests for delivery %s, which no accepted submission made", len(rs), id)
		}
	}
	for id, rs := range hungBy {
		if !known[id] {
			l.problem("the hung receiver got %d requests for delivery %s, which no accepted submission made", len(rs), id)
		}
	}
	var events int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM webhook_events`).Scan(&events); err != nil {
		h.t.Fatal(err)
	}
	if events != l.submissions {
		l.problem("%d events in the database for %d accepted submissions: a retried submission was made twice", events, l.submissions)
	}
	for _, f := range faults {
		if f.deliveryID == "" {
			continue
		}
		if n := len(byDelivery[f.deliveryID]); n < 2 {
			l.problem("%s: delivery %s reached the receiver %d times, want it sent again after the fault", f.what, f.deliveryID, n)
		}
	}
	if h.backend == "postgres" && (l.late == 0 || l.counts.pauses == 0) {
		l.problem("no late attempt was recorded: the paused-worker case did not run")
	}
	if l.counts.serverKills == 0 || l.counts.pluginKills == 0 {
		l.problem("the run killed no server or no plugin: %+v", l.counts)
	}
	h.balanceOutage(l, o)
	h.balanceHang(l, hg, latencies)
	return l
}

// account checks one delivery's history against the requests its receiver
// logged, counts what it finds into l, and returns the delivery.
func (h *harness) account(l *ledger, sub submission, got []request, faults []fault) storage.Delivery {
	d, err := h.store.DeliveryGet(h.ctx, sub.deliveryID)
	if err != nil {
		h.t.Fatalf("read delivery %s: %v", sub.deliveryID, err)
	}
	as, err := h.store.AttemptList(h.ctx, sub.deliveryID)
	if err != nil {
		h.t.Fatalf("read attempts of %s: %v", sub.deliveryID, err)
	}
	l.deliveries++
	l.attempts += len(as)

	given := map[answer][]request{}
	for _, r := range got {
		if r.submissionID != sub.submissionID {
			l.problem("delivery %s carried submission id %q, want the stable %q", d.ID, r.submissionID, sub.submissionID)
		}
		k := answer{r.timestamp, r.status}
		given[k] = append(given[k], r)
	}
	// sent counts the requests of each start second, answered or not:
	// what an attempt without an answer is matched against.
	sent := map[int64]int{}
	for _, r := range got {
		sent[r.timestamp]++
	}

	numbered := len(as) == d.Attempts
	var silent []storage.Attempt
	for i, a := range as {
		numbered = numbered && a.Number == i+1
		if a.Late {
			l.late++
		}
		// A recorded answer must be one the receiver gave: for this
		// delivery, at this attempt's start second, this status. An
		// attempt without a status matches a request left unanswered.
		k := answer{a.StartedAt.Unix(), a.HTTPStatus}
		if len(given[k]) > 0 {
			given[k] = given[k][1:]
			sent[k.unix]--
			continue
		}
		if a.HTTPStatus == 0 {
			silent = append(silent, a)
			continue
		}
		l.phantom++
		l.problem("delivery %s attempt %d records status %d at %s, an answer the receiver never gave", d.ID, a.Number, a.HTTPStatus, a.StartedAt)
	}
	// An attempt without a status whose answer the receiver gave but the
	// sender never read (it timed out, or was killed) still had a request:
	// one of that second's. One with no request at all is a send that made
	// none, recorded as an attempt: only a kill of the process the send
	// was handed to may explain it.
	for _, a := range silent {
		if sent[a.StartedAt.Unix()] > 0 {
			sent[a.StartedAt.Unix()]--
			continue
		}
		if inKill(faults, a.StartedAt) {
			l.cutOff++
			continue
		}
		l.noRequest++
		l.problem("delivery %s attempt %d (%s at %s: %q) has no request that reached the receiver, outside every kill",
			d.ID, a.Number, a.Outcome, a.StartedAt.Format(time.StampMilli), a.Error)
	}
	// What is left reached the receiver without its answer (or, at the
	// hung receiver, without any attempt) in the history: only a fault may
	// do that.
	for _, rs := range given {
		for _, r := range rs {
			l.unrecorded++
			at := r.at
			if at.IsZero() {
				at = r.arrived // the hung receiver's: never answered
			}
			if !inWindow(faults, at) {
				l.unexplained++
				l.problem("delivery %s: the receiver answered %d at %s, outside every fault, and the history %s does not show it",
					d.ID, r.status, at.Format(time.StampMilli), describe(as))
			}
		}
	}
	if !numbered {
		l.reused++
		l.problem("delivery %s: attempts counter %d, attempt numbers %v; want 1..%d each once", d.ID, d.Attempts, attemptNumbers(as), d.Attempts)
	}
	if d.CycleAttempts > maxAttempts {
		l.problem("delivery %s: cycle_attempts %d exceeds the allowance %d", d.ID, d.CycleAttempts, maxAttempts)
	}
	return d
}

// balanceOutage checks what /readyz said around the plugin outage and that
// nothing reached the receiver while the plugin was away.
func (h *harness) balanceOutage(l *ledger, o outage) {
	if !o.ran {
		l.problem("the plugin outage did not run")
		return
	}
	l.away, l.schedule = o.back.Sub(o.began), wholeSchedule()
	if l.away <= l.schedule {
		l.problem("the plugin was away %s, not longer than the whole retry schedule %s", l.away, l.schedule)
	}
	// A request a killed plugin had on the wire may be answered just after
	// the kill; from a second on, none can reach the receiver.
	for _, r := range h.recv.requests() {
		if r.arrived.After(o.began.Add(time.Second)) && r.arrived.Before(o.back) {
			l.awayRequests++
			l.problem("a request for %s reached the receiver at %s, while the plugin was away", r.deliveryID, r.arrived.Format(time.StampMilli))
		}
	}
	if l.waitedOut == 0 {
		l.problem("no delivery was made at least a whole retry schedule before the plugin came back")
	}
	if !strings.Contains(o.unsent, `"http"`) {
		l.problem("a delivery made while the plugin was away showed unsent_reason %q, want one naming the http transport", o.unsent)
	}
	for _, rt := range o.servers {
		l.readyServers++
		l.readyTransitions += rt.transitions
		l.readyFlaps += rt.flaps
		if rt.down {
			l.readyDown++
		} else {
			l.problem("%s /readyz never answered 503 naming \"http\" while the plugin was away (last: %q)", rt.name, rt.lastMsg)
		}
		if rt.up {
			l.readyUp++
		} else {
			l.problem("%s /readyz did not answer 200 within 15 s of the plugin's return (last: %d %q)", rt.name, rt.last, rt.lastMsg)
		}
		if rt.flaps > 0 {
			l.problem("%s /readyz answered 200 %d times while the plugin was away", rt.name, rt.flaps)
		}
	}
}

// balanceHang checks that the hung receiver held requests, and the healthy
// deliveries' latency meanwhile.
func (h *harness) balanceHang(l *ledger, hg hang, latencies []time.Duration) {
	if !hg.ran {
		l.problem("the hung receiver did not run")
		return
	}
	l.hungMaxOpen, l.slowMaxOpen = hg.maxOpen, hg.slowMaxOpen
	if hg.maxOpen == 0 || l.hungRequests == 0 {
		l.problem("the hung receiver never held a request: the hang did not happen")
	}
	if hg.slowMaxOpen == 0 || l.slowRequests == 0 {
		l.problem("the slow receiver never held a request: the slow endpoints' backlog did not happen")
	}
	l.healthyN = len(latencies)
	if l.healthyN < 20 {
		l.problem("only %d healthy deliveries were made during the hang; want at least 20 to measure", l.healthyN)
		return
	}
	slices.Sort(latencies)
	h.t.Logf("%s: healthy create→received during the hang: p50 %s, p90 %s, slowest five %v", h.backend,
		latencies[len(latencies)/2].Round(time.Millisecond), latencies[len(latencies)*9/10].Round(time.Millisecond),
		roundAll(latencies[max(0, len(latencies)-5):]))
	l.healthyP99 = latencies[(len(latencies)*99+99)/100-1]
	l.healthyMax = latencies[len(latencies)-1]
	if l.healthyP99 > healthyP99Bound {
		l.problem("the healthy endpoint's create→received p99 during the hang is %s, over the bound %s", l.healthyP99, healthyP99Bound)
	}
}

func firstArrival(rs []request) time.Time {
	var first time.Time
	for _, r := range rs {
		if first.IsZero() || r.arrived.Before(first) {
			first = r.arrived
		}
	}
	return first
}

// inKill reports whether an attempt started at at may have been handed to
// a process a kill then cut off.
func inKill(faults []fault, at time.Time) bool {
	for _, f := range faults {
		if !f.killed.IsZero() && !at.Before(f.from) && !at.After(f.killed.Add(killGrace)) {
			return true
		}
	}
	return false
}

func inWindow(faults []fault, at time.Time) bool {
	for _, f := range faults {
		if !at.Before(f.from) && !at.After(f.to) {
			return true
		}
	}
	return false
}

func describe(as []storage.Attempt) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("#%d %s/%d late=%v at %s", a.Number, a.Outcome, a.HTTPStatus, a.Late, a.StartedAt.Format(time.StampMilli))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func attemptNumbers(as []storage.Attempt) []int {
	out := make([]int, len(as))
	for i, a := range as {
		out[i] = a.Number
	}
	return out
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
