-- Per-endpoint controls: limits, ordering, a retry schedule, and why and
-- since when an endpoint is disabled or failing.
ALTER TABLE webhook_endpoints ADD COLUMN rate_limit REAL NOT NULL DEFAULT 0 CHECK (rate_limit >= 0);
ALTER TABLE webhook_endpoints ADD COLUMN rate_burst INTEGER NOT NULL DEFAULT 0 CHECK (rate_burst >= 0);
ALTER TABLE webhook_endpoints ADD COLUMN max_in_flight INTEGER NOT NULL DEFAULT 0 CHECK (max_in_flight >= 0);
ALTER TABLE webhook_endpoints ADD COLUMN ordered INTEGER NOT NULL DEFAULT 0 CHECK (ordered IN (0, 1));
ALTER TABLE webhook_endpoints ADD COLUMN retry_schedule TEXT NOT NULL DEFAULT '[]';
ALTER TABLE webhook_endpoints ADD COLUMN disabled_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE webhook_endpoints ADD COLUMN failing_since INTEGER;
-- The delivery an ordered endpoint last let go; it has the turn while it is
-- pending and not held.
ALTER TABLE webhook_endpoints ADD COLUMN turn_delivery_id TEXT;

-- An event may name the one endpoint it goes to (operator notifications).
ALTER TABLE webhook_events ADD COLUMN endpoint_id TEXT NOT NULL DEFAULT '';

-- The limiter's state, one row per limited endpoint: tat is the GCRA
-- theoretical arrival time, deferred_until the last slot handed to a
-- deferred delivery. Microseconds, like every time here.
CREATE TABLE webhook_endpoint_throttles (
    endpoint_id    TEXT PRIMARY KEY REFERENCES webhook_endpoints (id),
    tat            INTEGER NOT NULL,
    deferred_until INTEGER NOT NULL
) STRICT;

-- A held delivery is pending but not claimable: its endpoint is disabled, or
-- it waits behind an earlier delivery of an ordered endpoint. Held rows are
-- left out of the claim's index, so a large held backlog costs claims nothing.
ALTER TABLE webhook_deliveries ADD COLUMN held INTEGER NOT NULL DEFAULT 0 CHECK (held IN (0, 1));
DROP INDEX webhook_deliveries_pending_order;
CREATE INDEX webhook_deliveries_pending_order ON webhook_deliveries (next_attempt_at, id)
    WHERE state = 'pending' AND held = 0;
-- The held deliveries of one endpoint, in queue order: which one an ordered
-- endpoint lets go next, and the rows to release when an endpoint is enabled.
-- Only held rows are in it, so deliveries that are never held cost it
-- nothing.
CREATE INDEX webhook_deliveries_held ON webhook_deliveries (endpoint_id, created_at, id)
    WHERE held = 1;
