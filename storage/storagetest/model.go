package storagetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// The model test's knobs, read from the environment so a failure can be
// replayed exactly and a longer exploration run on demand:
//
//	HYMICAL_MODEL_SEED=7 HYMICAL_MODEL_STEPS=5000 go test -run 'TestConformance/Model' ./storage/sqlite
const (
	ModelSeedEnv  = "HYMICAL_MODEL_SEED"
	ModelStepsEnv = "HYMICAL_MODEL_STEPS"
)

// modelSteps keeps the default run to a second or two per backend (a few
// under -race, where the pure-Go SQLite is many times slower); each of
// the default seeds 1..4 is a different random workload.
const modelSteps = 200

// testModel drives random sequences of claims, completions, releases, lease
// expiries (by moving an injected clock), late completions by superseded
// workers, crashes and replays across several workers, each on a Store of
// its own, and after every step compares the whole database with a small
// reference model and checks the state machine's invariants on what the
// store returned, independently of the model.
func testModel(t *testing.T, b Backend) {
	seeds, steps := []uint64{1, 2, 3, 4}, modelSteps
	if v := os.Getenv(ModelSeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q is not an unsigned integer", ModelSeedEnv, v)
		}
		seeds = []uint64{n}
	}
	if v := os.Getenv(ModelStepsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q is not a positive integer", ModelStepsEnv, v)
		}
		steps = n
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			t.Parallel()
			newModelRun(t, b, seed).run(steps)
		})
	}
}

// modelDelivery is what the reference model believes one row holds.
type modelDelivery struct {
	name        string // d0, d1, … in creation order, for readable traces
	id          string
	endpointID  string
	eventID     string
	state       storage.DeliveryState
	attempts    int
	cycle       int
	next        time.Time
	leaseEnds   *time.Time
	createdAt   time.Time
	completedAt *time.Time
	// token is the claim the row carries; "" when none.
	token string
	// unsent is why the last claim that ended without a request did so;
	// "" once a request was recorded or the row replayed.
	unsent  string
	history []modelAttempt
	replays []storage.Replay
}

type modelAttempt struct {
	number     int
	outcome    storage.OutcomeKind
	status     int
	errText    string
	late       bool
	started    time.Time
	finished   time.Time
	traceID    string
	deliveryID string
}

func (a modelAttempt) String() string {
	return fmt.Sprintf("#%d of %s %s/%d error %q late=%v from %s to %s trace %s", a.number, a.deliveryID, a.outcome, a.status,
		a.errText, a.late, a.started.Format(time.RFC3339Nano), a.finished.Format(time.RFC3339Nano), a.traceID)
}

func (md *modelDelivery) claimable(now time.Time) bool {
	switch md.state {
	case storage.StatePending:
		return !md.next.After(now)
	case storage.StateProcessing:
		return md.leaseEnds.Before(now)
	}
	return false
}

// diff lists every field where the stored row disagrees with the model.
func (md *modelDelivery) diff(d storage.Delivery) []string {
	var out []string
	field := func(name string, ok bool, got, want any) {
		if !ok {
			out = append(out, fmt.Sprintf("%s = %v, model says %v", name, got, want))
		}
	}
	field("id", d.ID == md.id, d.ID, md.id)
	field("endpoint_id", d.EndpointID == md.endpointID, d.EndpointID, md.endpointID)
	field("event_id", d.EventID == md.eventID, d.EventID, md.eventID)
	field("state", d.State == md.state, d.State, md.state)
	field("attempts", d.Attempts == md.attempts, d.Attempts, md.attempts)
	field("cycle_attempts", d.CycleAttempts == md.cycle, d.CycleAttempts, md.cycle)
	field("next_attempt_at", d.NextAttemptAt.Equal(md.next), d.NextAttemptAt, md.next)
	field("claim_expires_at", ptrTimeEqual(d.ClaimExpiresAt, md.leaseEnds), fmtPtr(d.ClaimExpiresAt), fmtPtr(md.leaseEnds))
	field("created_at", d.CreatedAt.Equal(md.createdAt), d.CreatedAt, md.createdAt)
	field("completed_at", ptrTimeEqual(d.CompletedAt, md.completedAt), fmtPtr(d.CompletedAt), fmtPtr(md.completedAt))
	field("unsent_reason", d.UnsentReason == md.unsent, d.UnsentReason, md.unsent)
	return out
}

func fmtPtr(t *time.Time) string {
	if t == nil {
		return "NULL"
	}
	return t.String()
}

// simWorker is one simulated server process: a Store with connections of
// its own and the claims it believes it holds.
type simWorker struct {
	name  string
	store storage.Store
	// held are claims the worker has not finished; some may have been
	// superseded behind its back.
	held []storage.Claim
	// spent are claims it already completed or gave back, for the worker
	// that retries a write it already made.
	spent []storage.Claim
}

