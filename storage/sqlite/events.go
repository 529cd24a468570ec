package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/hymical/hymical/internal/groupcommit"
	"github.com/hymical/hymical/storage"
)

const eventColumns = `id, type, form_id, submission_id, payload, idempotency_key, trace_parent, created_at,
	endpoint_id`

const eventsByIDSQL = `SELECT ` + eventColumns + ` FROM webhook_events
	WHERE id IN (SELECT value FROM json_each(?))`

const insertEventSQL = `INSERT INTO webhook_events (` + eventColumns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

const insertDeliverySQL = `
	INSERT INTO webhook_deliveries
		(id, endpoint_id, event_id, state, attempts, cycle_attempts, next_attempt_at, created_at, held)
	VALUES (?, ?, ?, 'pending', 0, 0, ?, ?, ?)`

// fanOutEndpointsSQL reads, with only what matching needs (decoding every
// endpoint's config and secrets for every event cost more than the insert),
// the endpoints that can match a batch of creates: those listed under one
// of the batch's form ids (?1, a JSON list) in webhook_endpoint_forms,
// those of every form, and those the batch's events are addressed to (?2).
// Each is a probe of an index, so the read costs the endpoints that can
// match, not the endpoints that exist; FanOut matches each event among
// them. A deleted endpoint has no rows in webhook_endpoint_forms and gets
// nothing; it runs in the writer's transaction, so no delete can come
// between it and the delivery insert.
const fanOutEndpointsSQL = `SELECT e.id, e.event_types, e.form_ids, e.disabled_at, e.ordered
	FROM webhook_endpoints AS e
	WHERE e.deleted_at IS NULL AND e.id IN (
		SELECT f.endpoint_id FROM webhook_endpoint_forms AS f WHERE f.form_id IN (SELECT value FROM json_each(?1))
		UNION ALL
		SELECT a.id FROM webhook_endpoints AS a WHERE a.deleted_at IS NULL AND a.form_ids = '[]'
		UNION ALL
		SELECT value FROM json_each(?2))
	ORDER BY e.id`

// maxEventBatch bounds the creates that share one transaction.
const maxEventBatch = 64

// eventBatch is a batch of concurrent creates.
type eventBatch = []*groupcommit.Call[storage.Event, storage.EventCreateResult]

const createEventOp = "create event"

// createEventsSQL are the statements a batch of creates runs, prepared
// once: the event insert, the fan-out read, the delivery insert, and the
// savepoint that keeps each create's writes its own.
var createEventsSQL = []string{insertEventSQL, fanOutEndpointsSQL, insertDeliverySQL,
	`SAVEPOINT event_create`, `RELEASE event_create`, eventByKeySQL}

// lowerHeadSQL brings an endpoint's queue head (see migration 0014) back to
// a claimable delivery ahead of it. The update trigger does this for rows
// made claimable by an update; a batch of creates does it here, once per
// endpoint, since a trigger on inserts made every insert cost more the
// more rows the table held.
const lowerHeadSQL = `INSERT INTO webhook_endpoint_queues (endpoint_id, next_due_at, head_id) VALUES (?, ?, ?)
	ON CONFLICT (endpoint_id) DO UPDATE SET next_due_at = excluded.next_due_at, head_id = excluded.head_id
	WHERE next_due_at IS NULL OR (excluded.next_due_at, excluded.head_id) < (next_due_at, head_id)`

// eventByKeySQL finds the event an idempotency key made.
const eventByKeySQL = `SELECT ` + eventColumns + ` FROM webhook_events WHERE idempotency_key = ?`

// createStmts are a batch's statements, bound to its transaction:
// insertEventSQL, insertDeliverySQL and eventByKeySQL.
type createStmts struct {
	event, delivery, byKey *sql.Stmt
}

// EventCreate inserts the event and one pending delivery, due at the event's
// CreatedAt (the Go clock when zero), for every endpoint that matches it, or
// for ev.EndpointID alone when it names one. A delivery to a disabled or
// ordered endpoint starts held. With an idempotency key already seen it
// writes nothing and returns the first event and its deliveries, marked
// Duplicate. Concurrent creates share one write transaction (see
// createEvents); each still succeeds or fails alone.
func (s *Store) EventCreate(ctx context.Context, ev storage.Event) (storage.EventCreateResult, error) {
	if err := ev.Validate(); err != nil {
		return storage.EventCreateResult{}, createEventError(err)
	}
	if ev.ID == "" {
		ev.ID = storage.NewID("evt")
	}
	ev.CreatedAt = s.now(ev.CreatedAt)
	ev.Payload = append([]byte(nil), ev.Payload...)
	return s.events.Do(ctx, ev)
}

// EventGet reads one event.
func (s *Store) EventGet(ctx context.Context, id string) (storage.Event, error) {
	ev, err := scanEvent(s.reader.QueryRowContext(ctx, `SELECT `+eventColumns+` FROM webhook_events WHERE id = ?`, id))
	if err != nil {
		return storage.Event{}, s.mapErr("get event "+id, err)
	}
	return ev, nil
}

