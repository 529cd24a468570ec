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
}

// holdable reports whether deliveries entering the queue for the endpoint
// start held: it is paused, or they must wait their turn.
func (c endpointControl) holdable() bool { return c.disabled || c.ordered }

func endpointControls(ctx context.Context, tx *sql.Tx, ids []string) (map[string]endpointControl, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, disabled_at IS NOT NULL, ordered FROM webhook_endpoints
		WHERE id IN (SELECT value FROM json_each(?))`, jsonList(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]endpointControl, len(ids))
	for rows.Next() {
		var id string
		var disabled, ordered int
		if err := rows.Scan(&id, &disabled, &ordered); err != nil {
			return nil, err
		}
		out[id] = endpointControl{disabled: disabled != 0, ordered: ordered != 0}
	}
	return out, rows.Err()
}

// openRows names the index of an endpoint's open deliveries, and the
// condition that lets SQLite use it: without statistics its planner would
// rather read every pending row through the state index and sort them.
const openRows = `webhook_deliveries INDEXED BY webhook_deliveries_open`

// promote lets the next delivery of an ordered, enabled endpoint go when
// nothing of it is under way or due: the oldest held one, in queue order.
func promote(ctx context.Context, tx *sql.Tx, endpointID string) error {
	_, err := tx.ExecContext(ctx, `
		UPDATE webhook_deliveries SET held = 0
		WHERE id = (
			SELECT id FROM `+openRows+`
			WHERE endpoint_id = :ep AND held = 1 AND state IN ('pending', 'processing') AND state = 'pending'
			ORDER BY created_at, id LIMIT 1)
		AND NOT EXISTS (
			SELECT 1 FROM `+openRows+`
			WHERE endpoint_id = :ep AND held = 0 AND state IN ('pending', 'processing'))
		AND EXISTS (
			SELECT 1 FROM webhook_endpoints WHERE id = :ep AND ordered = 1 AND disabled_at IS NULL)`,
		sql.Named("ep", endpointID))
	return err
}

// promoteAll promotes every ordered, enabled endpoint among ids.
func promoteAll(ctx context.Context, tx *sql.Tx, controls map[string]endpointControl) error {
	ids := make([]string, 0, len(controls))
	for id, c := range controls {
		if c.ordered && !c.disabled {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := promote(ctx, tx, id); err != nil {
			return err
		}
	}
	return nil
}

// refreshHolds makes an endpoint's pending deliveries agree with its
// controls after an operator changed them: all held while it is disabled,
// none while it is enabled and unordered, and one at a time when ordered.
func refreshHolds(ctx context.Context, tx *sql.Tx, endpointID string, c endpointControl) error {
	ep := sql.Named("ep", endpointID)
	if c.holdable() {
		if _, err := tx.ExecContext(ctx, `UPDATE `+openRows+` SET held = 1
			WHERE endpoint_id = :ep AND held = 0 AND state IN ('pending', 'processing') AND state = 'pending'`, ep); err != nil {
			return err
		}
		if c.disabled {
			return nil
		}
		return promote(ctx, tx, endpointID)
	}
	_, err := tx.ExecContext(ctx, `UPDATE `+openRows+` SET held = 0
		WHERE endpoint_id = :ep AND held = 1 AND state IN ('pending', 'processing') AND state = 'pending'`, ep)
	return err
}

// admitClaims applies the endpoints' controls to what a claim statement
// just took: deliveries of an endpoint disabled meanwhile go back held, and
// those over an endpoint's rate or in-flight budget go back pending, due
// when the budget allows. Neither spends an attempt. It returns the claims
// that may be sent, in their order.
func admitClaims(ctx context.Context, tx *sql.Tx, claims []storage.Claim, now time.Time) ([]storage.Claim, error) {
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
				return nil, err
			}
		case ep.Limited():
			if _, seen := byEndpoint[ep.ID]; !seen {
				limited = append(limited, ep.ID)
			}
			byEndpoint[ep.ID] = append(byEndpoint[ep.ID], i)
		}
	}
	sort.Strings(limited)
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
			return nil, err
		}
		// The claims just taken are processing with a fresh lease, so they
		// are in the count: take them out again.
		var inFlight int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries
			WHERE endpoint_id = ? AND state = 'processing' AND claim_expires_at >= ?`,
			id, micros(now)).Scan(&inFlight); err != nil {
			return nil, err
		}
		adm := storage.Admit(ep, st, max(0, inFlight-len(idx)), len(idx), now)
		for j, due := range adm.Due {
			i := idx[adm.Admitted+j]
			keep[i] = false
			if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries
				SET state = 'pending', next_attempt_at = ?, claim_token = NULL, claim_expires_at = NULL
				WHERE id = ?`, micros(due), claims[i].Delivery.ID); err != nil {
				return nil, err
			}
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO webhook_endpoint_throttles (endpoint_id, tat, deferred_until) VALUES (?, ?, ?)
			ON CONFLICT (endpoint_id) DO UPDATE SET tat = excluded.tat, deferred_until = excluded.deferred_until`,
			id, micros(adm.Next.TAT), micros(adm.Next.DeferredUntil)); err != nil {
			return nil, err
		}
	}
	return storage.Admitted(claims, keep), nil
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

// recordFailing keeps each endpoint's FailingSince: a delivered attempt ends
// the run, a failure starts one unless one is under way. The row is written
// only when that changes, so a healthy endpoint costs nothing here.
func recordFailing(ctx context.Context, tx *sql.Tx, updates map[string]*failingUpdate) error {
	ids := make([]string, 0, len(updates))
	for id := range updates {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		f := updates[id]
		var err error
		switch {
		case !f.lastDelivered.IsZero() && f.firstFailure.IsZero():
			_, err = tx.ExecContext(ctx, `UPDATE webhook_endpoints SET failing_since = NULL
				WHERE id = ? AND failing_since IS NOT NULL`, id)
		case !f.lastDelivered.IsZero():
			_, err = tx.ExecContext(ctx, `UPDATE webhook_endpoints SET failing_since = ? WHERE id = ?`,
				micros(f.firstFailure), id)
		case !f.firstFailure.IsZero():
			_, err = tx.ExecContext(ctx, `UPDATE webhook_endpoints SET failing_since = ?
				WHERE id = ? AND failing_since IS NULL`, micros(f.firstFailure), id)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