// effect says what one step was allowed to change, for the invariants that
// are checked without the model.
type effect struct {
	// replayed rows may leave a terminal state.
	replayed map[string]bool
	// attemptsOnly rows were written under a superseded token: nothing but
	// attempts may change.
	attemptsOnly map[string]bool
	// unchanged rows were the target of a write that must be refused whole.
	unchanged map[string]bool
}

func newEffect() effect {
	return effect{replayed: map[string]bool{}, attemptsOnly: map[string]bool{}, unchanged: map[string]bool{}}
}

type modelRun struct {
	t    *testing.T
	ctx  context.Context
	b    Backend
	db   Database
	seed uint64
	rng  *rand.Rand
	// now is the injected clock every call is made at; start is where it began.
	now       time.Time
	start     time.Time
	allowance int
	endpoints []storage.Endpoint
	order     []*modelDelivery
	byID      map[string]*modelDelivery
	workers   []*simWorker
	tokens    map[string]bool
	replays   int
	maxRows   int
	step      int
	trace     []string
	// seen is every row as the store showed it after the previous step.
	seen map[string]storage.Delivery
	// counts of what the run exercised, to prove it covered the cases.
	counts map[string]int
}

func newModelRun(t *testing.T, b Backend, seed uint64) *modelRun {
	t.Helper()
	s, db := newStore(t, b)
	// A fixed instant far from the wall clock: nothing in the run may
	// depend on the store's own clock.
	start := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC).Add(time.Duration(seed%1000) * time.Hour)
	m := &modelRun{
		t: t, ctx: context.Background(), b: b, db: db, seed: seed,
		rng:    rand.New(rand.NewPCG(seed, 0x6879_6d69_6361_6c)),
		now:    start,
		start:  start,
		byID:   map[string]*modelDelivery{},
		tokens: map[string]bool{},
		seen:   map[string]storage.Delivery{},
		counts: map[string]int{},
	}
	m.allowance = 1 + m.rng.IntN(4)
	m.maxRows = 6 + m.rng.IntN(6)
	m.workers = append(m.workers, &simWorker{name: "w0", store: s})
	for i := 1; i < 3; i++ {
		m.workers = append(m.workers, &simWorker{name: fmt.Sprintf("w%d", i), store: db.Open(t)})
	}
	// Two endpoints, each for its own form, so every event fans out to
	// exactly one delivery and a row's endpoint is known to the model.
	for _, form := range []string{"form_a", "form_b"} {
		e, err := s.EndpointCreate(m.ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{
			Transport: "http", URL: "https://receiver.example/" + form, FormIDs: []string{form},
			Secrets: []storage.Secret{storage.NewSecret("whsec_bW9kZWxtb2RlbG1vZGVsbW9kZWw=", nil)},
		}})
		if err != nil {
			t.Fatalf("EndpointCreate: %v", err)
		}
		m.endpoints = append(m.endpoints, e.Endpoint)
	}
	return m
}

// logf notes what a step did, for the trace a failure prints. Only the
// recent past is kept: a failure shows its last 40 lines.
func (m *modelRun) logf(format string, args ...any) {
	if len(m.trace) >= 400 {
		m.trace = slices.Delete(m.trace, 0, 200)
	}
	m.trace = append(m.trace, fmt.Sprintf("step %d at +%s: ", m.step, m.elapsed())+fmt.Sprintf(format, args...))
}

func (m *modelRun) elapsed() time.Duration { return m.now.Sub(m.start) }

// fail stops the run with the seed, the step and the trace that led there.
func (m *modelRun) fail(format string, args ...any) {
	m.t.Helper()
	tail := m.trace
	if len(tail) > 40 {
		tail = tail[len(tail)-40:]
	}
	m.t.Fatalf("%s model, seed %d (allowance %d), step %d: %s\nlast steps:\n  %s\nreplay with %s=%d go test -run 'TestConformance/Model' ./storage/%s",
		m.b.Name, m.seed, m.allowance, m.step, fmt.Sprintf(format, args...),
		strings.Join(tail, "\n  "), ModelSeedEnv, m.seed, m.b.Name)
}

func (m *modelRun) run(steps int) {
	m.t.Helper()
	for range 3 + m.rng.IntN(3) {
		m.newEvent(newEffect())
	}
	m.check(newEffect(), true)
	for m.step = 1; m.step <= steps; m.step++ {
		eff := newEffect()
		m.randomStep(eff)
		m.check(eff, m.step%50 == 0)
	}
	m.check(newEffect(), true)
	m.t.Logf("seed %d: %d steps over %d deliveries, allowance %d, exercised %v", m.seed, steps, len(m.order), m.allowance, m.counts)
	for _, c := range []string{"claim", "complete", "late completion", "lease expired, reclaimed", "replay"} {
		if m.counts[c] == 0 && steps >= modelSteps {
			m.fail("the run never exercised %q (counts %v): the workload no longer covers the state machine", c, m.counts)
		}
	}
}

