package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/hymical/hymical/storage"
)

// claimSQL claims in one statement. Each branch of the union walks its
// partial index in (next_attempt_at, id) order and stops at the limit, so a
// claim reads about limit rows however large the backlog; the merge keeps
// the oldest due. Expired leases are found among processing rows, which are
// never more than the deliveries in flight. INDEXED BY names the indexes,
// because without statistics SQLite's planner prefers the (state, id) index
// and sorts every pending row, which is the very cost this avoids.
const claimSQL = `
	UPDATE webhook_deliveries
	SET state = 'processing',
		claim_expires_at = :now + :lease,
		claim_token = lower(hex(randomblob(16)))
	WHERE id IN (
		SELECT id FROM (
			SELECT id, next_attempt_at FROM (
				SELECT id, next_attempt_at FROM webhook_deliveries INDEXED BY webhook_deliveries_pending_order
				WHERE state = 'pending' AND held = 0 AND next_attempt_at <= :now
				ORDER BY next_attempt_at, id LIMIT :limit)
			UNION ALL
			SELECT id, next_attempt_at FROM (
				SELECT id, next_attempt_at FROM webhook_deliveries INDEXED BY webhook_deliveries_processing_order
				WHERE state = 'processing' AND claim_expires_at < :now
				ORDER BY next_attempt_at, id LIMIT :limit))
		ORDER BY next_attempt_at, id LIMIT :limit)
	RETURNING ` + deliveryColumns + `, claim_token`

// claimFairSQL claims the pending rows pickFair chose (:picked, a JSON list
// of ids) and the oldest expired leases, oldest due first.
const claimFairSQL = `
	UPDATE webhook_deliveries
	SET state = 'processing',
		claim_expires_at = :now + :lease,
		claim_token = lower(hex(randomblob(16)))
	WHERE id IN (
		SELECT id FROM (
			SELECT id, next_attempt_at FROM webhook_deliveries
			WHERE id IN (SELECT value FROM json_each(:picked))
				AND state = 'pending' AND held = 0 AND next_attempt_at <= :now
			UNION ALL
			SELECT id, next_attempt_at FROM (
				SELECT id, next_attempt_at FROM webhook_deliveries INDEXED BY webhook_deliveries_processing_order
				WHERE state = 'processing' AND claim_expires_at < :now
				ORDER BY next_attempt_at, id LIMIT :limit))
		ORDER BY next_attempt_at, id LIMIT :limit)
	RETURNING ` + deliveryColumns + `, claim_token`

const endpointsByIDSQL = `SELECT ` + endpointColumns + ` FROM webhook_endpoints
	WHERE id IN (SELECT value FROM json_each(?))`

// DeliveryClaim claims up to p.Limit claimable deliveries in one writer
// transaction, each with its event and its endpoint, and returns those the
// endpoints' controls admit (see admitClaims). The single writer connection
// (and, across processes, SQLite's write lock) is what keeps two claimers
// from picking the same row and two processes from overspending one
// endpoint's budget.
func (s *Store) DeliveryClaim(ctx context.Context, p storage.DeliveryClaimParams) ([]storage.Claim, error) {
	const op = "claim deliveries"
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	queries := []string{claimSQL, eventsByIDSQL, endpointsByIDSQL}
	if p.Share != nil {
		queries = []string{claimFairSQL, eventsByIDSQL, endpointsByIDSQL, headsFirstSQL, headsAfterSQL, probeSQL, moveHeadSQL}
	}
	st, err := s.prepare(ctx, queries...)
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	nowTime := s.now(p.Now)
	now := micros(nowTime)
	claims := []storage.Claim{}
	var later []time.Duration
	err = s.write(ctx, op, func(tx *sql.Tx) error {
		args := []any{sql.Named("now", now), sql.Named("lease", p.Lease.Microseconds()), sql.Named("limit", p.Limit)}
		var pick storage.SharePick
		if p.Share != nil {
			var err error
			pick, err = storage.PickShare(ctx, &headSource{
				first: tx.StmtContext(ctx, st[3]),
				after: tx.StmtContext(ctx, st[4]),
				probe: tx.StmtContext(ctx, st[5]),
				now:   now,
			}, p.Share, p.Limit)
			if err != nil {
				return err
			}
			args = append(args, sql.Named("picked", jsonList(pick.IDs)))
		}
		rows, err := tx.StmtContext(ctx, st[0]).QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c storage.Claim
			if c.Delivery, err = scanDelivery(rows, &c.Token); err != nil {
				return err
			}
			claims = append(claims, c)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		if p.Share != nil {
			claimed := make(map[string]bool, len(claims))
			for _, c := range claims {
				claimed[c.Delivery.ID] = true
			}
			move := tx.StmtContext(ctx, st[6])
			for _, m := range pick.Moves() {
				var due, head any // none: NULL
				if h := m.Head(claimed); h != nil {
					due, head = h.Due, h.ID
				}
				if _, err := move.ExecContext(ctx, sql.Named("due", due), sql.Named("head", head), sql.Named("endpoint", m.EndpointID)); err != nil {
					return err
				}
			}
		}
		if len(claims) == 0 {
			return nil
		}
		// RETURNING comes in no promised order.
		sort.Slice(claims, func(i, j int) bool {
			a, b := claims[i].Delivery, claims[j].Delivery
			if !a.NextAttemptAt.Equal(b.NextAttemptAt) {
				return a.NextAttemptAt.Before(b.NextAttemptAt)
			}
			return a.ID < b.ID
		})
		eventIDs := make([]string, len(claims))
		endpointIDs := make([]string, len(claims))
		for i, c := range claims {
			eventIDs[i] = c.Delivery.EventID
			endpointIDs[i] = c.Delivery.EndpointID
		}
		events, err := eventsByID(ctx, tx.StmtContext(ctx, st[1]), eventIDs)
		if err != nil {
			return err
		}
		endpoints, err := endpointsByID(ctx, tx.StmtContext(ctx, st[2]), endpointIDs, s.secrets)
		if err != nil {
			return err
		}
		for i := range claims {
			c := &claims[i]
			var ok bool
			if c.Event, ok = events[c.Delivery.EventID]; !ok {
				return fmt.Errorf("event %s of delivery %s is missing", c.Delivery.EventID, c.Delivery.ID)
			}
			if c.Endpoint, ok = endpoints[c.Delivery.EndpointID]; !ok {
				return fmt.Errorf("endpoint %s of delivery %s is missing", c.Delivery.EndpointID, c.Delivery.ID)
			}
		}
		claims, later, err = admitClaims(ctx, tx, claims, nowTime)
		return err
	})
	if err != nil {
		return nil, err
	}
	// What the endpoints' budgets put back is due later: wake up for it
	// then rather than find it by polling.
	for _, d := range later {
		s.wake.SignalAfter(d)
	}
	return claims, nil
}

// endpointsByID reads the endpoints named in ids (repeats allowed) with
// the prepared endpointsByIDSQL, their secrets opened by codec.
func endpointsByID(ctx context.Context, st *sql.Stmt, ids []string, codec storage.SecretsCodec) (map[string]storage.Endpoint, error) {
	rows, err := st.QueryContext(ctx, jsonList(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]storage.Endpoint{}
	for rows.Next() {
		e, err := scanEndpoint(rows, codec)
		if err != nil {
			return nil, err
		}
		out[e.ID] = e
	}
	return out, rows.Err()
}
