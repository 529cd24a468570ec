-- Per-endpoint controls: limits, ordering, a retry schedule, and why and
-- since when an endpoint is disabled or failing.
ALTER TABLE webhook_endpoints
    ADD COLUMN rate_limit      double precision NOT NULL DEFAULT 0 CHECK (rate_limit >= 0),
    ADD COLUMN rate_burst      integer NOT NULL DEFAULT 0 CHECK (rate_burst >= 0),
    ADD COLUMN max_in_flight   integer NOT NULL DEFAULT 0 CHECK (max_in_flight >= 0),
    ADD COLUMN ordered         boolean NOT NULL DEFAULT false,
    ADD COLUMN retry_schedule  jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN disabled_reason text NOT NULL DEFAULT '',
    ADD COLUMN failing_since   timestamptz;

-- An event may name the one endpoint it goes to (operator notifications).
ALTER TABLE webhook_events ADD COLUMN endpoint_id text COLLATE "C" NOT NULL DEFAULT '';

-- The limiter's shared state, one row per limited endpoint, locked by the
-- claim that admits sends to it, so every process sharing the database sees
-- one budget. tat is the GCRA theoretical arrival time; deferred_until is the
-- last slot handed to a deferred delivery, so deferred ones come back spread
-- out instead of all at once.
CREATE TABLE webhook_endpoint_throttles (
    endpoint_id    text COLLATE "C" PRIMARY KEY REFERENCES webhook_endpoints (id),
    tat            timestamptz NOT NULL,
    deferred_until timestamptz NOT NULL
);

-- A held delivery is pending but not claimable: its endpoint is disabled, or
-- it waits behind an earlier delivery of an ordered endpoint. Held rows are
-- left out of the claim's index, so a large held backlog costs claims nothing.
ALTER TABLE webhook_deliveries ADD COLUMN held boolean NOT NULL DEFAULT false;
DROP INDEX webhook_deliveries_pending_order;
CREATE INDEX webhook_deliveries_pending_order ON webhook_deliveries (next_attempt_at, id)
    WHERE state = 'pending' AND NOT held;
-- The open deliveries of one endpoint, unheld apart from held, each in queue
-- order: whether an ordered endpoint has one under way or due, which one is
-- next, and the rows to hold or release when an endpoint is disabled or
-- enabled. Only pending rows are ever held.
CREATE INDEX webhook_deliveries_open ON webhook_deliveries (endpoint_id, held, created_at, id)
    WHERE state IN ('pending', 'processing');
-- The sends under way to one endpoint, counted against its in-flight cap
-- without reading its pending backlog.
CREATE INDEX webhook_deliveries_in_flight ON webhook_deliveries (endpoint_id)
    WHERE state = 'processing';