// randomStep picks one operation by weight; one that has nothing to act on
// moves the clock instead.
func (m *modelRun) randomStep(eff effect) {
	w := m.workers[m.rng.IntN(len(m.workers))]
	r := m.rng.IntN(100)
	switch {
	case r < 24:
		m.claim(w, eff)
	case r < 40 && len(w.held) > 0:
		m.complete(w, m.rng.IntN(len(w.held)), eff)
	case r >= 40 && r < 48 && len(w.held) > 1:
		m.completeBatch(w, eff)
	case r >= 48 && r < 53 && len(w.held) > 0:
		if m.rng.IntN(3) == 0 {
			m.failUnsent(w, m.rng.IntN(len(w.held)), eff)
		} else {
			m.release(w, m.rng.IntN(len(w.held)), eff)
		}
	case r >= 53 && r < 56 && len(w.held) > 0:
		m.lateByOwner(w, m.rng.IntN(len(w.held)), eff)
	case r >= 56 && r < 59 && len(w.spent) > 0:
		m.completeSpent(w, m.rng.IntN(len(w.spent)), eff)
	case r >= 59 && r < 62 && len(w.held) > 0:
		m.logf("%s crashes, abandoning %d claims", w.name, len(w.held))
		m.counts["crash"]++
		w.held = nil
	case r >= 62 && r < 70:
		m.replay(w, m.order[m.rng.IntN(len(m.order))], eff)
	case r >= 70 && r < 73:
		m.replayMany(w, eff)
	case r >= 73 && r < 76 && len(m.order) < m.maxRows:
		m.newEvent(eff)
	default:
		m.advance()
	}
}

func (m *modelRun) advance() {
	var d time.Duration
	switch r := m.rng.IntN(6); r {
	case 0:
		d = time.Microsecond
	case 1:
		d = time.Second
	case 2:
		d = time.Duration(m.rng.Int64N(int64(40 * time.Second))).Truncate(time.Microsecond)
	default:
		// The next instant at which something changes, exactly, or just
		// past it: the edges of "due" and "expired" are where bugs live.
		next, ok := m.nextBoundary()
		if !ok {
			d = time.Second
			break
		}
		d = next.Sub(m.now)
		if r == 5 {
			d += time.Microsecond
		}
	}
	m.now = m.now.Add(d)
	m.logf("clock moves %s", d)
}

