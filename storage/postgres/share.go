package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

// claimFair claims with a share: storage.PickShare picks through the
// heads, then one statement claims the picks that are still claimable
// (skipping rows another transaction holds, whose endpoint's head then
// stays at them) and moves the heads.
func claimFair(ctx context.Context, tx pgx.Tx, p storage.DeliveryClaimParams, codec storage.SecretsCodec, endpoints map[string]storage.Endpoint) ([]storage.Claim, error) {
	src := &headSource{tx: tx, at: dbNow(p.Now)}
	if !p.Now.IsZero() {
		src.now = p.Now.UnixMicro()
	}
	pick, err := storage.PickShare(ctx, src, p.Share, p.Limit)
	if err != nil {
		return nil, err
	}
	heads := pick.Moves()
	var (
		headIDs   = make([]string, len(heads))
		headAt    = make([]*time.Time, len(heads))
		headRows  = make([]*string, len(heads))
		headVers  = make([]int64, len(heads))
		probedEps []string
		probedIDs []string
		probedAt  []time.Time
	)
	for i, m := range heads {
		headIDs[i], headVers[i] = m.EndpointID, m.Version
		if m.Fallback != nil {
			t := time.UnixMicro(m.Fallback.Due).UTC()
			headAt[i], headRows[i] = &t, &m.Fallback.ID
		}
		for _, r := range m.Rows {
			probedEps, probedIDs, probedAt = append(probedEps, m.EndpointID), append(probedIDs, r.ID), append(probedAt, time.UnixMicro(r.Due).UTC())
		}
	}
	if pick.IDs == nil {
		pick.IDs = []string{}
	}
	rows, err := tx.Query(ctx, claimPickedSQL, dbNow(p.Now), p.Limit, p.Lease.Microseconds(), pick.IDs,
		headIDs, headAt, probedEps, probedIDs, probedAt, headRows, headVers)
	if err != nil {
		return nil, err
	}
	return collectClaims(rows, codec, endpoints)
}

// headSource reads heads and rows for storage.PickShare in a claim's
// transaction.
type headSource struct {
	tx  pgx.Tx
	at  any // the claim's clock: p.Now, or nil for the database's
	now int64
}

