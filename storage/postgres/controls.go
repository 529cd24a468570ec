package postgres

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// The per-endpoint controls: holding the deliveries of a disabled endpoint,
// keeping an ordered endpoint to one delivery at a time, and admitting
// claims against an endpoint's rate and in-flight budget, which every
// process sharing the database draws on.
//
// Locks: whatever may change which delivery of an ordered endpoint goes
// next (creating, completing, replaying, changing the endpoint) ends with
// hymical_promote, which locks the endpoint rows in id order before it
// looks. It takes them after the delivery rows its transaction changed;
// nothing that holds an endpoint's lock waits on those rows (new,
// processing or terminal ones), so the two orders cannot deadlock. An
// update that leaves an endpoint ordered and enabled also takes the row
// locks of its deliveries under way, before the endpoint's, so that it
// looks only after their completions commit (updateEndpoint). The
// limiter's state is a row per endpoint in webhook_endpoint_throttles,
// locked by the claim that admits against it.

// control is what the controls need to know of an endpoint.
type control struct {
	disabled, ordered bool
}

// promoteSQL lets the next delivery of each ordered endpoint among $1 go
// if none of it is under way or due: the function hymical_promote
// (migration 0006), which locks the endpoints itself.
const promoteSQL = `SELECT hymical_promote($1::text[])`

// promoteOfSQL is promoteSQL for the endpoints of the deliveries $1: the
// function hymical_promote_of (migration 0012), which returns at once when
// no endpoint is ordered.
const promoteOfSQL = `SELECT hymical_promote_of($1::text[])`

// holdRequeuedSQL holds the deliveries $1, just back in the queue, whose
// endpoint is disabled or ordered.
const holdRequeuedSQL = `
UPDATE webhook_deliveries AS d SET held = true
FROM webhook_endpoints AS ep
WHERE d.id = ANY($1::text[]) AND ep.id = d.endpoint_id AND (ep.disabled_at IS NOT NULL OR ep.ordered)`

// requeued is what follows a replay of the deliveries ids: each is held if
// its endpoint is disabled or ordered, and an ordered endpoint with nothing
// under way lets its next one go.
func requeued(ctx context.Context, tx pgx.Tx, ids []string) error {
	if _, err := tx.Exec(ctx, holdRequeuedSQL, ids); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, promoteOfSQL, ids)
	return err
}

