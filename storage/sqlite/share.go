package sqlite

import (
	"context"
	"database/sql"

	"github.com/hymical/hymical/storage"
)

// The statements of a claim with a share (see storage.PickShare): the due
// queue heads in order, from the first or after a cursor, leaving out the
// endpoints in :exclude or, with :only, all but those in :include (one
// more than asked: the cutoff); one endpoint's first claimable rows,
// whenever due; and a head moved on.
const (
	headsWhere = `next_due_at IS NOT NULL AND next_due_at <= :now
			AND endpoint_id NOT IN (SELECT value FROM json_each(:exclude))
			AND (:only = 0 OR endpoint_id IN (SELECT value FROM json_each(:include)))`
	headsFirstSQL = `SELECT endpoint_id, next_due_at, head_id
		FROM webhook_endpoint_queues INDEXED BY webhook_endpoint_queues_due
		WHERE ` + headsWhere + `
		ORDER BY next_due_at, head_id LIMIT :n`
	headsAfterSQL = `SELECT endpoint_id, next_due_at, head_id
		FROM webhook_endpoint_queues INDEXED BY webhook_endpoint_queues_due
		WHERE ` + headsWhere + ` AND (next_due_at, head_id) > (:after_due, :after_id)
		ORDER BY next_due_at, head_id LIMIT :n`
	probeSQL = `SELECT id, next_attempt_at
		FROM webhook_deliveries INDEXED BY webhook_deliveries_endpoint_due
		WHERE endpoint_id = :endpoint AND state = 'pending' AND held = 0
		ORDER BY next_attempt_at, id LIMIT :n`
	moveHeadSQL = `UPDATE webhook_endpoint_queues SET next_due_at = :due, head_id = :head WHERE endpoint_id = :endpoint`
)

// headSource reads heads and rows for storage.PickShare in a claim's
// transaction: the single writer's, so nothing changes under it.
type headSource struct {
	first, after, probe *sql.Stmt
	now                 int64
}

func (h *headSource) Heads(ctx context.Context, after *storage.DueHead, n int, exclude, include []string) ([]storage.DueHead, *storage.DueHead, error) {
	if exclude == nil {
		exclude = []string{} // not null: NOT IN a null list leaves out every row
	}
	args := []any{sql.Named("now", h.now), sql.Named("exclude", jsonList(exclude)),
		sql.Named("only", include != nil), sql.Named("include", jsonList(include)), sql.Named("n", n+1)}
	st := h.first
	if after != nil {
		st = h.after
		args = append(args, sql.Named("after_due", after.Due), sql.Named("after_id", after.ID))
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var heads []storage.DueHead
	for rows.Next() {
		var d storage.DueHead
		if err := rows.Scan(&d.EndpointID, &d.Due, &d.ID); err != nil {
			return nil, nil, err
		}
		heads = append(heads, d)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(heads) > n {
		return heads[:n], &heads[n], nil
	}
	return heads, nil, nil
}

func (h *headSource) Now() int64 { return h.now }

func (h *headSource) Probe(ctx context.Context, endpoints []string, counts []int) (map[string][]storage.DueRow, error) {
	out := make(map[string][]storage.DueRow, len(endpoints))
	for i, endpoint := range endpoints {
		rows, err := h.probe.QueryContext(ctx, sql.Named("endpoint", endpoint), sql.Named("n", counts[i]))
		if err != nil {
			return nil, err
		}
		var got []storage.DueRow
		for rows.Next() {
			var r storage.DueRow
			if err := rows.Scan(&r.ID, &r.Due); err != nil {
				rows.Close()
				return nil, err
			}
			got = append(got, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out[endpoint] = got
	}
	return out, nil
}
