package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// DeliveryClaim claims up to p.Limit claimable deliveries, oldest due first,
// each with a fresh random token, the event it carries and its endpoint,
// and returns those the endpoints' controls admit (see admitClaims).
func (s *Store) DeliveryClaim(ctx context.Context, p storage.DeliveryClaimParams) ([]storage.Claim, error) {
	const op = "delivery claim"
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	// One transaction with the admission, so that claims another process
	// has taken but not yet admitted are invisible to this one's count of
	// sends under way, rather than counted against the cap.
	var claims []storage.Claim
	var later []time.Duration
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if claims, err = claimIn(ctx, tx, p, s.secrets); err != nil || !needsAdmission(claims) {
			return err
		}
		claims, later, err = admitClaims(ctx, tx, claims, p.Now)
		return err
	})
	if err != nil {
		return nil, mapErr(op, err)
	}
	// What the endpoints' budgets put back is due later: this process
	// wakes up for it then rather than find it by polling.
	for _, d := range later {
		s.wake.hub.SignalAfter(d)
	}
	if claims == nil {
		claims = []storage.Claim{}
	}
	return claims, nil
}

// claimIn runs the claim statement in tx; codec opens the endpoints' secrets.
func claimIn(ctx context.Context, tx pgx.Tx, p storage.DeliveryClaimParams, codec storage.SecretsCodec) ([]storage.Claim, error) {
	// A batch usually holds many deliveries to few endpoints: each
	// endpoint's secrets are decoded once.
	endpoints := map[string]storage.Endpoint{}
	if p.Share != nil {
		return claimFair(ctx, tx, p, codec, endpoints)
	}
	rows, err := tx.Query(ctx, claimSQL, dbNow(p.Now), p.Limit, p.Lease.Microseconds())
	if err != nil {
		return nil, err
	}
	return collectClaims(rows, codec, endpoints)
}

// claimSQL claims in one statement. Each branch walks its partial index in
// (next_attempt_at, id) order and stops at the limit, so a claim reads about
// limit rows however large the backlog; the two are merged and cut to the
// limit, oldest due first. FOR UPDATE SKIP LOCKED in each branch means
// concurrent claimers neither wait nor overlap, and the LIMIT counts only
// rows this claimer locked. A branch may lock a few rows the merge then
// drops; they are unlocked at the end of the statement, untouched. A lease
// is "expired" strictly after claim_expires_at, a pending row is due at
// next_attempt_at. Each claim carries its event and its endpoint, so the
// worker reads nothing else before it sends.
const claimSQL = `
WITH pending AS (
	SELECT id, next_attempt_at FROM webhook_deliveries
	WHERE state = 'pending' AND NOT held AND next_attempt_at <= coalesce($1::timestamptz, now())
	ORDER BY next_attempt_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)` + claimExpiredAndTake

// claimExpiredAndTake ends both claim statements: after their pending CTE
// it adds the oldest expired leases, keeps the oldest due of both, gives
// each a lease and a fresh token, and returns them with their events and
// endpoints.
const claimExpiredAndTake = claimExpiredCTEs + claimTakeSelect

const claimExpiredCTEs = `, expired AS (
	SELECT id, next_attempt_at FROM webhook_deliveries
	WHERE state = 'processing' AND claim_expires_at < coalesce($1::timestamptz, now())
	ORDER BY next_attempt_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), due AS (
	SELECT id FROM (SELECT * FROM pending UNION ALL SELECT * FROM expired) AS u
	ORDER BY next_attempt_at, id
	LIMIT $2
), claimed AS (
	UPDATE webhook_deliveries AS d
	SET state = 'processing',
		claim_expires_at = coalesce($1::timestamptz, now()) + $3::bigint * interval '1 microsecond',
		claim_token = gen_random_uuid()::text
	FROM due
	WHERE d.id = due.id
	RETURNING d.*
)`

const claimTakeSelect = `
SELECT ` + deliveryColumns + `, d.claim_token, ` + eventColumns + `, ` + epEndpointColumns + `
FROM claimed AS d
JOIN webhook_events AS e ON e.id = d.event_id
JOIN webhook_endpoints AS ep ON ep.id = d.endpoint_id
ORDER BY d.next_attempt_at, d.id`

// collectClaims reads the rows of a claim statement; codec opens the
// endpoints' secrets, each endpoint's once, kept in endpoints.
func collectClaims(rows pgx.Rows, codec storage.SecretsCodec, endpoints map[string]storage.Endpoint) ([]storage.Claim, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Claim, error) {
		var c storage.Claim
		var ev eventScan
		var ep endpointScan
		err := r.Scan(append(append(append(deliveryDest(&c.Delivery), &c.Token), ev.dest()...), ep.dest()...)...)
		if err != nil {
			return c, err
		}
		c.Event = ev.event()
		known, ok := endpoints[ep.e.ID]
		if !ok {
			if known, err = ep.endpoint(codec); err != nil {
				return c, err
			}
			endpoints[known.ID] = known
		}
		c.Endpoint = known
		return c, nil
	})
}
