package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hymical/hymical/storage"
)

const deliveryColumns = `id, endpoint_id, event_id, state, attempts, cycle_attempts,
	next_attempt_at, claim_expires_at, created_at, completed_at, held, unsent_reason`

// claimable is the one definition of a claimable row, over :now.
const claimable = `((state = 'pending' AND held = 0 AND next_attempt_at <= :now)
	OR (state = 'processing' AND claim_expires_at < :now))`

const deliveryExistsSQL = `SELECT 1 FROM webhook_deliveries WHERE id = ?`

// DeliveryGet reads one delivery.
func (s *Store) DeliveryGet(ctx context.Context, id string) (storage.Delivery, error) {
	d, err := scanDelivery(s.reader.QueryRowContext(ctx,
		`SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = ?`, id))
	if err != nil {
		return storage.Delivery{}, s.mapErr("get delivery "+id, err)
	}
	return d, nil
}

// DeliveryList pages through deliveries matching the filter, newest (largest
// id) first; p.Before is the id of the last delivery of the previous page.
func (s *Store) DeliveryList(ctx context.Context, p storage.DeliveryListParams) ([]storage.Delivery, error) {
	const op = "list deliveries"
	if err := validateFilter(p.Filter); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	where, args := filterSQL(p.Filter)
	if p.Before != "" {
		where += " AND id < :before"
		args = append(args, sql.Named("before", p.Before))
	}
	args = append(args, sql.Named("limit", p.PageSize()))
	rows, err := s.reader.QueryContext(ctx, `
		SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE `+where+`
		ORDER BY id DESC
		LIMIT :limit`, args...)
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	out, err := collectDeliveries(rows)
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	return out, nil
}

// DeliveryStats counts deliveries by state, every state present, and how
// many are claimable at now (the Go clock when zero), in one snapshot.
func (s *Store) DeliveryStats(ctx context.Context, now time.Time) (storage.DeliveryStats, error) {
	var pending, processing, delivered, failed, due, held int64
	var oldest sql.NullInt64
	err := s.reader.QueryRowContext(ctx, `
		SELECT
			coalesce(sum(state = 'pending'), 0),
			coalesce(sum(state = 'processing'), 0),
			coalesce(sum(state = 'delivered'), 0),
			coalesce(sum(state = 'failed'), 0),
			coalesce(sum(`+claimable+`), 0),
			coalesce(sum(state = 'pending' AND held = 1), 0),
			min(CASE WHEN `+claimable+` THEN
				CASE state WHEN 'pending' THEN next_attempt_at ELSE claim_expires_at END END)
		FROM webhook_deliveries`, sql.Named("now", micros(s.now(now)))).
		Scan(&pending, &processing, &delivered, &failed, &due, &held, &oldest)
	if err != nil {
		return storage.DeliveryStats{}, s.mapErr("delivery stats", err)
	}
	out := storage.DeliveryStats{
		ByState: map[storage.DeliveryState]int64{
			storage.StatePending:    pending,
			storage.StateProcessing: processing,
			storage.StateDelivered:  delivered,
			storage.StateFailed:     failed,
		},
		Due:  due,
		Held: held,
	}
	if oldest.Valid {
		out.OldestDue = fromMicros(oldest.Int64)
	}
	return out, nil
}

