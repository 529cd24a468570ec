package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"time"

	"github.com/hymical/hymical/storage"
)

// The per-endpoint controls, inside the writer transaction: holding the
// deliveries of a disabled endpoint, keeping an ordered endpoint to one
// delivery at a time, and admitting claims against an endpoint's rate and
// in-flight budget. The single writer is what makes each read-then-write
// here safe.

// endpointControl is what the controls need to know of an endpoint.
type endpointControl struct {
	disabled, ordered bool
	// failingSince is the endpoint's FailingSince in microseconds; 0 for
	// none.
	failingSince int64
}

// holdable reports whether deliveries entering the queue for the endpoint
// start held: it is paused, or they must wait their turn.
func (c endpointControl) holdable() bool { return c.disabled || c.ordered }

// endpointControlsSQL reads the controls of the endpoints in a JSON list.
const endpointControlsSQL = `SELECT id, disabled_at IS NOT NULL, ordered, coalesce(failing_since, 0)
	FROM webhook_endpoints WHERE id IN (SELECT value FROM json_each(?))`

func endpointControls(ctx context.Context, tx *sql.Tx, ids []string) (map[string]endpointControl, error) {
	return scanControls(tx.QueryContext(ctx, endpointControlsSQL, jsonList(ids)))
}

// scanControls reads what endpointControlsSQL returns.
func scanControls(rows *sql.Rows, err error) (map[string]endpointControl, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]endpointControl{}
	for rows.Next() {
		var id string
		var disabled, ordered int
		var failing int64
		if err := rows.Scan(&id, &disabled, &ordered, &failing); err != nil {
			return nil, err
		}
		out[id] = endpointControl{disabled: disabled != 0, ordered: ordered != 0, failingSince: failing}
	}
	return out, rows.Err()
}

// promote lets the next delivery of an ordered, enabled endpoint go when
// nothing of it is under way or due: its oldest held delivery, in queue
// order, which then has the turn. It reports whether it let one go, which
// is then due: the store wakes the claimers for it. Each look goes through
// a partial index (of processing rows, of held rows), named because
// SQLite's planner, without statistics, would rather read the endpoint's
// whole history.
func promote(ctx context.Context, tx *sql.Tx, endpointID string) (bool, error) {
	var disabled, ordered int
	var turn sql.NullString
	if err := tx.QueryRowContext(ctx, `SELECT disabled_at IS NOT NULL, ordered, turn_delivery_id
		FROM webhook_endpoints WHERE id = ?`, endpointID).Scan(&disabled, &ordered, &turn); err != nil {
		return false, err
	}
	if ordered == 0 || disabled != 0 {
		return false, nil
	}
	busy, err := rowExists(tx.QueryRowContext(ctx, `SELECT 1 FROM webhook_deliveries
		INDEXED BY webhook_deliveries_processing_order
		WHERE state = 'processing' AND endpoint_id = ? LIMIT 1`, endpointID))
	if err != nil || busy {
		return false, err
	}
	if turn.Valid {
		due, err := rowExists(tx.QueryRowContext(ctx, `SELECT 1 FROM webhook_deliveries
			WHERE id = ? AND state = 'pending' AND held = 0`, turn.String))
		if err != nil || due {
			return false, err
		}
	}
	var head sql.NullString
	err = tx.QueryRowContext(ctx, `SELECT id FROM webhook_deliveries INDEXED BY webhook_deliveries_held
		WHERE endpoint_id = ? AND held = 1 AND state = 'pending'
		ORDER BY created_at, id LIMIT 1`, endpointID).Scan(&head)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	if head.Valid {
		if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET held = 0 WHERE id = ?`, head.String); err != nil {
			return false, err
		}
	}
	_, err = tx.ExecContext(ctx, `UPDATE webhook_endpoints SET turn_delivery_id = ? WHERE id = ?`, head, endpointID)
	return head.Valid, err
}

// promoteAll promotes every ordered, enabled endpoint among ids, and
// reports whether any let a delivery go.
func promoteAll(ctx context.Context, tx *sql.Tx, controls map[string]endpointControl) (bool, error) {
	ids := make([]string, 0, len(controls))
	for id, c := range controls {
		if c.ordered && !c.disabled {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	released := false
	for _, id := range ids {
		r, err := promote(ctx, tx, id)
		if err != nil {
			return false, err
		}
		released = released || r
	}
	return released, nil
}

// refreshHolds makes an endpoint's pending deliveries agree with its
// controls after an operator changed them: all held while it is disabled,
// none while it is enabled and unordered, and one at a time when ordered.
// It reports whether any delivery stopped being held, and so may be due.
// Holding reads the endpoint's deliveries through its index of all of
// them; an operator's change is rare enough to afford it, and no index of
// every pending row is kept for it, which every delivery would pay for.
func refreshHolds(ctx context.Context, tx *sql.Tx, endpointID string, c endpointControl) (bool, error) {
	if !c.holdable() {
		res, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries INDEXED BY webhook_deliveries_held SET held = 0
			WHERE endpoint_id = ? AND held = 1`, endpointID)
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return n > 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET held = 1
		WHERE endpoint_id = ? AND state = 'pending' AND held = 0`, endpointID); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE webhook_endpoints SET turn_delivery_id = NULL WHERE id = ?`, endpointID); err != nil {
		return false, err
	}
	return promote(ctx, tx, endpointID)
}

