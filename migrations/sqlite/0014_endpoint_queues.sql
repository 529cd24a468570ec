-- Queue heads: one row per endpoint that has had claimable deliveries,
-- holding a position (next_due_at, head_id) no later, in the claim's
-- (next_attempt_at, id) order, than its first claimable (pending, not
-- held) delivery. A claim with a share walks the due heads in that order
-- and probes each endpoint's first rows through
-- webhook_deliveries_endpoint_due, so it reads the endpoints it takes from
-- rather than every endpoint with work; it then moves each head it looked
-- at to the first row it left behind. The trigger lowers a head in the
-- transaction of every update that makes a delivery claimable, whichever
-- statement makes it, and creates lower theirs. A head is never late, so no due delivery is missed;
-- it may be early, which costs a claim one probe that finds nothing and
-- moves it on. Times are Unix microseconds, as in webhook_deliveries.
CREATE TABLE webhook_endpoint_queues (
    endpoint_id TEXT PRIMARY KEY,
    next_due_at INTEGER,
    head_id     TEXT
) STRICT, WITHOUT ROWID;
CREATE INDEX webhook_endpoint_queues_due ON webhook_endpoint_queues (next_due_at, head_id)
    WHERE next_due_at IS NOT NULL;

INSERT INTO webhook_endpoint_queues (endpoint_id, next_due_at, head_id)
    SELECT endpoint_id, next_attempt_at, id FROM webhook_deliveries AS d
    WHERE state = 'pending' AND held = 0
        AND NOT EXISTS (SELECT 1 FROM webhook_deliveries AS e
            WHERE e.endpoint_id = d.endpoint_id AND e.state = 'pending' AND e.held = 0
                AND (e.next_attempt_at, e.id) < (d.next_attempt_at, d.id));

-- Creates lower the heads of their batch in the same transaction (see
-- createEvents), once per endpoint. An insert trigger did it per row, and
-- with any trigger on inserts (even one that does nothing) each insert of
-- a batch cost more the more deliveries the table held: a create of 1,000
-- deliveries took 25 ms on an empty table without it, and with it 35 ms,
-- then 20 ms more for each 1,000 rows already there.

CREATE TRIGGER webhook_deliveries_queue_update AFTER UPDATE OF state, held, next_attempt_at, endpoint_id
    ON webhook_deliveries
    WHEN NEW.state = 'pending' AND NEW.held = 0
        AND (OLD.state <> 'pending' OR OLD.held <> 0 OR NEW.next_attempt_at < OLD.next_attempt_at
            OR NEW.endpoint_id <> OLD.endpoint_id)
BEGIN
    INSERT INTO webhook_endpoint_queues (endpoint_id, next_due_at, head_id)
        VALUES (NEW.endpoint_id, NEW.next_attempt_at, NEW.id)
    ON CONFLICT (endpoint_id) DO UPDATE SET next_due_at = excluded.next_due_at, head_id = excluded.head_id
        WHERE next_due_at IS NULL OR (excluded.next_due_at, excluded.head_id) < (next_due_at, head_id);
END;
