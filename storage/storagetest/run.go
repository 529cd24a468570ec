package storagetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// Run runs every rule of the suite against b.
func Run(t *testing.T, b Backend) {
	t.Run("Endpoints", func(t *testing.T) { t.Parallel(); testEndpoints(t, b) })
	t.Run("Events", func(t *testing.T) { t.Parallel(); testEvents(t, b) })
	t.Run("FanOut", func(t *testing.T) { t.Parallel(); testFanOut(t, b) })
	t.Run("Claim", func(t *testing.T) { t.Parallel(); testClaim(t, b) })
	t.Run("Complete", func(t *testing.T) { t.Parallel(); testComplete(t, b) })
	t.Run("Fence", func(t *testing.T) { t.Parallel(); testFence(t, b) })
	t.Run("Release", func(t *testing.T) { t.Parallel(); testRelease(t, b) })
	t.Run("Unsent", func(t *testing.T) { t.Parallel(); testUnsent(t, b) })
	t.Run("Replay", func(t *testing.T) { t.Parallel(); testReplay(t, b) })
	t.Run("Queries", func(t *testing.T) { t.Parallel(); testQueries(t, b) })
	t.Run("Workers", func(t *testing.T) { t.Parallel(); testWorkers(t, b) })
	t.Run("Migrations", func(t *testing.T) { t.Parallel(); testMigrations(t, b) })
	t.Run("Concurrency", func(t *testing.T) { t.Parallel(); testConcurrency(t, b) })
	t.Run("Model", func(t *testing.T) { t.Parallel(); testModel(t, b) })
	t.Run("Batch", func(t *testing.T) { t.Parallel(); testBatch(t, b) })
	t.Run("Prune", func(t *testing.T) { t.Parallel(); testPrune(t, b) })
	t.Run("Controls", func(t *testing.T) { t.Parallel(); testControls(t, b) })
	t.Run("Share", func(t *testing.T) { t.Parallel(); testShare(t, b) })
	t.Run("ShareRule", func(t *testing.T) { t.Parallel(); testShareRule(t, b) })
	t.Run("QueueHeads", func(t *testing.T) { t.Parallel(); testQueueHeads(t, b) })
	t.Run("Secrets", func(t *testing.T) { t.Parallel(); testSecrets(t, b) })
	t.Run("Headers", func(t *testing.T) { t.Parallel(); testHeaders(t, b) })
	t.Run("Wakeups", func(t *testing.T) { t.Parallel(); testWakeups(t, b) })
	t.Run("EndpointDelete", func(t *testing.T) { t.Parallel(); testEndpointDelete(t, b) })
	t.Run("KeyedEndpointCreate", func(t *testing.T) { t.Parallel(); testKeyedEndpointCreate(t, b) })
	t.Run("KeyedEndpointRotate", func(t *testing.T) { t.Parallel(); testKeyedEndpointRotate(t, b) })
	t.Run("KeyedDeliveryReplay", func(t *testing.T) { t.Parallel(); testKeyedDeliveryReplay(t, b) })
	t.Run("KeyedDeliveryReplayMany", func(t *testing.T) { t.Parallel(); testKeyedDeliveryReplayMany(t, b) })
	t.Run("Away", func(t *testing.T) { t.Parallel(); testAway(t, b) })
	t.Run("Access", func(t *testing.T) { t.Parallel(); testAccess(t, b) })
	t.Run("Scope", func(t *testing.T) { t.Parallel(); testScope(t, b) })
	t.Run("ConsoleSessions", func(t *testing.T) { t.Parallel(); testConsoleSessions(t, b) })
}

// lease is the lease every test claims with unless it says otherwise.
const lease = 30 * time.Second

// fixture is a fresh database with a clock the test moves by hand.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	store storage.Store
	db    Database
	// now is the time claims are made at: a minute ahead of the wall clock,
	// so rows created by the store's own clock are already due.
	now time.Time
}

func newFixture(t *testing.T, b Backend) *fixture {
	t.Helper()
	s, db := newStore(t, b)
	return &fixture{
		t:     t,
		ctx:   context.Background(),
		store: s,
		db:    db,
		now:   time.Now().UTC().Add(time.Minute).Truncate(time.Millisecond),
	}
}

// at returns the fixture's now moved by d.
func (f *fixture) at(d time.Duration) time.Time { return f.now.Add(d) }

func (f *fixture) endpoint(mutate ...func(*storage.Endpoint)) storage.Endpoint {
	f.t.Helper()
	e := storage.Endpoint{
		Transport: "http",
		URL:       "https://receiver.example/hook",
		Secrets:   []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)},
	}
	for _, m := range mutate {
		m(&e)
	}
	created, err := f.store.EndpointCreate(f.ctx, storage.EndpointCreateParams{Endpoint: e})
	if err != nil {
		f.t.Fatalf("EndpointCreate: %v", err)
	}
	return created.Endpoint
}

