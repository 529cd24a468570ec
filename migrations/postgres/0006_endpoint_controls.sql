-- Per-endpoint controls: limits, ordering, a retry schedule, and why and
-- since when an endpoint is disabled or failing.
ALTER TABLE webhook_endpoints
    ADD COLUMN rate_limit      double precision NOT NULL DEFAULT 0 CHECK (rate_limit >= 0),
    ADD COLUMN rate_burst      integer NOT NULL DEFAULT 0 CHECK (rate_burst >= 0),
    ADD COLUMN max_in_flight   integer NOT NULL DEFAULT 0 CHECK (max_in_flight >= 0),
    ADD COLUMN ordered         boolean NOT NULL DEFAULT false,
    ADD COLUMN retry_schedule  jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN disabled_reason text NOT NULL DEFAULT '',
    ADD COLUMN failing_since   timestamptz,
    -- The delivery an ordered endpoint last let go; it has the turn while it
    -- is pending and not held.
    ADD COLUMN turn_delivery_id text COLLATE "C";

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
-- The held deliveries of one endpoint, in queue order: which one an ordered
-- endpoint lets go next, and the rows to release when an endpoint is enabled.
-- Only held rows are in it, so deliveries that are never held cost it
-- nothing.
CREATE INDEX webhook_deliveries_held ON webhook_deliveries (endpoint_id, created_at, id)
    WHERE held;

-- Lets the next delivery of each ordered, enabled endpoint among
-- endpoint_ids go, when nothing of it is under way or due: its oldest held
-- delivery, in queue order, which then has the turn. It locks each endpoint
-- (in id order) before it looks, each look a statement of its own, so it
-- sees what every earlier holder of the lock committed. A function, so that
-- the completion batch, which calls it every time, pays for planning these
-- statements once per session rather than once per batch; an endpoint that
-- is not ordered costs one index lookup.
CREATE FUNCTION hymical_promote(endpoint_ids text[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    ep record;
    head text;
BEGIN
    FOR ep IN
        SELECT e.id, e.disabled_at, e.turn_delivery_id FROM webhook_endpoints AS e
        WHERE e.id = ANY (endpoint_ids) AND e.ordered
        ORDER BY e.id
        FOR NO KEY UPDATE
    LOOP
        CONTINUE WHEN ep.disabled_at IS NOT NULL;
        -- A send under way, or the delivery that has the turn still due:
        -- nothing else may go yet.
        CONTINUE WHEN EXISTS (SELECT 1 FROM webhook_deliveries AS d
                              WHERE d.state = 'processing' AND d.endpoint_id = ep.id);
        CONTINUE WHEN ep.turn_delivery_id IS NOT NULL AND EXISTS (
            SELECT 1 FROM webhook_deliveries AS d
            WHERE d.id = ep.turn_delivery_id AND d.state = 'pending' AND NOT d.held);
        SELECT d.id INTO head FROM webhook_deliveries AS d
        WHERE d.endpoint_id = ep.id AND d.held AND d.state = 'pending'
        ORDER BY d.created_at, d.id LIMIT 1;
        IF head IS NOT NULL THEN
            UPDATE webhook_deliveries SET held = false WHERE id = head;
        END IF;
        UPDATE webhook_endpoints SET turn_delivery_id = head WHERE id = ep.id;
    END LOOP;
END
$$;
