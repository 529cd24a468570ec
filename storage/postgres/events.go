package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hymical/hymical/internal/groupcommit"
	"github.com/hymical/hymical/storage"
)

// EventCreate inserts ev and one pending delivery, due at the event's
// created_at, for every endpoint that Matches it, in one transaction. An
// empty ID becomes a new "evt" id and a zero CreatedAt the database clock.
//
// With an IdempotencyKey already taken, it writes nothing and returns the
// event and deliveries created then, with Duplicate set. Concurrent creators
// with one key are safe: ON CONFLICT waits for the other transaction and
// then sees its row.
//
// Creates arriving together in one process share a transaction (see
// createEvents); each still succeeds or fails alone.
func (s *Store) EventCreate(ctx context.Context, ev storage.Event) (storage.EventCreateResult, error) {
	if err := ev.Validate(); err != nil {
		return storage.EventCreateResult{}, createEventError(err)
	}
	if ev.ID == "" {
		ev.ID = storage.NewID("evt")
	}
	return s.events.Do(ctx, ev)
}

// createEventError says where an error of a create came from when no
// statement made it: the caller's context ended, or its batch stopped.
func createEventError(err error) error {
	return fmt.Errorf("postgres: %s: %w", createEventOp, err)
}

const createEventOp = "event create"

// maxEventBatch bounds the creates that share one transaction.
const maxEventBatch = 64

// eventBatch is a batch of concurrent creates.
type eventBatch = []*groupcommit.Call[storage.Event, storage.EventCreateResult]