// refreshHolds makes an endpoint's pending deliveries agree with its
// controls after an operator changed them: all held while it is disabled,
// none while it is enabled and unordered, and one at a time when ordered.
// Holding reads the endpoint's deliveries through its index of all of
// them; an operator's change is rare enough to afford it, and no index of
// every pending row is kept for it, which every delivery would pay for.
//
// When it lets deliveries go (the endpoint is enabled, or no longer
// ordered, or an ordered one's turn passes), it sends the wake-up, as
// wakeID, and reports that it did.
func refreshHolds(ctx context.Context, tx pgx.Tx, endpointID string, c control, wakeID string) (bool, error) {
	if !c.disabled && !c.ordered {
		tag, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET held = false
			WHERE endpoint_id = $1 AND held`, endpointID)
		if err != nil || tag.RowsAffected() == 0 {
			return false, err
		}
		_, err = tx.Exec(ctx, notifySQL, wakeID)
		return err == nil, err
	}
	if _, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET held = true
		WHERE endpoint_id = $1 AND state = 'pending' AND NOT held`, endpointID); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET turn_delivery_id = NULL WHERE id = $1`, endpointID); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, promoteSQL, []string{endpointID}); err != nil || c.disabled {
		return false, err
	}
	return notifyTurn(ctx, tx, []string{endpointID}, true, wakeID)
}

// notifyTurn runs notifyTurnSQL for ids, the endpoints when byEndpoint,
// else the deliveries whose endpoints are looked at, and reports whether
// it sent the wake-up.
func notifyTurn(ctx context.Context, tx pgx.Tx, ids []string, byEndpoint bool, wakeID string) (bool, error) {
	q := notifyTurnSQL
	if byEndpoint {
		q = notifyTurnOfEndpointsSQL
	}
	rows, err := tx.Query(ctx, q, ids, wakeID)
	if err != nil {
		return false, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	return n > 0, rows.Err()
}

// needsAdmission reports whether any claim is subject to its endpoint's
// controls; most batches are not, and cost nothing more.
func needsAdmission(claims []storage.Claim) bool {
	for _, c := range claims {
		if c.Endpoint.DisabledAt != nil || c.Endpoint.Limited() {
			return true
		}
	}
	return false
}

// admitClaims applies the endpoints' controls to claims just taken in tx:
// a delivery of an endpoint disabled meanwhile goes back held, those over
// an endpoint's rate or in-flight budget go back pending, due when the
// budget allows. Neither spends an attempt. It returns the claims that may
// be sent, in order, and how long after the admission's now each delivery
// it put back is due, for the store's timed wake-ups.
func admitClaims(ctx context.Context, tx pgx.Tx, claims []storage.Claim, at time.Time) ([]storage.Claim, []time.Duration, error) {
	keep := make([]bool, len(claims))
	var putBack putBack
	byEndpoint := map[string][]int{}
	var limited []string
	for i, c := range claims {
		keep[i] = true
		switch ep := c.Endpoint; {
		case ep.DisabledAt != nil:
			keep[i] = false
			putBack.add(c, time.Time{}, true)
		case ep.Limited():
			if _, seen := byEndpoint[ep.ID]; !seen {
				limited = append(limited, ep.ID)
			}
			byEndpoint[ep.ID] = append(byEndpoint[ep.ID], i)
		}
	}
	// In id order, so two admissions take the limiter rows in one order
	// and never wait on each other in turn.
	sort.Strings(limited)
	var later []time.Duration
	err := func() error {
		throttles := map[string]storage.Throttle{}
		inFlight := map[string]int{}
		var now time.Time
		if len(limited) > 0 {
			rows, err := tx.Query(ctx, `
				INSERT INTO webhook_endpoint_throttles AS t (endpoint_id, tat, deferred_until)
				SELECT id, to_timestamp(0), to_timestamp(0) FROM unnest($1::text[]) AS id ORDER BY id
				ON CONFLICT (endpoint_id) DO UPDATE SET endpoint_id = excluded.endpoint_id
				RETURNING t.endpoint_id, t.tat, t.deferred_until`, limited)
			if err != nil {
				return err
			}
			var id string
			var st storage.Throttle
			if _, err := pgx.ForEachRow(rows, []any{&id, &st.TAT, &st.DeferredUntil}, func() error {
				throttles[id] = st
				return nil
			}); err != nil {
				return err
			}
			// A statement of its own, after the locks: it must see the
			// sends of every admission that held them before. Processing
			// rows are never more than the sends under way everywhere.
			rows, err = tx.Query(ctx, `
				SELECT ep.id, coalesce($2::timestamptz, now()),
					(SELECT count(*) FROM webhook_deliveries AS d
					 WHERE d.endpoint_id = ep.id AND d.state = 'processing'
					   AND d.claim_expires_at >= coalesce($2::timestamptz, now()))
				FROM unnest($1::text[]) AS ep (id)`, limited, dbNow(at))
			if err != nil {
				return err
			}
			var n int
			if _, err := pgx.ForEachRow(rows, []any{&id, &now, &n}, func() error {
				inFlight[id] = n
				return nil
			}); err != nil {
				return err
			}
		}
		var next throttleUpdate
		for _, id := range limited {
			idx := byEndpoint[id]
			// The claims just taken are processing with a fresh lease, so
			// they are in the count: take them out again.
			adm := storage.Admit(claims[idx[0]].Endpoint, throttles[id], max(0, inFlight[id]-len(idx)), len(idx), now)
			for j, due := range adm.Due {
				later = append(later, due.Sub(now))
				i := idx[adm.Admitted+j]
				keep[i] = false
				putBack.add(claims[i], due, false)
			}
			next.add(id, adm.Next)
		}
		b := &pgx.Batch{}
		if len(putBack.ids) > 0 {
			b.Queue(`
				UPDATE webhook_deliveries AS d
				SET state = 'pending', claim_token = NULL, claim_expires_at = NULL,
					held = x.held, next_attempt_at = coalesce(x.due, d.next_attempt_at)
				FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::boolean[]) AS x (id, token, due, held)
				WHERE d.id = x.id AND d.claim_token = x.token`,
				putBack.ids, putBack.tokens, putBack.due, putBack.held)
		}
		if len(next.ids) > 0 {
			b.Queue(`
				UPDATE webhook_endpoint_throttles AS t SET tat = x.tat, deferred_until = x.deferred_until
				FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS x (id, tat, deferred_until)
				WHERE t.endpoint_id = x.id`, next.ids, next.tat, next.deferredUntil)
		}
		return tx.SendBatch(ctx, b).Close()
	}()
	if err != nil {
		return nil, nil, err
	}
	return storage.Admitted(claims, keep), later, nil
}

// putBack is the claims an admission gives back, as the arrays its update
// unnests: due again at due (nil: when they were due), held or not.
type putBack struct {
	ids, tokens []string
	due         []*time.Time
	held        []bool
}

func (p *putBack) add(c storage.Claim, due time.Time, held bool) {
	p.ids = append(p.ids, c.Delivery.ID)
	p.tokens = append(p.tokens, c.Token)
	p.due = append(p.due, timeOrNull(due))
	p.held = append(p.held, held)
}

// throttleUpdate is the limiter states an admission writes back.
type throttleUpdate struct {
	ids                []string
	tat, deferredUntil []time.Time
}

func (u *throttleUpdate) add(id string, t storage.Throttle) {
	u.ids = append(u.ids, id)
	u.tat = append(u.tat, t.TAT)
	u.deferredUntil = append(u.deferredUntil, t.DeferredUntil)
}