// AttemptList returns a delivery's attempts in number order; ErrNotFound when
// the delivery does not exist.
func (s *Store) AttemptList(ctx context.Context, deliveryID string) ([]storage.Attempt, error) {
	op := "list attempts of delivery " + deliveryID
	out := []storage.Attempt{}
	err := s.read(ctx, op, func(tx *sql.Tx) error {
		exists, err := deliveryExists(ctx, tx, deliveryID)
		if err != nil {
			return err
		}
		if !exists {
			return storage.ErrNotFound
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+attemptColumns+`
			FROM webhook_delivery_attempts WHERE delivery_id = ? ORDER BY number`, deliveryID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			a, err := scanAttempt(rows)
			if err != nil {
				return err
			}
			out = append(out, a)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// attemptColumns are what scanAttempt reads, in its order.
const attemptColumns = `delivery_id, number, outcome, http_status, error, late, started_at, finished_at, trace_id`

// scanAttempt reads one row of attemptColumns.
func scanAttempt(rows *sql.Rows) (storage.Attempt, error) {
	var (
		a                 storage.Attempt
		outcome           string
		status            sql.NullInt64
		late              int64
		started, finished int64
	)
	if err := rows.Scan(&a.DeliveryID, &a.Number, &outcome, &status, &a.Error, &late,
		&started, &finished, &a.TraceID); err != nil {
		return a, err
	}
	a.Outcome = storage.OutcomeKind(outcome)
	a.HTTPStatus = int(status.Int64)
	a.Late = late != 0
	a.StartedAt = fromMicros(started)
	a.FinishedAt = fromMicros(finished)
	return a, nil
}

// AttemptLatest returns each given delivery's attempt of the highest
// number, in one read: the ids go in as one JSON array, and each
// delivery's last attempt is found through the (delivery_id, number) key.
func (s *Store) AttemptLatest(ctx context.Context, deliveryIDs []string) (map[string]storage.Attempt, error) {
	out := map[string]storage.Attempt{}
	if len(deliveryIDs) == 0 {
		return out, nil
	}
	ids, err := json.Marshal(deliveryIDs)
	if err != nil {
		return nil, err
	}
	err = s.read(ctx, "latest attempts", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+attemptColumns+` FROM webhook_delivery_attempts AS a
			WHERE a.delivery_id IN (SELECT value FROM json_each(?))
			AND a.number = (SELECT MAX(b.number) FROM webhook_delivery_attempts AS b WHERE b.delivery_id = a.delivery_id)`, string(ids))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			a, err := scanAttempt(rows)
			if err != nil {
				return err
			}
			out[a.DeliveryID] = a
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReplayList returns a delivery's replay audit records, oldest first;
// ErrNotFound when the delivery does not exist.
func (s *Store) ReplayList(ctx context.Context, deliveryID string) ([]storage.Replay, error) {
	op := "list replays of delivery " + deliveryID
	out := []storage.Replay{}
	err := s.read(ctx, op, func(tx *sql.Tx) error {
		exists, err := deliveryExists(ctx, tx, deliveryID)
		if err != nil {
			return err
		}
		if !exists {
			return storage.ErrNotFound
		}
		rows, err := tx.QueryContext(ctx, `
			SELECT delivery_id, actor, previous_state, replayed_at
			FROM webhook_delivery_replays WHERE delivery_id = ? ORDER BY id`, deliveryID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				r    storage.Replay
				prev string
				at   int64
			)
			if err := rows.Scan(&r.DeliveryID, &r.Actor, &prev, &at); err != nil {
				return err
			}
			r.PreviousState = storage.DeliveryState(prev)
			r.ReplayedAt = fromMicros(at)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func scanDelivery(r rowScanner, extra ...any) (storage.Delivery, error) {
	var (
		d                      storage.Delivery
		state                  string
		next, created          int64
		claimExpires, complete sql.NullInt64
		held                   int64
	)
	dest := append([]any{&d.ID, &d.EndpointID, &d.EventID, &state, &d.Attempts, &d.CycleAttempts,
		&next, &claimExpires, &created, &complete, &held, &d.UnsentReason}, extra...)
	if err := r.Scan(dest...); err != nil {
		return storage.Delivery{}, err
	}
	d.State = storage.DeliveryState(state)
	d.NextAttemptAt = fromMicros(next)
	d.ClaimExpiresAt = fromNullMicros(claimExpires)
	d.CreatedAt = fromMicros(created)
	d.CompletedAt = fromNullMicros(complete)
	d.Held = held != 0
	return d, nil
}

func validateFilter(f storage.DeliveryFilter) error {
	if f.State != "" && !f.State.Valid() {
		return fmt.Errorf("%w: state %q is not pending, processing, delivered or failed", storage.ErrInvalid, f.State)
	}
	return nil
}

// filterSQL writes f as a WHERE condition over webhook_deliveries with named
// arguments. Every field is optional.
func filterSQL(f storage.DeliveryFilter) (string, []any) {
	conds := []string{"1 = 1"}
	var args []any
	if f.State != "" {
		conds = append(conds, "state = :f_state")
		args = append(args, sql.Named("f_state", string(f.State)))
	}
	if f.EndpointID != "" {
		conds = append(conds, "endpoint_id = :f_endpoint")
		args = append(args, sql.Named("f_endpoint", f.EndpointID))
	}
	if f.EventID != "" {
		conds = append(conds, "event_id = :f_event")
		args = append(args, sql.Named("f_event", f.EventID))
	}
	if f.FormID != "" {
		conds = append(conds, "event_id IN (SELECT id FROM webhook_events WHERE form_id = :f_form)")
		args = append(args, sql.Named("f_form", f.FormID))
	}
	if f.Forms != nil {
		// The endpoint is listed under one of the scope's forms (so one of
		// every form, which has no rows there, is not) and under none
		// outside it, as in EndpointListPage.
		conds = append(conds, `endpoint_id IN (SELECT sf.endpoint_id FROM webhook_endpoint_forms AS sf
				WHERE sf.form_id IN (SELECT value FROM json_each(:f_forms)))
			AND NOT EXISTS (SELECT 1 FROM webhook_endpoint_forms AS so
				WHERE so.endpoint_id = webhook_deliveries.endpoint_id AND so.form_id NOT IN (SELECT value FROM json_each(:f_forms)))`)
		args = append(args, sql.Named("f_forms", jsonList(f.Forms)))
	}
	if f.ExceptEndpointID != "" {
		conds = append(conds, "endpoint_id <> :f_except_endpoint")
		args = append(args, sql.Named("f_except_endpoint", f.ExceptEndpointID))
	}
	if !f.CreatedAfter.IsZero() {
		conds = append(conds, "created_at > :f_after")
		args = append(args, sql.Named("f_after", micros(f.CreatedAfter)))
	}
	if !f.CreatedBefore.IsZero() {
		conds = append(conds, "created_at < :f_before")
		args = append(args, sql.Named("f_before", micros(f.CreatedBefore)))
	}
	return strings.Join(conds, " AND "), args
}

func collectDeliveries(rows *sql.Rows) ([]storage.Delivery, error) {
	defer rows.Close()
	out := []storage.Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// deliveryExists tells ErrNotFound apart from a fence that did not match.
func deliveryExists(ctx context.Context, tx *sql.Tx, id string) (bool, error) {
	return rowExists(tx.QueryRowContext(ctx, deliveryExistsSQL, id))
}

// rowExists reads the answer of deliveryExistsSQL.
func rowExists(r *sql.Row) (bool, error) {
	var one int
	err := r.Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func collectStrings(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func jsonList(values []string) string {
	b, _ := json.Marshal(values) // a []string always marshals
	return string(b)
}