// createEventError says where an error of a create came from when no
// statement made it: the caller's context ended, or its batch stopped.
func createEventError(err error) error {
	return fmt.Errorf("sqlite: %s: %w", createEventOp, err)
}

// createEvents writes batch in one write transaction. SQLite has one
// writer, so creates arriving together would each wait for the lock and
// then pay for a transaction of their own: its begin, its commit's write of
// the same few pages to the WAL, and writer time that claims and
// completions need. Each create runs inside a savepoint of its own, so a
// create that fails (a duplicate id, an address that names no endpoint) is
// rolled back alone and the others commit. A create whose caller has given
// up is skipped. Every create in the batch gets its result or its error.
func (s *Store) createEvents(batch eventBatch) {
	// The transaction serves every caller in the batch, so no one caller's
	// cancellation ends it; each create checks its own caller's context.
	// It cannot wait for ever either: the busy timeout bounds every wait
	// for the file's lock. (A context that can end would also cost each
	// statement a goroutine watching it, in the driver.)
	ctx := context.WithoutCancel(batch[0].Ctx)
	st, err := s.prepare(ctx, createEventsSQL...)
	if err == nil {
		err = s.write(ctx, createEventOp, func(tx *sql.Tx) error {
			endpoints, err := fanOutEndpoints(ctx, tx.StmtContext(ctx, st[1]), batch)
			if err != nil {
				return err
			}
			// Bound to the transaction once for the whole batch.
			ins := createStmts{event: tx.StmtContext(ctx, st[0]), delivery: tx.StmtContext(ctx, st[2]), byKey: tx.StmtContext(ctx, st[5])}
			savepoint, release := tx.StmtContext(ctx, st[3]), tx.StmtContext(ctx, st[4])
			for _, c := range batch {
				if err := c.Ctx.Err(); err != nil {
					c.Err = createEventError(err)
					continue
				}
				if _, err := savepoint.ExecContext(ctx); err != nil {
					return err
				}
				c.Out, c.Err = createEvent(ctx, tx, ins, endpoints, c.In)
				if cause := c.Err; cause != nil {
					c.Err = s.mapErr(createEventOp, cause)
					if _, err := tx.ExecContext(ctx, `ROLLBACK TO event_create`); err != nil {
						// SQLite rolls the whole transaction back on some
						// errors (SQLITE_FULL among them), savepoint and all:
						// the batch then fails for the reason this create
						// did, not for the savepoint that is gone.
						return cause
					}
				}
				if _, err := release.ExecContext(ctx); err != nil {
					return err
				}
			}
			return lowerHeads(ctx, tx, batch)
		})
	} else {
		err = s.mapErr(createEventOp, err)
	}
	if err != nil {
		// Nothing of the batch was committed.
		for _, c := range batch {
			if c.Err == nil {
				c.Out, c.Err = storage.EventCreateResult{}, err
			}
		}
		return
	}
	if madeDue(batch) {
		s.wake.Signal()
	}
}

// fanOutEndpoints reads the endpoints that can match the creates of batch
// (storage.FanOutKeys) with what Endpoint.Matches looks at.
func fanOutEndpoints(ctx context.Context, st *sql.Stmt, batch eventBatch) ([]storage.Endpoint, error) {
	forms, addressed := storage.FanOutKeys(groupcommit.Inputs(batch))
	rows, err := st.QueryContext(ctx, jsonList(forms), jsonList(addressed))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []storage.Endpoint
	for rows.Next() {
		var e storage.Endpoint
		var types, forms string
		var disabled sql.NullInt64
		if err := rows.Scan(&e.ID, &types, &forms, &disabled, &e.Ordered); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(types), &e.EventTypes); err != nil {
			return nil, fmt.Errorf("decode event types of endpoint %s: %w", e.ID, err)
		}
		if err := json.Unmarshal([]byte(forms), &e.FormIDs); err != nil {
			return nil, fmt.Errorf("decode form ids of endpoint %s: %w", e.ID, err)
		}
		e.DisabledAt = fromNullMicros(disabled)
		out = append(out, e)
	}
	return out, rows.Err()
}

