package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// DeliveryGet returns the delivery with this id, or storage.ErrNotFound.
func (s *Store) DeliveryGet(ctx context.Context, id string) (storage.Delivery, error) {
	d, err := scanDelivery(s.pool.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries AS d WHERE d.id = $1`, id))
	if err != nil {
		return storage.Delivery{}, mapErr("delivery get "+id, err)
	}
	return d, nil
}

// DeliveryList pages through deliveries matching the filter, newest (largest
// id) first; p.Before continues after the last id of the previous page.
func (s *Store) DeliveryList(ctx context.Context, p storage.DeliveryListParams) ([]storage.Delivery, error) {
	const op = "delivery list"
	if err := validFilter(p.Filter); err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	w := newWhere(p.PageSize())
	w.filter(p.Filter)
	if p.Before != "" {
		w.add("d.id < ?", p.Before)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries AS d `+
		w.sql()+` ORDER BY d.id DESC LIMIT $1`, w.args...)
	if err != nil {
		return nil, mapErr(op, err)
	}
	ds, err := collectDeliveries(rows)
	if err != nil {
		return nil, mapErr(op, err)
	}
	return ds, nil
}

// DeliveryStats counts deliveries in each of the four states, and those
// claimable at now (the database clock when zero), in one snapshot.
func (s *Store) DeliveryStats(ctx context.Context, now time.Time) (storage.DeliveryStats, error) {
	var pending, processing, delivered, failed, due, held int64
	var oldest *time.Time
	// The oldest due time is the least of two mins, one per kind of due
	// row, so each can be read from the end of its index.
	err := s.pool.QueryRow(ctx, `
		SELECT
			(SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'),
			(SELECT count(*) FROM webhook_deliveries WHERE state = 'processing'),
			(SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'),
			(SELECT count(*) FROM webhook_deliveries WHERE state = 'failed'),
			(SELECT count(*) FROM webhook_deliveries
			 WHERE (state = 'pending' AND NOT held AND next_attempt_at <= coalesce($1::timestamptz, now()))
			    OR (state = 'processing' AND claim_expires_at < coalesce($1::timestamptz, now()))),
			(SELECT count(*) FROM webhook_deliveries WHERE state = 'pending' AND held),
			least(
				(SELECT min(next_attempt_at) FROM webhook_deliveries
				 WHERE state = 'pending' AND NOT held AND next_attempt_at <= coalesce($1::timestamptz, now())),
				(SELECT min(claim_expires_at) FROM webhook_deliveries
				 WHERE state = 'processing' AND claim_expires_at < coalesce($1::timestamptz, now())))`,
		dbNow(now)).Scan(&pending, &processing, &delivered, &failed, &due, &held, &oldest)
	if err != nil {
		return storage.DeliveryStats{}, mapErr("delivery stats", err)
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
	if oldest != nil {
		out.OldestDue = oldest.UTC()
	}
	return out, nil
}

// AttemptList returns the delivery's attempts in number order.
func (s *Store) AttemptList(ctx context.Context, deliveryID string) ([]storage.Attempt, error) {
	const op = "attempt list"
	rows, err := s.pool.Query(ctx, `SELECT `+attemptColumns+` FROM webhook_delivery_attempts AS a
		WHERE a.delivery_id = $1 ORDER BY a.number`, deliveryID)
	if err != nil {
		return nil, mapErr(op, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Attempt, error) { return scanAttempt(r) })
	if err != nil {
		return nil, mapErr(op, err)
	}
	if len(out) == 0 {
		return []storage.Attempt{}, s.deliveryExists(ctx, op, deliveryID)
	}
	return out, nil
}

// AttemptLatest returns each given delivery's attempt of the highest
// number, in one read through the (delivery_id, number) key.
func (s *Store) AttemptLatest(ctx context.Context, deliveryIDs []string) (map[string]storage.Attempt, error) {
	const op = "latest attempts"
	out := map[string]storage.Attempt{}
	if len(deliveryIDs) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (a.delivery_id) `+attemptColumns+`
		FROM webhook_delivery_attempts AS a WHERE a.delivery_id = ANY($1)
		ORDER BY a.delivery_id, a.number DESC`, deliveryIDs)
	if err != nil {
		return nil, mapErr(op, err)
	}
	as, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Attempt, error) { return scanAttempt(r) })
	if err != nil {
		return nil, mapErr(op, err)
	}
	for _, a := range as {
		out[a.DeliveryID] = a
	}
	return out, nil
}

// ReplayList returns the delivery's replay audit records, oldest first.
func (s *Store) ReplayList(ctx context.Context, deliveryID string) ([]storage.Replay, error) {
	const op = "replay list"
	rows, err := s.pool.Query(ctx, `SELECT delivery_id, actor, previous_state, replayed_at
		FROM webhook_delivery_replays WHERE delivery_id = $1 ORDER BY replayed_at, id`, deliveryID)
	if err != nil {
		return nil, mapErr(op, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Replay, error) {
		var rp storage.Replay
		err := r.Scan(&rp.DeliveryID, &rp.Actor, &rp.PreviousState, &rp.ReplayedAt)
		return rp, err
	})
	if err != nil {
		return nil, mapErr(op, err)
	}
	if len(out) == 0 {
		return []storage.Replay{}, s.deliveryExists(ctx, op, deliveryID)
	}
	return out, nil
}

// deliveryExists tells an empty history apart from an unknown delivery.
func (s *Store) deliveryExists(ctx context.Context, op, id string) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_deliveries WHERE id = $1)`, id).Scan(&ok); err != nil {
		return mapErr(op, err)
	}
	if !ok {
		return fmt.Errorf("postgres: %s: delivery %s: %w", op, id, storage.ErrNotFound)
	}
	return nil
}

