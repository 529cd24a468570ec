-- Queue heads: one row per endpoint that has had claimable deliveries, with
-- a time no later than its oldest claimable (pending, not held) one. A
-- claim with a share walks the due heads oldest first and probes each
-- endpoint's first rows through webhook_deliveries_endpoint_due, so it
-- reads the endpoints it takes from rather than every endpoint with work;
-- it then moves each head it looked at to the first row it left behind.
-- The triggers lower a head in the transaction of every write that makes a
-- delivery claimable, whichever statement makes it. A head is never high,
-- so no due delivery is missed; it may be low, which costs a claim one
-- probe that finds nothing and moves it on. Times are Unix microseconds,
-- as in webhook_deliveries.
CREATE TABLE webhook_endpoint_queues (
    endpoint_id TEXT PRIMARY KEY,
    next_due_at INTEGER
) STRICT, WITHOUT ROWID;
CREATE INDEX webhook_endpoint_queues_due ON webhook_endpoint_queues (next_due_at, endpoint_id)
    WHERE next_due_at IS NOT NULL;

INSERT INTO webhook_endpoint_queues (endpoint_id, next_due_at)
    SELECT endpoint_id, min(next_attempt_at) FROM webhook_deliveries
    WHERE state = 'pending' AND held = 0 GROUP BY endpoint_id;

CREATE TRIGGER webhook_deliveries_queue_insert AFTER INSERT ON webhook_deliveries
    WHEN NEW.state = 'pending' AND NEW.held = 0
BEGIN
    INSERT INTO webhook_endpoint_queues (endpoint_id, next_due_at)
        VALUES (NEW.endpoint_id, NEW.next_attempt_at)
    ON CONFLICT (endpoint_id) DO UPDATE SET next_due_at = excluded.next_due_at
        WHERE next_due_at IS NULL OR excluded.next_due_at < next_due_at;
END;

CREATE TRIGGER webhook_deliveries_queue_update AFTER UPDATE OF state, held, next_attempt_at, endpoint_id
    ON webhook_deliveries
    WHEN NEW.state = 'pending' AND NEW.held = 0
        AND (OLD.state <> 'pending' OR OLD.held <> 0 OR NEW.next_attempt_at < OLD.next_attempt_at
            OR NEW.endpoint_id <> OLD.endpoint_id)
BEGIN
    INSERT INTO webhook_endpoint_queues (endpoint_id, next_due_at)
        VALUES (NEW.endpoint_id, NEW.next_attempt_at)
    ON CONFLICT (endpoint_id) DO UPDATE SET next_due_at = excluded.next_due_at
        WHERE next_due_at IS NULL OR excluded.next_due_at < next_due_at;
END;