// createEvents writes batch in one transaction: the endpoints are read
// once, and the events and their deliveries are inserted with one
// statement instead of one transaction of four statements per create.
// A create that cannot be written on its own terms (an address that names
// no endpoint, an id already taken, a key already used) is answered so
// without writing and without failing the others; only a failure of the
// transaction itself fails them all.
func (s *Store) createEvents(batch eventBatch) {
	// The transaction serves every caller in the batch, so no one caller's
	// cancellation ends it; it ends when all have given up (a database
	// that does not answer must not hold the batch for ever).
	ctx, stop := groupcommit.BatchContext(batch)
	defer stop()
	var live eventBatch
	for _, c := range batch {
		if err := c.Ctx.Err(); err != nil {
			c.Err = createEventError(err)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	due, err := s.writeEvents(ctx, live)
	if err == nil && due {
		s.notified()
	}
	if err != nil {
		err = mapErr(createEventOp, err)
		for _, c := range live {
			if c.Err != nil {
				continue
			}
			c.Out, c.Err = storage.EventCreateResult{}, err
			if ctx.Err() != nil {
				// Ended because every caller gave up: each hears why it did.
				c.Err = createEventError(c.Ctx.Err())
			}
		}
	}
}

// writeEvents writes the creates live in one transaction and reports
// whether it sent a wake-up. Its statements go out in three round trips:
// BEGIN with the fan-out lock and the endpoints' read, the inserts, and
// the wake-up with COMMIT. As separate calls on a pgx.Tx they were seven,
// and on two cores every round trip costs both processes system calls and
// a wait.
func (s *Store) writeEvents(ctx context.Context, live eventBatch) (due bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// A connection left inside the transaction by an error (one whose
	// ROLLBACK below failed too) is closed, not reused.
	defer conn.Release()
	defer func() {
		if err != nil {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
	}()

	// Taken before the endpoints are read, so the read is of a snapshot no
	// delete can pass: a delete that committed is seen, and one under way
	// waits for this transaction (fanOutLockKey).
	forms, addressed := storage.FanOutKeys(groupcommit.Inputs(live))
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(lockFanOutSQL, fanOutLockKey)
	b.Queue(fanOutEndpointsSQL, forms, addressed)
	br := conn.SendBatch(ctx, b)
	endpoints, err := func() ([]storage.Endpoint, error) {
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return nil, err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		return collectFanOutEndpoints(rows)
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	for _, round := range eventRounds(live) {
		if err := createRound(ctx, conn, endpoints, round); err != nil {
			return false, err
		}
	}
	// One wake-up for the whole batch, sent on commit.
	b = &pgx.Batch{}
	if due = madeDue(live); due {
		b.Queue(notifySQL, s.wake.id)
	}
	b.Queue("COMMIT")
	return due, conn.SendBatch(ctx, b).Close()
}

// querier runs statements: a pgx.Tx, or a connection inside a transaction
// it began itself.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// madeDue reports whether a batch of creates made a delivery that is due
// now: one not held, of a create that was not a duplicate.
func madeDue(batch eventBatch) bool {
	for _, c := range batch {
		if c.Err != nil || c.Out.Duplicate {
			continue
		}
		for _, d := range c.Out.Deliveries {
			if !d.Held {
				return true
			}
		}
	}
	return false
}

// eventRounds splits calls into rounds in which no two share an id or an
// idempotency key, keeping their order: a create that repeats an earlier
// one's id or key is written in a later round, in the same transaction, so
// it meets the earlier row exactly as it would have one transaction later.
func eventRounds(calls eventBatch) []eventBatch {
	var rounds []eventBatch
	last := map[string]int{}
	for _, c := range calls {
		keys := []string{"id " + c.In.ID}
		if c.In.IdempotencyKey != "" {
			keys = append(keys, "key "+c.In.IdempotencyKey)
		}
		r := 0
		for _, k := range keys {
			if prev, ok := last[k]; ok {
				r = max(r, prev+1)
			}
		}
		for _, k := range keys {
			last[k] = r
		}
		for len(rounds) <= r {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], c)
	}
	return rounds
}

// createRound writes creates that share no id and no key.
func createRound(ctx context.Context, tx querier, endpoints []storage.Endpoint, calls eventBatch) error {
	// Rows go in in key order, then id order, so that two transactions
	// writing some of the same keys (or ids) take them in the same order:
	// in opposite orders, each would wait for the other's row.
	slices.SortFunc(calls, func(a, b *groupcommit.Call[storage.Event, storage.EventCreateResult]) int {
		return cmp.Or(cmp.Compare(a.In.IdempotencyKey, b.In.IdempotencyKey), cmp.Compare(a.In.ID, b.In.ID))
	})
	var (
		creates    []eventCreate
		events     eventRows
		deliveries deliveryRows
		ordered    []string
	)
	for _, c := range calls {
		ev := c.In
		targets, err := storage.FanOut(endpoints, ev)
		if err != nil {
			// A key seen before still answers with the first event, as
			// it would have before the fan-out was looked at.
			if answered, kerr := answerRepeat(ctx, tx, c); answered || kerr != nil {
				if kerr != nil {
					return kerr
				}
				continue
			}
			c.Err = mapErr(createEventOp, err)
			continue
		}
		cr := eventCreate{c: c}
		for _, t := range targets {
			d := storage.Delivery{ID: storage.NewID("dlv"), EndpointID: t.ID, EventID: ev.ID,
				State: storage.StatePending, Held: t.DisabledAt != nil || t.Ordered}
			cr.deliveries = append(cr.deliveries, d)
			deliveries.add(d)
			if t.Ordered && !slices.Contains(ordered, t.ID) {
				ordered = append(ordered, t.ID)
			}
		}
		creates = append(creates, cr)
		events.add(ev)
	}
	if len(creates) == 0 {
		return nil
	}
	inserted, err := insertEvents(ctx, tx, events, deliveries)
	if err != nil {
		return err
	}
	var made []eventCreate
	for _, cr := range creates {
		at, ok := inserted[cr.c.In.ID]
		if ok {
			cr.c.In.CreatedAt = at
			made = append(made, cr)
			continue
		}
		if answered, err := answerRepeat(ctx, tx, cr.c); answered || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		cr.c.Err = fmt.Errorf("postgres: %s: %w: event id %s is taken; leave the id empty to get a new one",
			createEventOp, storage.ErrConflict, cr.c.In.ID)
	}
	if len(made) == 0 {
		return nil
	}
	return answerMade(ctx, tx, made, ordered, deliveries.ids)
}

// eventCreate is one create of a round with the delivery rows written for
// it, less the database's clock, which is read back.
type eventCreate struct {
	c          *groupcommit.Call[storage.Event, storage.EventCreateResult]
	deliveries []storage.Delivery
}

// eventRows are the events of one insert, a slice per column for unnest.
type eventRows struct {
	ids, types, forms, submissions, traces, addressed []string
	payloads                                          [][]byte
	keys                                              []*string
	createdAt                                         []*time.Time
}

func (r *eventRows) add(ev storage.Event) {
	r.ids = append(r.ids, ev.ID)
	r.types = append(r.types, ev.Type)
	r.forms = append(r.forms, ev.FormID)
	r.submissions = append(r.submissions, ev.SubmissionID)
	r.payloads = append(r.payloads, []byte(ev.Payload))
	r.traces = append(r.traces, ev.TraceParent)
	r.addressed = append(r.addressed, ev.EndpointID)
	var key *string
	if ev.IdempotencyKey != "" {
		key = &ev.IdempotencyKey
	}
	r.keys = append(r.keys, key)
	var at *time.Time
	if !ev.CreatedAt.IsZero() {
		at = &ev.CreatedAt
	}
	r.createdAt = append(r.createdAt, at)
}

// deliveryRows are the deliveries of one insert, a slice per column.
type deliveryRows struct {
	ids, endpoints, events []string
	held                   []bool
}

func (r *deliveryRows) add(d storage.Delivery) {
	r.ids = append(r.ids, d.ID)
	r.endpoints = append(r.endpoints, d.EndpointID)
	r.events = append(r.events, d.EventID)
	r.held = append(r.held, d.Held)
}

// insertEventsSQL is one statement for the events and their deliveries: a
// delivery is inserted only with an event this statement inserted. No
// conflict target: a taken id or a used key skips the event (and so its
// deliveries) instead of failing the statement, and which of the two it
// was is read after. ON CONFLICT waits for a concurrent transaction
// holding the same key and then sees its row. The rest of each row is what
// was written, so only the database's clock is read back.
const insertEventsSQL = `
WITH made AS (
	INSERT INTO webhook_events AS e (id, type, form_id, submission_id, payload,
		idempotency_key, trace_parent, created_at, endpoint_id)
	SELECT x.id, x.type, x.form_id, x.submission_id, x.payload, x.idempotency_key, x.trace_parent,
		coalesce(x.created_at, now()), x.endpoint_id
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::text[],
		$8::timestamptz[], $9::text[])
		AS x (id, type, form_id, submission_id, payload, idempotency_key, trace_parent, created_at, endpoint_id)
	ON CONFLICT DO NOTHING
	RETURNING e.id, e.created_at
), fanned AS (
	INSERT INTO webhook_deliveries (id, endpoint_id, event_id, state, attempts, cycle_attempts,
		next_attempt_at, created_at, held)
	SELECT x.id, x.endpoint_id, x.event_id, 'pending', 0, 0, made.created_at, made.created_at, x.held
	FROM unnest($10::text[], $11::text[], $12::text[], $13::boolean[]) AS x (id, endpoint_id, event_id, held)
	JOIN made ON made.id = x.event_id
)
SELECT id, created_at FROM made`

// insertEvents runs insertEventsSQL and returns when each event it
// inserted was created, by id.
func insertEvents(ctx context.Context, tx querier, ev eventRows, d deliveryRows) (map[string]time.Time, error) {
	rows, err := tx.Query(ctx, insertEventsSQL,
		ev.ids, ev.types, ev.forms, ev.submissions, ev.payloads, ev.keys, ev.traces, ev.createdAt, ev.addressed,
		d.ids, d.endpoints, d.events, d.held)
	if err != nil {
		return nil, err
	}
	inserted := map[string]time.Time{}
	var (
		id string
		at time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		inserted[id] = at
		return nil
	})
	return inserted, err
}

// answerRepeat answers c with the event its idempotency key made before,
// if it has a key and the key was used; false when there is nothing to
// answer with.
func answerRepeat(ctx context.Context, tx querier, c *groupcommit.Call[storage.Event, storage.EventCreateResult]) (bool, error) {
	key := c.In.IdempotencyKey
	if key == "" {
		return false, nil
	}
	res, err := existingEvent(ctx, tx, key)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	c.Out = res
	return true, nil
}

// answerMade answers the creates whose events were inserted, each with
// its deliveries. ordered are the ordered endpoints among them and ids
// every delivery the round wrote.
func answerMade(ctx context.Context, tx querier, made []eventCreate, ordered, ids []string) error {
	var written []storage.Delivery
	if len(ordered) > 0 {
		// An ordered endpoint with nothing under way lets its next delivery
		// go, which may be one of these: read them back after it.
		if _, err := tx.Exec(ctx, promoteSQL, ordered); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries AS d
			WHERE d.id = ANY($1::text[])`, ids)
		if err != nil {
			return err
		}
		if written, err = collectDeliveries(rows); err != nil {
			return err
		}
	} else {
		for _, cr := range made {
			for _, d := range cr.deliveries {
				d.NextAttemptAt, d.CreatedAt = cr.c.In.CreatedAt, cr.c.In.CreatedAt
				written = append(written, d)
			}
		}
	}
	byEvent := map[string][]storage.Delivery{}
	for _, d := range written {
		byEvent[d.EventID] = append(byEvent[d.EventID], d)
	}
	for _, cr := range made {
		ds := byEvent[cr.c.In.ID]
		if ds == nil {
			ds = []storage.Delivery{}
		}
		// Match the order a duplicate create reads back.
		sort.Slice(ds, func(i, j int) bool { return ds[i].EndpointID < ds[j].EndpointID })
		cr.c.Out = storage.EventCreateResult{Event: cr.c.In, Deliveries: ds}
	}
	return nil
}

// fanOutEndpointsSQL reads, with what storage.FanOut looks at, the
// endpoints that can match a batch of creates: hymical_fan_out (migration
// 13) returns those listed under one of the batch's form ids ($1) in
// webhook_endpoint_forms, those of every form, and those the batch's
// events are addressed to ($2). Each is a probe of an index, so the read
// costs the endpoints that can match, not the endpoints that exist. FanOut
// then matches each event among them as before: event types, and an
// event's own form among the batch's. Deleted endpoints are left out.
const fanOutEndpointsSQL = `SELECT id, event_types, form_ids, disabled_at, ordered
	FROM hymical_fan_out($1::text[], $2::text[]) ORDER BY id COLLATE "C"`

// collectFanOutEndpoints reads the rows of fanOutEndpointsSQL.
func collectFanOutEndpoints(rows pgx.Rows) ([]storage.Endpoint, error) {
	var ep storage.Endpoint
	var all []storage.Endpoint
	_, err := pgx.ForEachRow(rows, []any{&ep.ID, &ep.EventTypes, &ep.FormIDs, &ep.DisabledAt, &ep.Ordered}, func() error {
		all = append(all, ep)
		ep = storage.Endpoint{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read endpoints to fan out to: %w", err)
	}
	return all, nil
}

// existingEvent reads back the event that already holds key, with the
// deliveries it fanned out to.
func existingEvent(ctx context.Context, tx querier, key string) (storage.EventCreateResult, error) {
	ev, err := scanEvent(tx.QueryRow(ctx,
		`SELECT `+eventColumns+` FROM webhook_events AS e WHERE e.idempotency_key = $1`, key))
	if err != nil {
		return storage.EventCreateResult{}, fmt.Errorf("read event with idempotency key: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries AS d
		WHERE d.event_id = $1 ORDER BY d.endpoint_id`, ev.ID)
	if err != nil {
		return storage.EventCreateResult{}, err
	}
	ds, err := collectDeliveries(rows)
	if err != nil {
		return storage.EventCreateResult{}, err
	}
	return storage.EventCreateResult{Event: ev, Deliveries: ds, Duplicate: true}, nil
}

// EventGet returns the event with this id, or storage.ErrNotFound.
func (s *Store) EventGet(ctx context.Context, id string) (storage.Event, error) {
	ev, err := scanEvent(s.pool.QueryRow(ctx, `SELECT `+eventColumns+` FROM webhook_events AS e WHERE e.id = $1`, id))
	if err != nil {
		return storage.Event{}, mapErr("event get "+id, err)
	}
	return ev, nil
}

const eventColumns = `e.id, e.type, e.form_id, e.submission_id, e.payload, e.idempotency_key,
	e.trace_parent, e.created_at, e.endpoint_id`

// eventScan holds the columns that need converting after the scan.
type eventScan struct {
	ev      storage.Event
	payload []byte
	key     *string
}

func (s *eventScan) dest() []any {
	return []any{&s.ev.ID, &s.ev.Type, &s.ev.FormID, &s.ev.SubmissionID, &s.payload, &s.key,
		&s.ev.TraceParent, &s.ev.CreatedAt, &s.ev.EndpointID}
}

func (s *eventScan) event() storage.Event {
	ev := s.ev
	ev.Payload = json.RawMessage(s.payload)
	if s.key != nil {
		ev.IdempotencyKey = *s.key
	}
	return ev
}

func scanEvent(row pgx.Row) (storage.Event, error) {
	var s eventScan
	if err := row.Scan(s.dest()...); err != nil {
		return storage.Event{}, err
	}
	return s.event(), nil
}