func (h *headSource) Heads(ctx context.Context, after *storage.DueHead, n int, exclude, include []string) ([]storage.DueHead, *storage.DueHead, error) {
	var afterAt any
	afterID := ""
	if after != nil {
		afterAt, afterID = time.UnixMicro(after.Due).UTC(), after.ID
	}
	only := include != nil
	if exclude == nil {
		exclude = []string{}
	}
	rows, err := h.tx.Query(ctx, headsSQL, h.at, afterAt, afterID, exclude, only, include, n+1)
	if err != nil {
		return nil, nil, err
	}
	var heads []storage.DueHead
	for rows.Next() {
		var d storage.DueHead
		var due, now time.Time
		if err := rows.Scan(&d.EndpointID, &due, &d.ID, &d.Version, &now); err != nil {
			rows.Close()
			return nil, nil, err
		}
		d.Due = due.UnixMicro()
		heads = append(heads, d)
		if h.at == nil {
			h.now = now.UnixMicro()
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(heads) <= n {
		return heads, nil, nil
	}
	return heads[:n], &heads[n], nil
}

func (h *headSource) Now() int64 { return h.now }

func (h *headSource) Probe(ctx context.Context, endpoints []string, counts []int) (map[string][]storage.DueRow, error) {
	n := make([]int32, len(counts))
	for i, c := range counts {
		n[i] = int32(c)
	}
	rows, err := h.tx.Query(ctx, probeSQL, endpoints, n)
	if err != nil {
		return nil, err
	}
	// A row is held when the unlocked read saw it and the locking one
	// did not.
	locked := map[string]bool{}
	seen := map[string]bool{}
	out := map[string][]storage.DueRow{}
	for rows.Next() {
		var endpoint string
		var r storage.DueRow
		var due time.Time
		var unlocked bool
		if err := rows.Scan(&endpoint, &r.ID, &due, &unlocked); err != nil {
			rows.Close()
			return nil, err
		}
		if !unlocked {
			locked[r.ID] = true
		} else if locked[r.ID] {
			continue
		}
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		r.Due = due.UnixMicro()
		out[endpoint] = append(out[endpoint], r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for endpoint, rs := range out {
		for i := range rs {
			rs[i].Held = !locked[rs[i].ID]
		}
		storage.SortDueRows(rs)
		out[endpoint] = rs
	}
	return out, nil
}

// The claim with a share (see storage.ClaimShare and storage.PickShare)
// walks the endpoints' queue heads and probes their rows, then claims what
// it picked and moves the heads in one statement.
//
// headsSQL reads the due heads in (next_due_at, head_id) order, a range of
// webhook_endpoint_queues_due after the cursor ($2, $3), leaving out the
// endpoints in $4 (those with no room) or, with $5, all but those; one more
// than asked, which is the claim's cutoff (see storage.PickShare). It
// locks nothing: other processes walk the same heads and split their rows
// (the probe skips the rows another claim holds). It runs in a statement
// of its own, before the probe, and reads each head's version: a write
// that made a delivery claimable and committed before this read is seen
// by the probe's later snapshot; one that commits after it changes the
// version, and the claim then leaves that head where it is (see migration
// 0015).
const (
	headsSQL = `SELECT endpoint_id, next_due_at, head_id, version, now() FROM webhook_endpoint_queues
WHERE next_due_at <= coalesce($1::timestamptz, now())
	AND ($2::timestamptz IS NULL OR (next_due_at, head_id) > ($2::timestamptz, $3::text))
	AND endpoint_id <> ALL($4::text[])
	AND (NOT $5::boolean OR endpoint_id = ANY($6::text[]))
ORDER BY next_due_at, head_id
LIMIT $7`
	// probeSQL reads each endpoint's first claimable rows ($1, $2:
	// endpoints and how many), whenever due, through
	// webhook_deliveries_endpoint_due: those it can lock, which it keeps
	// locked for the claim, and, unlocked, the first rows whoever holds
	// them, so that rows another transaction holds are seen as held.
	probeSQL = `SELECT e.endpoint_id, d.id, d.next_attempt_at, false
FROM unnest($1::text[], $2::integer[]) AS e(endpoint_id, n)
CROSS JOIN LATERAL (
	SELECT id, next_attempt_at FROM webhook_deliveries
	WHERE endpoint_id = e.endpoint_id AND state = 'pending' AND NOT held
	ORDER BY next_attempt_at, id
	LIMIT e.n
	FOR UPDATE SKIP LOCKED) AS d
UNION ALL
SELECT e.endpoint_id, d.id, d.next_attempt_at, true
FROM unnest($1::text[], $2::integer[]) AS e(endpoint_id, n)
CROSS JOIN LATERAL (
	SELECT id, next_attempt_at FROM webhook_deliveries
	WHERE endpoint_id = e.endpoint_id AND state = 'pending' AND NOT held
	ORDER BY next_attempt_at, id
	LIMIT e.n) AS d`
	// claimPickedSQL claims the picked rows ($4) that are still claimable,
	// skipping those another transaction holds, with the oldest expired
	// leases, as claimSQL does; and moves each head looked at ($5, $6, $10,
	// $11: endpoints, where the pick would move them, NULL for none, and
	// the versions read) to the first row probed ($7, $8, $9: endpoints,
	// ids, due times) that was not claimed, or else to where the pick said.
	// A head moves only if it can be locked at once and its version is
	// still the one read (checked again on the newest row version by the
	// lock): otherwise a write since may have made a row claimable that
	// the probe did not see, and the head stays, early.
	claimPickedSQL = `
WITH pending AS (
	SELECT d.id, d.next_attempt_at FROM unnest($4::text[]) AS p(id)
	JOIN webhook_deliveries AS d ON d.id = p.id
	WHERE d.state = 'pending' AND NOT d.held AND d.next_attempt_at <= coalesce($1::timestamptz, now())
	FOR UPDATE OF d SKIP LOCKED
)` + claimExpiredCTEs + `, unclaimed AS (
	SELECT DISTINCT ON (p.endpoint_id) p.endpoint_id, p.due, p.id
	FROM unnest($7::text[], $8::text[], $9::timestamptz[]) AS p(endpoint_id, id, due)
	WHERE NOT EXISTS (SELECT 1 FROM claimed AS c WHERE c.id = p.id)
	ORDER BY p.endpoint_id, p.due, p.id
), heads AS (
	SELECT h.* FROM unnest($5::text[], $6::timestamptz[], $10::text[], $11::bigint[]) AS h(endpoint_id, due, head, version)
	JOIN webhook_endpoint_queues AS q ON q.endpoint_id = h.endpoint_id
	WHERE q.version = h.version
	FOR UPDATE OF q SKIP LOCKED
), moved AS (
	UPDATE webhook_endpoint_queues AS q
	SET next_due_at = CASE WHEN u.id IS NULL THEN h.due ELSE u.due END,
		head_id = CASE WHEN u.id IS NULL THEN h.head ELSE u.id END,
		version = q.version + 1
	FROM heads AS h
	LEFT JOIN unclaimed AS u ON u.endpoint_id = h.endpoint_id
	WHERE q.endpoint_id = h.endpoint_id
)` + claimTakeSelect
)