// admitClaims applies the endpoints' controls to what a claim statement
// just took: deliveries of an endpoint disabled meanwhile go back held, and
// those over an endpoint's rate or in-flight budget go back pending, due
// when the budget allows. Neither spends an attempt. It returns the claims
// that may be sent, in their order, and how long after now each delivery
// it put back is due, for the store's timed wake-ups.
func admitClaims(ctx context.Context, tx *sql.Tx, claims []storage.Claim, now time.Time) ([]storage.Claim, []time.Duration, error) {
	byEndpoint := map[string][]int{}
	var limited []string
	keep := make([]bool, len(claims))
	for i, c := range claims {
		keep[i] = true
		ep := c.Endpoint
		switch {
		case ep.DisabledAt != nil:
			keep[i] = false
			if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries
				SET state = 'pending', held = 1, claim_token = NULL, claim_expires_at = NULL
				WHERE id = ?`, c.Delivery.ID); err != nil {
				return nil, nil, err
			}
		case ep.Limited():
			if _, seen := byEndpoint[ep.ID]; !seen {
				limited = append(limited, ep.ID)
			}
			byEndpoint[ep.ID] = append(byEndpoint[ep.ID], i)
		}
	}
	sort.Strings(limited)
	var later []time.Duration
	for _, id := range limited {
		idx := byEndpoint[id]
		ep := claims[idx[0]].Endpoint
		var st storage.Throttle
		var tat, deferred int64
		err := tx.QueryRowContext(ctx, `SELECT tat, deferred_until FROM webhook_endpoint_throttles
			WHERE endpoint_id = ?`, id).Scan(&tat, &deferred)
		switch {
		case err == nil:
			st = storage.Throttle{TAT: fromMicros(tat), DeferredUntil: fromMicros(deferred)}
		case !errors.Is(err, sql.ErrNoRows):
			return nil, nil, err
		}
		// The claims just taken are processing with a fresh lease, so they
		// are in the count: take them out again. Processing rows are never
		// more than the sends under way everywhere, so reading them all is
		// bounded, and costs no index of its own.
		var inFlight int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries
			INDEXED BY webhook_deliveries_processing_order
			WHERE state = 'processing' AND endpoint_id = ? AND claim_expires_at >= ?`,
			id, micros(now)).Scan(&inFlight); err != nil {
			return nil, nil, err
		}
		adm := storage.Admit(ep, st, max(0, inFlight-len(idx)), len(idx), now)
		for j, due := range adm.Due {
			later = append(later, due.Sub(now))
			i := idx[adm.Admitted+j]
			keep[i] = false
			if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries
				SET state = 'pending', next_attempt_at = ?, claim_token = NULL, claim_expires_at = NULL
				WHERE id = ?`, micros(due), claims[i].Delivery.ID); err != nil {
				return nil, nil, err
			}
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO webhook_endpoint_throttles (endpoint_id, tat, deferred_until) VALUES (?, ?, ?)
			ON CONFLICT (endpoint_id) DO UPDATE SET tat = excluded.tat, deferred_until = excluded.deferred_until`,
			id, micros(adm.Next.TAT), micros(adm.Next.DeferredUntil)); err != nil {
			return nil, nil, err
		}
	}
	return storage.Admitted(claims, keep), later, nil
}