// where builds a WHERE clause over webhook_deliveries AS d with numbered
// parameters. Only conditions are built from code; every value is a
// parameter.
type where struct {
	conds []string
	args  []any
}

// newWhere starts a clause whose first parameters are fixed.
func newWhere(fixed ...any) *where { return &where{args: fixed} }

// add appends cond, in which "?" stands for the parameter v.
func (w *where) add(cond string, v any) {
	w.args = append(w.args, v)
	w.conds = append(w.conds, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(w.args))))
}

func (w *where) filter(f storage.DeliveryFilter) {
	if f.State != "" {
		w.add("d.state = ?", string(f.State))
	}
	if f.EndpointID != "" {
		w.add("d.endpoint_id = ?", f.EndpointID)
	}
	if f.EventID != "" {
		w.add("d.event_id = ?", f.EventID)
	}
	if f.FormID != "" {
		w.add("EXISTS (SELECT 1 FROM webhook_events AS fe WHERE fe.id = d.event_id AND fe.form_id = ?)", f.FormID)
	}
	if f.Forms != nil {
		// The endpoint is listed under one of the scope's forms (so one of
		// every form, which has no rows there, is not) and under none
		// outside it, as in EndpointListPage.
		w.add(`d.endpoint_id IN (SELECT sf.endpoint_id FROM webhook_endpoint_forms AS sf WHERE sf.form_id = ANY(?::text[]))
			AND NOT EXISTS (SELECT 1 FROM webhook_endpoint_forms AS so
				WHERE so.endpoint_id = d.endpoint_id AND so.form_id <> ALL(?::text[]))`, f.Forms)
	}
	if f.ExceptEndpointID != "" {
		w.add("d.endpoint_id <> ?", f.ExceptEndpointID)
	}
	if !f.CreatedAfter.IsZero() {
		w.add("d.created_at > ?", f.CreatedAfter)
	}
	if !f.CreatedBefore.IsZero() {
		w.add("d.created_at < ?", f.CreatedBefore)
	}
}

func (w *where) sql() string {
	if len(w.conds) == 0 {
		return ""
	}
	return "WHERE " + strings.Join(w.conds, " AND ")
}

func validFilter(f storage.DeliveryFilter) error {
	if f.State != "" && !f.State.Valid() {
		return fmt.Errorf("%w: state %q is not pending, processing, delivered or failed", storage.ErrInvalid, f.State)
	}
	return nil
}

// Column lists are written once, with the table aliases every query uses
// (d deliveries, e events, a attempts), and scanned by the matching function.

const deliveryColumns = `d.id, d.endpoint_id, d.event_id, d.state, d.attempts, d.cycle_attempts,
	d.next_attempt_at, d.claim_expires_at, d.created_at, d.completed_at, d.held, d.unsent_reason`

func deliveryDest(d *storage.Delivery) []any {
	return []any{&d.ID, &d.EndpointID, &d.EventID, &d.State, &d.Attempts, &d.CycleAttempts,
		&d.NextAttemptAt, &d.ClaimExpiresAt, &d.CreatedAt, &d.CompletedAt, &d.Held, &d.UnsentReason}
}

func scanDelivery(row pgx.Row) (storage.Delivery, error) {
	var d storage.Delivery
	err := row.Scan(deliveryDest(&d)...)
	return d, err
}

func collectDeliveries(rows pgx.Rows) ([]storage.Delivery, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Delivery, error) { return scanDelivery(r) })
	if out == nil && err == nil {
		out = []storage.Delivery{}
	}
	return out, err
}

const attemptColumns = `a.delivery_id, a.number, a.outcome, a.http_status, a.error, a.late,
	a.started_at, a.finished_at, a.trace_id`

// attemptScan holds the column that needs converting after the scan.
type attemptScan struct {
	a      storage.Attempt
	status *int
}

func (s *attemptScan) dest() []any {
	a := &s.a
	return []any{&a.DeliveryID, &a.Number, &a.Outcome, &s.status, &a.Error, &a.Late,
		&a.StartedAt, &a.FinishedAt, &a.TraceID}
}

func (s *attemptScan) attempt() storage.Attempt {
	a := s.a
	if s.status != nil {
		a.HTTPStatus = *s.status
	}
	return a
}

func scanAttempt(row pgx.Row) (storage.Attempt, error) {
	var s attemptScan
	err := row.Scan(s.dest()...)
	return s.attempt(), err
}