// createEvent is one create inside a batch's transaction, with the batch's
// statements; endpoints are the fan-out's view of the endpoints that can
// match the batch, read in the same transaction.
func createEvent(ctx context.Context, tx *sql.Tx, st createStmts, endpoints []storage.Endpoint, ev storage.Event) (storage.EventCreateResult, error) {
	if ev.IdempotencyKey != "" {
		// Checked inside the IMMEDIATE transaction, so a concurrent create
		// with the same key is either fully before or fully after, and an
		// earlier create in the same batch is seen.
		first, err := scanEvent(st.byKey.QueryRowContext(ctx, ev.IdempotencyKey))
		switch {
		case err == nil:
			rows, err := tx.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries
				WHERE event_id = ? ORDER BY id`, first.ID)
			if err != nil {
				return storage.EventCreateResult{}, err
			}
			ds, err := collectDeliveries(rows)
			if err != nil {
				return storage.EventCreateResult{}, err
			}
			return storage.EventCreateResult{Event: first, Deliveries: ds, Duplicate: true}, nil
		case !errors.Is(err, sql.ErrNoRows):
			return storage.EventCreateResult{}, err
		}
	}
	now := micros(ev.CreatedAt)
	if _, err := st.event.ExecContext(ctx,
		ev.ID, ev.Type, ev.FormID, ev.SubmissionID, []byte(ev.Payload), nullString(ev.IdempotencyKey),
		ev.TraceParent, now, ev.EndpointID); err != nil {
		return storage.EventCreateResult{}, err
	}
	targets, err := storage.FanOut(endpoints, ev)
	if err != nil {
		return storage.EventCreateResult{}, err
	}
	ds := []storage.Delivery{}
	ordered := map[string]endpointControl{}
	for _, ep := range targets {
		c := endpointControl{disabled: ep.DisabledAt != nil, ordered: ep.Ordered}
		// The row is what was written: reading it back (RETURNING) cost a
		// fifth of the insert.
		d := storage.Delivery{ID: storage.NewID("dlv"), EndpointID: ep.ID, EventID: ev.ID, State: storage.StatePending,
			NextAttemptAt: fromMicros(now), CreatedAt: fromMicros(now), Held: c.holdable()}
		if _, err := st.delivery.ExecContext(ctx, d.ID, d.EndpointID, d.EventID, now, now, boolInt(d.Held)); err != nil {
			return storage.EventCreateResult{}, err
		}
		if c.ordered {
			ordered[ep.ID] = c
		}
		ds = append(ds, d)
	}
	if len(ordered) > 0 {
		if _, err := promoteAll(ctx, tx, ordered); err != nil {
			return storage.EventCreateResult{}, err
		}
		for i, d := range ds {
			if _, ok := ordered[d.EndpointID]; !ok {
				continue
			}
			if ds[i], err = scanDelivery(tx.QueryRowContext(ctx,
				`SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = ?`, d.ID)); err != nil {
				return storage.EventCreateResult{}, err
			}
		}
	}
	// The same order a duplicate create reads them back in.
	sort.Slice(ds, func(i, j int) bool { return ds[i].ID < ds[j].ID })
	return storage.EventCreateResult{Event: ev, Deliveries: ds}, nil
}

func scanEvent(r rowScanner) (storage.Event, error) {
	var (
		ev      storage.Event
		payload []byte
		key     sql.NullString
		created int64
	)
	if err := r.Scan(&ev.ID, &ev.Type, &ev.FormID, &ev.SubmissionID, &payload, &key, &ev.TraceParent, &created, &ev.EndpointID); err != nil {
		return storage.Event{}, err
	}
	ev.Payload = payload
	ev.IdempotencyKey = key.String
	ev.CreatedAt = fromMicros(created)
	return ev, nil
}

// lowerHeads lowers the queue head of each endpoint the batch made a
// claimable delivery for to the first of them.
func lowerHeads(ctx context.Context, tx *sql.Tx, batch eventBatch) error {
	first := map[string]storage.Delivery{}
	for _, c := range batch {
		if c.Err != nil || c.Out.Duplicate {
			continue
		}
		for _, d := range c.Out.Deliveries {
			if d.Held || d.State != storage.StatePending {
				continue
			}
			f, ok := first[d.EndpointID]
			if !ok || d.NextAttemptAt.Before(f.NextAttemptAt) || d.NextAttemptAt.Equal(f.NextAttemptAt) && d.ID < f.ID {
				first[d.EndpointID] = d
			}
		}
	}
	if len(first) == 0 {
		return nil
	}
	// Prepared in the transaction, not in the store's cache: that would
	// wait for the writer connection this transaction holds.
	lower, err := tx.PrepareContext(ctx, lowerHeadSQL)
	if err != nil {
		return err
	}
	defer lower.Close()
	for endpoint, d := range first {
		if _, err := lower.ExecContext(ctx, endpoint, micros(d.NextAttemptAt), d.ID); err != nil {
			return err
		}
	}
	return nil
}

// madeDue reports whether a committed batch of creates made a delivery
// that is due now: one not held, of a create that was not a duplicate.
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

// eventsByID reads the events named in ids (repeats allowed) with the
// prepared eventsByIDSQL.
func eventsByID(ctx context.Context, st *sql.Stmt, ids []string) (map[string]storage.Event, error) {
	rows, err := st.QueryContext(ctx, jsonList(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]storage.Event, len(ids))
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out[ev.ID] = ev
	}
	return out, rows.Err()
}