// failingUpdate is what a batch of outcomes says about one endpoint's run
// of failures.
type failingUpdate struct {
	lastDelivered time.Time
	// firstFailure is the earliest failure after lastDelivered.
	firstFailure time.Time
}

func (f *failingUpdate) add(a storage.Attempt) {
	if a.Outcome == storage.OutcomeDelivered {
		if a.FinishedAt.After(f.lastDelivered) {
			f.lastDelivered = a.FinishedAt
			if !f.firstFailure.After(f.lastDelivered) {
				f.firstFailure = time.Time{}
			}
		}
		return
	}
	if a.FinishedAt.After(f.lastDelivered) && (f.firstFailure.IsZero() || a.FinishedAt.Before(f.firstFailure)) {
		f.firstFailure = a.FinishedAt
	}
}

// since is the FailingSince the outcomes leave an endpoint with, given the
// one it had (microseconds, 0 for none): a delivered attempt ends the run,
// a failure starts one unless one is under way.
func (f *failingUpdate) since(had int64) int64 {
	switch {
	case !f.lastDelivered.IsZero() && f.firstFailure.IsZero():
		return 0
	case !f.lastDelivered.IsZero(), had == 0 && !f.firstFailure.IsZero():
		return micros(f.firstFailure)
	}
	return had
}

// recordFailing writes each endpoint's FailingSince where the outcomes
// changed it, so a healthy endpoint costs nothing here.
func recordFailing(ctx context.Context, tx *sql.Tx, updates map[string]*failingUpdate, controls map[string]endpointControl) error {
	ids := make([]string, 0, len(updates))
	for id := range updates {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		had := controls[id].failingSince
		now := updates[id].since(had)
		if now == had {
			continue
		}
		var v any
		if now != 0 {
			v = now
		}
		if _, err := tx.ExecContext(ctx, `UPDATE webhook_endpoints SET failing_since = ? WHERE id = ?`, v, id); err != nil {
			return err
		}
	}
	return nil
}

// requeued holds the deliveries in ids that just re-entered the queue if
// their endpoint is disabled or ordered, and lets each ordered endpoint's
// next delivery go if none of it is under way or due.
func requeued(ctx context.Context, tx *sql.Tx, ids []string) error {
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT endpoint_id FROM webhook_deliveries
		WHERE id IN (SELECT value FROM json_each(?))`, jsonList(ids))
	if err != nil {
		return err
	}
	endpointIDs, err := collectStrings(rows)
	if err != nil {
		return err
	}
	controls, err := endpointControls(ctx, tx, endpointIDs)
	if err != nil {
		return err
	}
	var holdable []string
	for id, c := range controls {
		if c.holdable() {
			holdable = append(holdable, id)
		}
	}
	if len(holdable) == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET held = 1
		WHERE id IN (SELECT value FROM json_each(?)) AND endpoint_id IN (SELECT value FROM json_each(?))`,
		jsonList(ids), jsonList(holdable)); err != nil {
		return err
	}
	_, err = promoteAll(ctx, tx, controls)
	return err
}