// nextBoundary is the earliest instant after now at which a row becomes
// due, or its lease is at its last instant or past it.
func (m *modelRun) nextBoundary() (time.Time, bool) {
	var best time.Time
	consider := func(t time.Time) {
		if t.After(m.now) && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	for _, md := range m.order {
		switch md.state {
		case storage.StatePending:
			consider(md.next)
		case storage.StateProcessing:
			consider(*md.leaseEnds)
			consider(md.leaseEnds.Add(time.Microsecond))
		}
	}
	return best, !best.IsZero()
}

func (m *modelRun) newEvent(eff effect) {
	ep := m.endpoints[m.rng.IntN(len(m.endpoints))]
	// Delivery ids begin with the wall clock's milliseconds; a fresh
	// millisecond makes their order (the tie-break of claims) the creation
	// order, so a seed replays the same run.
	time.Sleep(2 * time.Millisecond)
	sub := storage.NewID("sub")
	res, err := m.workers[0].store.EventCreate(m.ctx, storage.Event{
		Type: "submission.received", FormID: ep.FormIDs[0], SubmissionID: sub,
		Payload: submissionPayload(sub, ep.FormIDs[0]), CreatedAt: m.now,
	})
	if err != nil {
		m.fail("EventCreate: %v", err)
	}
	if len(res.Deliveries) != 1 {
		m.fail("an event for %s fanned out to %d deliveries, want 1", ep.FormIDs[0], len(res.Deliveries))
	}
	d := res.Deliveries[0]
	md := &modelDelivery{
		name: fmt.Sprintf("d%d", len(m.order)), id: d.ID, endpointID: ep.ID, eventID: res.Event.ID,
		state: storage.StatePending, next: m.now, createdAt: m.now,
	}
	if diff := md.diff(d); len(diff) > 0 {
		m.fail("new delivery: %s", strings.Join(diff, "; "))
	}
	m.order = append(m.order, md)
	m.byID[d.ID] = md
	m.logf("new event → %s pending, due now", md.name)
}

func (m *modelRun) claim(w *simWorker, eff effect) {
	limit := 1 + m.rng.IntN(4)
	lease := []time.Duration{5 * time.Second, 20 * time.Second}[m.rng.IntN(2)]
	var due []*modelDelivery
	for _, md := range m.order {
		if md.claimable(m.now) {
			due = append(due, md)
		}
	}
	slices.SortStableFunc(due, func(a, b *modelDelivery) int {
		if c := a.next.Compare(b.next); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	want := due[:min(limit, len(due))]

	claims, err := w.store.DeliveryClaim(m.ctx, storage.DeliveryClaimParams{Limit: limit, Lease: lease, Now: m.now})
	if err != nil {
		m.fail("%s DeliveryClaim: %v", w.name, err)
	}
	var got, wantNames []string
	for _, c := range claims {
		got = append(got, m.nameOf(c.Delivery.ID))
	}
	for _, md := range want {
		wantNames = append(wantNames, md.name)
	}
	m.logf("%s claims limit %d lease %s → %v", w.name, limit, lease, got)
	if !slices.Equal(got, wantNames) {
		m.fail("%s claimed %v, model says oldest due first %v", w.name, got, wantNames)
	}
	for i, c := range claims {
		md := want[i]
		if c.Token == "" || m.tokens[c.Token] {
			m.fail("claim of %s has token %q, empty or already used", md.name, c.Token)
		}
		m.tokens[c.Token] = true
		if md.state == storage.StateProcessing {
			m.counts["lease expired, reclaimed"]++
		}
		ends := m.now.Add(lease)
		md.state, md.leaseEnds, md.token = storage.StateProcessing, &ends, c.Token
		if diff := md.diff(c.Delivery); len(diff) > 0 {
			m.fail("claimed row %s: %s", md.name, strings.Join(diff, "; "))
		}
		if c.Event.ID != md.eventID || len(c.Event.Payload) == 0 {
			m.fail("claim of %s carries event %q with %d payload bytes, want event %s", md.name, c.Event.ID, len(c.Event.Payload), md.eventID)
		}
		m.counts["claim"]++
	}
	if len(claims) > 0 {
		conds := make([]string, len(claims))
		for i, c := range claims {
			conds[i] = fmt.Sprintf("(id = '%s' AND claim_token = '%s')", sqlQuote(c.Delivery.ID), sqlQuote(c.Token))
		}
		if n := m.queryInt("SELECT count(*) FROM webhook_deliveries WHERE " + strings.Join(conds, " OR ")); n != int64(len(claims)) {
			m.fail("%s claimed %d rows but only %d carry the token their claim returned", w.name, len(claims), n)
		}
	}
	w.held = append(w.held, claims...)
}

func (m *modelRun) nameOf(id string) string {
	if md, ok := m.byID[id]; ok {
		return md.name
	}
	return "unknown:" + id
}

// randomOutcome is what a request might produce, with the status a
// transport would report for it.
func (m *modelRun) randomOutcome() (storage.OutcomeKind, int, string) {
	switch r := m.rng.IntN(10); {
	case r < 4:
		return storage.OutcomeDelivered, 200, ""
	case r < 6:
		return storage.OutcomeRetryable, 503, "receiver answered 503"
	case r < 8:
		return storage.OutcomeRetryable, 0, "dial tcp: connection refused"
	default:
		return storage.OutcomePermanent, 410, "receiver answered 410"
	}
}

func (m *modelRun) takeHeld(w *simWorker, i int) storage.Claim {
	c := w.held[i]
	w.held = slices.Delete(w.held, i, i+1)
	return c
}

// complete is a worker finishing a request under the claim it holds: the
// owner's completion moves the row; a superseded worker's is refused and
// is then recorded as a late attempt, the way the worker pool does it.
func (m *modelRun) complete(w *simWorker, i int, eff effect) {
	c := m.takeHeld(w, i)
	p := m.completeParams(c)
	d, a, err := w.store.DeliveryComplete(m.ctx, p)
	m.completed(w, c, p, d, a, err, eff)
}

// completeBatch is a worker finishing several requests in one
// DeliveryCompleteBatch, as the pool's completer does: each entry must come
// out exactly as it would have alone. Claims on one delivery (an old and a
// new one of the same worker) go in separate batches.
func (m *modelRun) completeBatch(w *simWorker, eff effect) {
	want := 2 + m.rng.IntN(4)
	var cs []storage.Claim
	var ps []storage.DeliveryCompleteParams
	seen := map[string]bool{}
	for i := 0; i < len(w.held) && len(cs) < want; {
		c := w.held[i]
		if seen[c.Delivery.ID] {
			i++
			continue
		}
		seen[c.Delivery.ID] = true
		cs = append(cs, m.takeHeld(w, i))
		ps = append(ps, m.completeParams(c))
	}
	res, err := w.store.DeliveryCompleteBatch(m.ctx, ps)
	if err != nil {
		m.fail("batch completion of %d: %v", len(ps), err)
		return
	}
	if len(res) != len(ps) {
		m.fail("batch completion of %d returned %d results", len(ps), len(res))
		return
	}
	m.logf("%s completes %d claims in one batch", w.name, len(ps))
	m.counts["batch"]++
	for i, c := range cs {
		m.completed(w, c, ps[i], res[i].Delivery, res[i].Attempt, res[i].Err, eff)
	}
}

// completeParams is a random outcome of a request made under c.
func (m *modelRun) completeParams(c storage.Claim) storage.DeliveryCompleteParams {
	outcome, status, errText := m.randomOutcome()
	delay := []time.Duration{0, 3 * time.Second, 10 * time.Second, 40 * time.Second}[m.rng.IntN(4)]
	started := m.now.Add(-time.Duration(m.rng.IntN(2_000_000)) * time.Microsecond)
	return storage.DeliveryCompleteParams{
		DeliveryID: c.Delivery.ID, Token: c.Token, Outcome: outcome, HTTPStatus: status, Error: errText,
		StartedAt: started, FinishedAt: m.now, TraceID: fmt.Sprintf("%032x", m.step),
		RetryDelay: delay, MaxCycleAttempts: m.allowance, Now: m.now,
	}
}

// completed checks what the store answered to the completion p of c
// against the model, and moves the model on.
func (m *modelRun) completed(w *simWorker, c storage.Claim, p storage.DeliveryCompleteParams, d storage.Delivery, a storage.Attempt, err error, eff effect) {
	md := m.byID[c.Delivery.ID]
	outcome, status, errText, started, delay := p.Outcome, p.HTTPStatus, p.Error, p.StartedAt, p.RetryDelay
	if c.Token != md.token {
		m.logf("%s completes %s %s/%d under a superseded claim", w.name, md.name, outcome, status)
		if !errors.Is(err, storage.ErrClaimLost) {
			m.fail("completion of %s under a superseded token: error %v, want ErrClaimLost", md.name, err)
		}
		eff.attemptsOnly[md.id] = true
		late, err := w.store.AttemptRecordLate(m.ctx, storage.AttemptRecordLateParams{
			DeliveryID: md.id, Token: c.Token, Outcome: outcome, HTTPStatus: status, Error: errText,
			StartedAt: started, FinishedAt: m.now, TraceID: p.TraceID,
		})
		if err != nil {
			m.fail("late record of %s: %v", md.name, err)
		}
		md.attempts++
		m.wantAttempt(late, md.record(outcome, status, errText, true, started, m.now, p.TraceID))
		m.counts["late completion"]++
		return
	}
	m.logf("%s completes %s %s/%d (delay %s)", w.name, md.name, outcome, status, delay)
	if err != nil {
		m.fail("owner's completion of %s: %v", md.name, err)
	}
	md.attempts++
	md.cycle++
	md.unsent = ""
	now := m.now
	switch {
	case outcome == storage.OutcomeDelivered:
		md.state, md.completedAt = storage.StateDelivered, &now
	case outcome == storage.OutcomePermanent || md.cycle >= m.allowance:
		md.state, md.completedAt = storage.StateFailed, &now
	default:
		md.state, md.next, md.completedAt = storage.StatePending, m.now.Add(delay), nil
	}
	md.leaseEnds, md.token = nil, ""
	if diff := md.diff(d); len(diff) > 0 {
		m.fail("completed row %s: %s", md.name, strings.Join(diff, "; "))
	}
	m.wantAttempt(a, md.record(outcome, status, errText, false, started, m.now, p.TraceID))
	w.spent = append(w.spent, c)
	m.counts["complete"]++
}

// record appends an attempt to the model's history under the next number.
func (md *modelDelivery) record(outcome storage.OutcomeKind, status int, errText string, late bool, started, finished time.Time, traceID string) modelAttempt {
	a := modelAttempt{number: md.attempts, outcome: outcome, status: status, errText: errText, late: late,
		started: started, finished: finished, traceID: traceID, deliveryID: md.id}
	md.history = append(md.history, a)
	return a
}

func (m *modelRun) wantAttempt(got storage.Attempt, want modelAttempt) {
	m.t.Helper()
	if got.DeliveryID != want.deliveryID || got.Number != want.number || got.Outcome != want.outcome ||
		got.HTTPStatus != want.status || got.Error != want.errText || got.Late != want.late ||
		!got.StartedAt.Equal(want.started) || !got.FinishedAt.Equal(want.finished) || got.TraceID != want.traceID {
		have := modelAttempt{number: got.Number, outcome: got.Outcome, status: got.HTTPStatus, errText: got.Error, late: got.Late,
			started: got.StartedAt, finished: got.FinishedAt, traceID: got.TraceID, deliveryID: got.DeliveryID}
		m.fail("attempt of %s is %s, model says %s", m.nameOf(want.deliveryID), have, want)
	}
}

func (m *modelRun) release(w *simWorker, i int, eff effect) {
	c := m.takeHeld(w, i)
	md := m.byID[c.Delivery.ID]
	delay := []time.Duration{0, 2 * time.Second}[m.rng.IntN(2)]
	// Half the releases say why no request was made, as the worker's do
	// when a plugin is down; the others (shutdown, a lease too short)
	// leave the row's reason as it was.
	var reason string
	if m.rng.IntN(2) == 0 {
		reason = fmt.Sprintf("transport plugin %q is not running (step %d)", "http", m.step)
	}
	d, err := w.store.DeliveryRelease(m.ctx, storage.DeliveryReleaseParams{DeliveryID: md.id, Token: c.Token, Delay: delay, Reason: reason, Now: m.now})
	if c.Token != md.token {
		m.logf("%s gives back %s under a superseded claim", w.name, md.name)
		if !errors.Is(err, storage.ErrClaimLost) {
			m.fail("release of %s under a superseded token: error %v, want ErrClaimLost", md.name, err)
		}
		eff.unchanged[md.id] = true
		return
	}
	m.logf("%s gives back %s, due in %s, reason %q", w.name, md.name, delay, reason)
	if err != nil {
		m.fail("owner's release of %s: %v", md.name, err)
	}
	md.state, md.next, md.leaseEnds, md.token = storage.StatePending, m.now.Add(delay), nil, ""
	if reason != "" {
		md.unsent = reason
	}
	if diff := md.diff(d); len(diff) > 0 {
		m.fail("released row %s: %s", md.name, strings.Join(diff, "; "))
	}
	w.spent = append(w.spent, c)
	m.counts["release"]++
}

// failUnsent is a worker ending its claim as failed without a request, as
// the pool does for an unknown transport or an unsignable message: the
// owner's moves the row to failed and writes no attempt; a superseded
// worker's is refused whole.
func (m *modelRun) failUnsent(w *simWorker, i int, eff effect) {
	c := m.takeHeld(w, i)
	md := m.byID[c.Delivery.ID]
	reason := fmt.Sprintf("no transport plugin %q is loaded (step %d)", "smtp", m.step)
	d, err := w.store.DeliveryFail(m.ctx, storage.DeliveryFailParams{DeliveryID: md.id, Token: c.Token, Reason: reason, Now: m.now})
	if c.Token != md.token {
		m.logf("%s fails %s without a request under a superseded claim", w.name, md.name)
		if !errors.Is(err, storage.ErrClaimLost) {
			m.fail("failing %s under a superseded token: error %v, want ErrClaimLost", md.name, err)
		}
		eff.unchanged[md.id] = true
		return
	}
	m.logf("%s fails %s without a request", w.name, md.name)
	if err != nil {
		m.fail("owner's failure of %s without a request: %v", md.name, err)
	}
	now := m.now
	md.state, md.completedAt, md.leaseEnds, md.token, md.unsent = storage.StateFailed, &now, nil, "", reason
	if diff := md.diff(d); len(diff) > 0 {
		m.fail("row %s failed without a request: %s", md.name, strings.Join(diff, "; "))
	}
	w.spent = append(w.spent, c)
	m.counts["fail unsent"]++
}

// lateByOwner is a worker wrongly recording its own current claim as late:
// refused whole when the claim is still the row's, recorded when it is not.
func (m *modelRun) lateByOwner(w *simWorker, i int, eff effect) {
	c := w.held[i]
	md := m.byID[c.Delivery.ID]
	if c.Token != md.token {
		// Superseded: this is the ordinary late path, via complete.
		m.complete(w, i, eff)
		return
	}
	m.logf("%s records its current claim on %s as late", w.name, md.name)
	_, err := w.store.AttemptRecordLate(m.ctx, storage.AttemptRecordLateParams{
		DeliveryID: md.id, Token: c.Token, Outcome: storage.OutcomeRetryable, StartedAt: m.now, FinishedAt: m.now,
	})
	if !errors.Is(err, storage.ErrClaimHeld) {
		m.fail("late record of %s under its current token: error %v, want ErrClaimHeld", md.name, err)
	}
	eff.unchanged[md.id] = true
	m.counts["late refused"]++
}

// completeSpent is a worker repeating a completion it already made.
func (m *modelRun) completeSpent(w *simWorker, i int, eff effect) {
	c := w.spent[i]
	md := m.byID[c.Delivery.ID]
	m.logf("%s repeats a finished claim on %s", w.name, md.name)
	_, _, err := w.store.DeliveryComplete(m.ctx, storage.DeliveryCompleteParams{
		DeliveryID: md.id, Token: c.Token, Outcome: storage.OutcomeDelivered, HTTPStatus: 200,
		StartedAt: m.now, FinishedAt: m.now, MaxCycleAttempts: m.allowance, Now: m.now,
	})
	if !errors.Is(err, storage.ErrClaimLost) {
		m.fail("repeated completion of %s: error %v, want ErrClaimLost", md.name, err)
	}
	eff.unchanged[md.id] = true
}

func (m *modelRun) applyReplay(md *modelDelivery, eff effect) {
	md.replays = append(md.replays, storage.Replay{DeliveryID: md.id, Actor: "model-operator", PreviousState: md.state, ReplayedAt: m.now})
	md.state, md.next, md.cycle, md.completedAt, md.unsent = storage.StatePending, m.now, 0, nil, ""
	m.replays++
	eff.replayed[md.id] = true
	m.counts["replay"]++
}

func (m *modelRun) replay(w *simWorker, md *modelDelivery, eff effect) {
	d, err := w.store.DeliveryReplay(m.ctx, storage.DeliveryReplayParams{DeliveryID: md.id, Actor: "model-operator", Now: m.now})
	if !md.state.Terminal() {
		m.logf("operator replays %s while %s", md.name, md.state)
		if !errors.Is(err, storage.ErrNotTerminal) {
			m.fail("replay of %s while %s: error %v, want ErrNotTerminal", md.name, md.state, err)
		}
		eff.unchanged[md.id] = true
		return
	}
	m.logf("operator replays %s from %s", md.name, md.state)
	if err != nil {
		m.fail("replay of %s: %v", md.name, err)
	}
	m.applyReplay(md, eff)
	if diff := md.diff(d.Delivery); len(diff) > 0 {
		m.fail("replayed row %s: %s", md.name, strings.Join(diff, "; "))
	}
}

func (m *modelRun) replayMany(w *simWorker, eff effect) {
	state := []storage.DeliveryState{storage.StateDelivered, storage.StateFailed}[m.rng.IntN(2)]
	var endpoint string
	if m.rng.IntN(2) == 0 {
		endpoint = m.endpoints[m.rng.IntN(len(m.endpoints))].ID
	}
	limit := 1 + m.rng.IntN(3)
	var want []*modelDelivery
	for _, md := range m.order {
		if md.state == state && (endpoint == "" || md.endpointID == endpoint) {
			want = append(want, md)
		}
	}
	slices.SortFunc(want, func(a, b *modelDelivery) int { return strings.Compare(a.id, b.id) })
	want = want[:min(limit, len(want))]
	n, err := w.store.DeliveryReplayMany(m.ctx, storage.DeliveryReplayManyParams{
		Filter: storage.DeliveryFilter{State: state, EndpointID: endpoint}, Actor: "model-operator", Limit: limit, Now: m.now,
	})
	m.logf("operator replays up to %d %s deliveries (endpoint %q) → %d", limit, state, endpoint, n.Count)
	if err != nil || n.Count != len(want) {
		m.fail("bulk replay of %s: %d, %v; model says %d", state, n.Count, err, len(want))
	}
	for _, md := range want {
		m.applyReplay(md, eff)
	}
}

// check compares the whole database with the model and then checks the
// invariants on what the store showed, against the previous step.
func (m *modelRun) check(eff effect, allHistories bool) {
	m.t.Helper()
	rows, err := m.workers[0].store.DeliveryList(m.ctx, storage.DeliveryListParams{Limit: 1000})
	if err != nil {
		m.fail("DeliveryList: %v", err)
	}
	if len(rows) != len(m.order) {
		m.fail("the store lists %d deliveries, the model has %d", len(rows), len(m.order))
	}
	got := make(map[string]storage.Delivery, len(rows))
	for _, d := range rows {
		got[d.ID] = d
	}
	var attemptRows, processing int
	var tokenConds []string
	for _, md := range m.order {
		d, ok := got[md.id]
		if !ok {
			m.fail("delivery %s is missing from the store", md.name)
		}
		m.invariants(md, d, eff)
		if diff := md.diff(d); len(diff) > 0 {
			m.fail("row %s disagrees with the model: %s", md.name, strings.Join(diff, "; "))
		}
		// A history changes only with the attempts counter (the table's
		// total is checked below) or a replay; the sweep rereads them all.
		prev, seen := m.seen[md.id]
		if allHistories || !seen || prev.Attempts != d.Attempts {
			m.checkAttempts(md, d)
		}
		if allHistories || eff.replayed[md.id] {
			m.checkReplays(md)
		}
		attemptRows += len(md.history)
		if md.token != "" {
			processing++
			tokenConds = append(tokenConds, fmt.Sprintf("(id = '%s' AND claim_token = '%s')", sqlQuote(md.id), sqlQuote(md.token)))
		}
	}
	m.seen = got

	// The whole tables against the model in one round trip; the single
	// counts are read only to say which one is off.
	counts := []struct {
		query string
		want  int
		what  string
	}{
		{"(SELECT count(*) FROM webhook_delivery_attempts)", attemptRows, "attempt rows: something wrote or lost an attempt"},
		{"(SELECT count(*) FROM webhook_delivery_replays)", m.replays, "replay records"},
		{"(SELECT count(*) FROM webhook_deliveries WHERE claim_token IS NOT NULL)", processing, "rows carrying a claim token"},
	}
	// Which token each row carries is checked where a claim sets it and
	// in the sweep: parsing the long condition every step would be most
	// of the run's time on SQLite under -race.
	if allHistories && processing > 0 {
		counts = append(counts, struct {
			query string
			want  int
			what  string
		}{"(SELECT count(*) FROM webhook_deliveries WHERE " + strings.Join(tokenConds, " OR ") + ")", processing,
			"processing rows carrying the token of their latest claim"})
	}
	conds := make([]string, len(counts))
	for i, c := range counts {
		conds[i] = fmt.Sprintf("%s = %d", c.query, c.want)
	}
	if m.queryInt("SELECT CASE WHEN "+strings.Join(conds, " AND ")+" THEN 1 ELSE 0 END") == 1 {
		return
	}
	for _, c := range counts {
		if n := m.queryInt("SELECT " + c.query); n != int64(c.want) {
			m.fail("the store has %d %s, the model %d", n, c.what, c.want)
		}
	}
	m.fail("the combined count query disagrees with its parts")
}

func sqlQuote(s string) string { return strings.ReplaceAll(s, "'", "''") }

func (m *modelRun) queryInt(q string) int64 {
	m.t.Helper()
	n, err := m.db.QueryInt(m.ctx, q)
	if err != nil {
		m.fail("%s: %v", q, err)
	}
	return n
}

// invariants are the rules of the state machine, checked on the stored row
// and its previous observation, without consulting the model's fields.
func (m *modelRun) invariants(md *modelDelivery, d storage.Delivery, eff effect) {
	m.t.Helper()
	if d.CycleAttempts < 0 || d.CycleAttempts > m.allowance || d.CycleAttempts > d.Attempts {
		m.fail("%s: cycle_attempts %d outside 0..min(allowance %d, attempts %d)", md.name, d.CycleAttempts, m.allowance, d.Attempts)
	}
	if (d.State == storage.StateProcessing) != (d.ClaimExpiresAt != nil) {
		m.fail("%s: state %s with claim_expires_at %s: a lease exactly while processing", md.name, d.State, fmtPtr(d.ClaimExpiresAt))
	}
	if d.State.Terminal() != (d.CompletedAt != nil) {
		m.fail("%s: state %s with completed_at %s: completed exactly while terminal", md.name, d.State, fmtPtr(d.CompletedAt))
	}
	prev, ok := m.seen[d.ID]
	if !ok {
		return
	}
	if d.Attempts < prev.Attempts {
		m.fail("%s: attempts fell from %d to %d", md.name, prev.Attempts, d.Attempts)
	}
	onlyAttempts := prev
	onlyAttempts.Attempts = d.Attempts
	if prev.State.Terminal() && !eff.replayed[d.ID] && !sameDelivery(onlyAttempts, d) {
		m.fail("%s: terminal row moved without a replay:\nbefore %+v\nafter  %+v", md.name, prev, d)
	}
	if eff.attemptsOnly[d.ID] && !sameDelivery(onlyAttempts, d) {
		m.fail("%s: a superseded token changed more than attempts:\nbefore %+v\nafter  %+v", md.name, prev, d)
	}
	if eff.unchanged[d.ID] && !sameDelivery(prev, d) {
		m.fail("%s: a refused write changed the row:\nbefore %+v\nafter  %+v", md.name, prev, d)
	}
}

// checkAttempts requires attempt numbers 1..attempts, each once, in order,
// each exactly as the model recorded it.
func (m *modelRun) checkAttempts(md *modelDelivery, d storage.Delivery) {
	m.t.Helper()
	as, err := m.workers[0].store.AttemptList(m.ctx, md.id)
	if err != nil {
		m.fail("AttemptList(%s): %v", md.name, err)
	}
	if len(as) != d.Attempts {
		m.fail("%s: %d attempts recorded, the row counts %d", md.name, len(as), d.Attempts)
	}
	for i, a := range as {
		if a.Number != i+1 {
			m.fail("%s: attempt numbers %v, want 1..%d each once", md.name, numbers(as), len(as))
		}
		m.wantAttempt(a, md.history[i])
	}
}

// checkReplays compares the replay audit trail with the model's.
func (m *modelRun) checkReplays(md *modelDelivery) {
	m.t.Helper()
	rs, err := m.workers[0].store.ReplayList(m.ctx, md.id)
	if err != nil {
		m.fail("ReplayList(%s): %v", md.name, err)
	}
	if len(rs) != len(md.replays) {
		m.fail("%s: %d replay records, the model has %d", md.name, len(rs), len(md.replays))
	}
	for i, r := range rs {
		w := md.replays[i]
		if r.DeliveryID != w.DeliveryID || r.Actor != w.Actor || r.PreviousState != w.PreviousState || !r.ReplayedAt.Equal(w.ReplayedAt) {
			m.fail("%s: replay record %d = %+v, model says %+v", md.name, i, r, w)
		}
	}
}