func submissionPayload(subID, formID string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"type":"submission.received","submission":{"id":%q,"form_id":%q,"data":{"email":"a@example.com"}}}`, subID, formID))
}

// event creates a submission event for formID and returns what it fanned out to.
func (f *fixture) event(formID string) storage.EventCreateResult {
	f.t.Helper()
	sub := storage.NewID("sub")
	res, err := f.store.EventCreate(f.ctx, storage.Event{
		Type:         "submission.received",
		FormID:       formID,
		SubmissionID: sub,
		Payload:      submissionPayload(sub, formID),
	})
	if err != nil {
		f.t.Fatalf("EventCreate: %v", err)
	}
	return res
}

// delivery creates one endpoint and one event and returns the single delivery.
func (f *fixture) delivery() storage.Delivery {
	f.t.Helper()
	f.endpoint()
	res := f.event("form_1")
	if len(res.Deliveries) != 1 {
		f.t.Fatalf("want 1 delivery, got %d", len(res.Deliveries))
	}
	return res.Deliveries[0]
}

func (f *fixture) claim(store storage.Store, now time.Time, limit int) []storage.Claim {
	f.t.Helper()
	claims, err := store.DeliveryClaim(f.ctx, storage.DeliveryClaimParams{Limit: limit, Lease: lease, Now: now})
	if err != nil {
		f.t.Fatalf("DeliveryClaim at %s: %v", now, err)
	}
	return claims
}

// claimOne claims at now and requires exactly the delivery id.
func (f *fixture) claimOne(store storage.Store, now time.Time, id string) storage.Claim {
	f.t.Helper()
	claims := f.claim(store, now, 10)
	if len(claims) != 1 || claims[0].Delivery.ID != id {
		f.t.Fatalf("claim at %s: want exactly delivery %s, got %s", now, id, claimIDs(claims))
	}
	return claims[0]
}

func claimIDs(claims []storage.Claim) []string {
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.Delivery.ID
	}
	return ids
}

// complete ends a claim as its owner and requires success.
func (f *fixture) complete(store storage.Store, c storage.Claim, outcome storage.OutcomeKind, now time.Time, allowance int) (storage.Delivery, storage.Attempt) {
	f.t.Helper()
	d, a, err := store.DeliveryComplete(f.ctx, completeParams(c, outcome, now, allowance))
	if err != nil {
		f.t.Fatalf("DeliveryComplete(%s, %s): %v", c.Delivery.ID, outcome, err)
	}
	return d, a
}

func completeParams(c storage.Claim, outcome storage.OutcomeKind, now time.Time, allowance int) storage.DeliveryCompleteParams {
	status := 200
	switch outcome {
	case storage.OutcomeRetryable:
		status = 503
	case storage.OutcomePermanent:
		status = 400
	}
	return storage.DeliveryCompleteParams{
		DeliveryID:       c.Delivery.ID,
		Token:            c.Token,
		Outcome:          outcome,
		HTTPStatus:       status,
		Error:            errorFor(outcome),
		StartedAt:        now.Add(-time.Second),
		FinishedAt:       now,
		TraceID:          "4bf92f3577b34da6a3ce929d0e0e4736",
		RetryDelay:       10 * time.Second,
		MaxCycleAttempts: allowance,
		Now:              now,
	}
}

func errorFor(outcome storage.OutcomeKind) string {
	if outcome == storage.OutcomeDelivered {
		return ""
	}
	return "receiver answered " + string(outcome)
}

func lateParams(c storage.Claim, outcome storage.OutcomeKind, now time.Time) storage.AttemptRecordLateParams {
	p := completeParams(c, outcome, now, 0)
	return storage.AttemptRecordLateParams{
		DeliveryID: p.DeliveryID, Token: p.Token, Outcome: p.Outcome, HTTPStatus: p.HTTPStatus,
		Error: p.Error, StartedAt: p.StartedAt, FinishedAt: p.FinishedAt, TraceID: p.TraceID,
	}
}

func (f *fixture) get(id string) storage.Delivery {
	f.t.Helper()
	d, err := f.store.DeliveryGet(f.ctx, id)
	if err != nil {
		f.t.Fatalf("DeliveryGet(%s): %v", id, err)
	}
	return d
}

func (f *fixture) attempts(id string) []storage.Attempt {
	f.t.Helper()
	as, err := f.store.AttemptList(f.ctx, id)
	if err != nil {
		f.t.Fatalf("AttemptList(%s): %v", id, err)
	}
	return as
}

// tokenIs reports whether the row's stored claim token equals token ("" means NULL).
func (f *fixture) tokenIs(id, token string) bool {
	f.t.Helper()
	q := fmt.Sprintf("SELECT count(*) FROM webhook_deliveries WHERE id = '%s' AND claim_token = '%s'", id, token)
	if token == "" {
		q = fmt.Sprintf("SELECT count(*) FROM webhook_deliveries WHERE id = '%s' AND claim_token IS NULL", id)
	}
	n, err := f.db.QueryInt(f.ctx, q)
	if err != nil {
		f.t.Fatalf("query claim token: %v", err)
	}
	return n == 1
}

func (f *fixture) count(q string) int64 {
	f.t.Helper()
	n, err := f.db.QueryInt(f.ctx, q)
	if err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// wantState checks the fields of d that the state machine owns.
func wantState(t *testing.T, d storage.Delivery, state storage.DeliveryState, attempts, cycle int) {
	t.Helper()
	if d.State != state || d.Attempts != attempts || d.CycleAttempts != cycle {
		t.Fatalf("delivery %s: got state=%s attempts=%d cycle_attempts=%d, want state=%s attempts=%d cycle_attempts=%d",
			d.ID, d.State, d.Attempts, d.CycleAttempts, state, attempts, cycle)
	}
}

// wantNumbers checks the attempt numbers are exactly 1..n in order, and
// which of them are late.
func wantNumbers(t *testing.T, as []storage.Attempt, late ...int) {
	t.Helper()
	isLate := map[int]bool{}
	for _, n := range late {
		isLate[n] = true
	}
	for i, a := range as {
		if a.Number != i+1 {
			t.Fatalf("attempt numbers: want 1..%d in order, got %v", len(as), numbers(as))
		}
		if a.Late != isLate[a.Number] {
			t.Fatalf("attempt %d: late=%v, want %v (late attempts %v)", a.Number, a.Late, isLate[a.Number], late)
		}
	}
}

func numbers(as []storage.Attempt) []int {
	ns := make([]int, len(as))
	for i, a := range as {
		ns[i] = a.Number
	}
	return ns
}

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

func ptrTimeEqual(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}

// sameDelivery compares two snapshots of one row: every field of
// storage.Delivery, Held included, times by instant. The struct is compared
// whole, so a field added to Delivery is compared without being listed
// here. The row's claim_token, which Delivery does not carry, is tokenIs's.
func sameDelivery(a, b storage.Delivery) bool { return sameRow(a, b) }

// sameRow reports whether a and b, two reads of one row, are equal field by
// field, with time.Time and *time.Time fields compared by instant.
func sameRow[T any](a, b T) bool {
	return reflect.DeepEqual(byInstant(a), byInstant(b))
}

// byInstant returns a copy of v with every exported time.Time and
// *time.Time in it (in nested structs and slices too) in UTC and without a
// monotonic reading, so that DeepEqual compares times by instant.
func byInstant[T any](v T) T {
	c := reflect.New(reflect.TypeFor[T]()).Elem()
	c.Set(reflect.ValueOf(v))
	normaliseTimes(c)
	return c.Interface().(T)
}

func normaliseTimes(v reflect.Value) {
	timeType := reflect.TypeFor[time.Time]()
	switch {
	case !v.CanSet():
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(v.Interface().(time.Time).UTC()))
	case v.Kind() == reflect.Pointer && v.Type().Elem() == timeType:
		if !v.IsNil() {
			t := v.Elem().Interface().(time.Time).UTC()
			v.Set(reflect.ValueOf(&t))
		}
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				normaliseTimes(v.Field(i))
			}
		}
	case v.Kind() == reflect.Slice && !v.IsNil():
		// A copy, so the caller's slice is left as it was.
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		for i := range c.Len() {
			normaliseTimes(c.Index(i))
		}
		v.Set(c)
	}
}

func wantUnchanged(t *testing.T, before, after storage.Delivery, why string) {
	t.Helper()
	if !sameDelivery(before, after) {
		t.Fatalf("%s changed the delivery:\nbefore %+v\nafter  %+v", why, before, after)
	}
}

// endpointOf reads the endpoint a delivery goes to.
func (f *fixture) endpointOf(d storage.Delivery) storage.Endpoint {
	f.t.Helper()
	e, err := f.store.EndpointGet(f.ctx, d.EndpointID)
	if err != nil {
		f.t.Fatalf("EndpointGet(%s): %v", d.EndpointID, err)
	}
	return e
}

// setFailingSince starts a run of failures on the endpoint, as a failed
// attempt of some other delivery would have, so that a write that ends
// the run shows. The store keeps the column itself; EndpointUpdate
// ignores it.
func (f *fixture) setFailingSince(endpointID string, at time.Time) storage.Endpoint {
	f.t.Helper()
	q := fmt.Sprintf("UPDATE webhook_endpoints SET failing_since = %s WHERE id = '%s'", f.db.TimeLiteral(at), endpointID)
	if err := f.db.Exec(f.ctx, q); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
	e, err := f.store.EndpointGet(f.ctx, endpointID)
	if err != nil || e.FailingSince == nil || !e.FailingSince.Equal(at) {
		f.t.Fatalf("endpoint after setting failing_since to %s: %+v, %v", at, e, err)
	}
	return e
}

// wantEndpointUnchanged checks a write left the endpoint's row as it was,
// failing_since and disabled_at included.
func wantEndpointUnchanged(t *testing.T, before, after storage.Endpoint, why string) {
	t.Helper()
	if !sameRow(before, after) {
		t.Fatalf("%s changed the endpoint:\nbefore %+v\nafter  %+v", why, before, after)
	}
}
