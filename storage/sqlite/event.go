package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/hymical/hymical/storage"
)

const eventColumns = `id, type, form_id, submission_id, payload, idempotency_key, trace_parent, created_at,
	endpoint_id`

// querier is what *sql.DB and *sql.Tx share, so reads can run inside a
// writer transaction or on the reader pool.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
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

const eventsByIDSQL = `SELECT ` + eventColumns + ` FROM webhook_events
	WHERE id IN (SELECT value FROM json_each(?))`

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

const insertEventSQL = `INSERT INTO webhook_events (` + eventColumns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

const insertDeliverySQL = `
	INSERT INTO webhook_deliveries
		(id, endpoint_id, event_id, state, attempts, cycle_attempts, next_attempt_at, created_at, held)
	VALUES (?, ?, ?, 'pending', 0, 0, ?, ?, ?)
	RETURNING ` + deliveryColumns

// fanOutEndpointsSQL reads only what matching needs: decoding every
// endpoint's config and secrets for every event cost more than the insert.
const fanOutEndpointsSQL = `SELECT id, event_types, form_ids, disabled_at, ordered FROM webhook_endpoints ORDER BY id`

// fanOutEndpoints reads the endpoints with what Endpoint.Matches looks at.
func fanOutEndpoints(ctx context.Context, st *sql.Stmt) ([]storage.Endpoint, error) {
	rows, err := st.QueryContext(ctx)
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

// EventCreate inserts the event and one pending delivery, due at the event's
// CreatedAt (the Go clock when zero), for every endpoint that matches it, or
// for ev.EndpointID alone when it names one. A delivery to a disabled or
// ordered endpoint starts held. With an idempotency key already seen it
// writes nothing and returns the first event and its deliveries, marked
// Duplicate.
func (s *Store) EventCreate(ctx context.Context, ev storage.Event) (storage.EventCreateResult, error) {
	const op = "create event"
	if err := ev.Validate(); err != nil {
		return storage.EventCreateResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	if ev.ID == "" {
		ev.ID = storage.NewID("evt")
	}
	ev.CreatedAt = s.now(ev.CreatedAt)
	ev.Payload = append([]byte(nil), ev.Payload...)
	now := micros(ev.CreatedAt)

	st, err := s.prepare(ctx, insertEventSQL, fanOutEndpointsSQL, insertDeliverySQL)
	if err != nil {
		return storage.EventCreateResult{}, s.mapErr(op, err)
	}
	var res storage.EventCreateResult
	err = s.write(ctx, op, func(tx *sql.Tx) error {
		if ev.IdempotencyKey != "" {
			// Checked inside the IMMEDIATE transaction, so a concurrent
			// create with the same key is either fully before or fully after.
			first, err := scanEvent(tx.QueryRowContext(ctx,
				`SELECT `+eventColumns+` FROM webhook_events WHERE idempotency_key = ?`, ev.IdempotencyKey))
			switch {
			case err == nil:
				rows, err := tx.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries
					WHERE event_id = ? ORDER BY id`, first.ID)
				if err != nil {
					return err
				}
				ds, err := collectDeliveries(rows)
				if err != nil {
					return err
				}
				res = storage.EventCreateResult{Event: first, Deliveries: ds, Duplicate: true}
				return nil
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
		}
		if _, err := tx.StmtContext(ctx, st[0]).ExecContext(ctx,
			ev.ID, ev.Type, ev.FormID, ev.SubmissionID, []byte(ev.Payload), nullString(ev.IdempotencyKey),
			ev.TraceParent, now, ev.EndpointID); err != nil {
			return err
		}
		endpoints, err := fanOutEndpoints(ctx, tx.StmtContext(ctx, st[1]))
		if err != nil {
			return err
		}
		targets, err := storage.FanOut(endpoints, ev)
		if err != nil {
			return err
		}
		insertDelivery := tx.StmtContext(ctx, st[2])
		ds := []storage.Delivery{}
		ordered := map[string]endpointControl{}
		for _, ep := range targets {
			c := endpointControl{disabled: ep.DisabledAt != nil, ordered: ep.Ordered}
			d, err := scanDelivery(insertDelivery.QueryRowContext(ctx,
				storage.NewID("dlv"), ep.ID, ev.ID, now, now, boolInt(c.holdable())))
			if err != nil {
				return err
			}
			if c.ordered {
				ordered[ep.ID] = c
			}
			ds = append(ds, d)
		}
		if len(ordered) > 0 {
			if err := promoteAll(ctx, tx, ordered); err != nil {
				return err
			}
			for i, d := range ds {
				if _, ok := ordered[d.EndpointID]; !ok {
					continue
				}
				if ds[i], err = scanDelivery(tx.QueryRowContext(ctx,
					`SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = ?`, d.ID)); err != nil {
					return err
				}
			}
		}
		// The same order a duplicate create reads them back in.
		sort.Slice(ds, func(i, j int) bool { return ds[i].ID < ds[j].ID })
		res = storage.EventCreateResult{Event: ev, Deliveries: ds}
		return nil
	})
	if err != nil {
		return storage.EventCreateResult{}, err
	}
	return res, nil
}

// EventGet reads one event.
func (s *Store) EventGet(ctx context.Context, id string) (storage.Event, error) {
	ev, err := scanEvent(s.reader.QueryRowContext(ctx, `SELECT `+eventColumns+` FROM webhook_events WHERE id = ?`, id))
	if err != nil {
		return storage.Event{}, s.mapErr("get event "+id, err)
	}
	return ev, nil
}
