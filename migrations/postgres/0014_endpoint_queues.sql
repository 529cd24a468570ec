-- Queue heads: one row per endpoint that has had claimable deliveries,
-- holding a position (next_due_at, head_id) no later, in the claim's
-- (next_attempt_at, id) order, than its first claimable (pending, not
-- held) delivery. A claim with a share walks the due heads in that order
-- and probes each endpoint's first rows through
-- webhook_deliveries_endpoint_due, so it reads the endpoints it takes from
-- rather than every endpoint with work; it then moves each head it looked
-- at to the first row it left behind.
--
-- The triggers lower a head in the transaction of every write that makes
-- a delivery claimable, whichever statement makes it. A head is never
-- late, so no due delivery is missed; it may be early (a row claimed by
-- the share-less claim, deferred, or held since), which costs a claim one
-- probe that finds nothing and moves it on.
--
-- A head's row lock orders a claim and a create for the same endpoint: the
-- claim locks the heads it walks before it reads their rows (in a later
-- statement, so it sees every create that lowered them before), and a
-- create's lowering waits for the claim and then applies to what it left.
CREATE TABLE webhook_endpoint_queues (
    endpoint_id text COLLATE "C" PRIMARY KEY,
    next_due_at timestamptz,
    head_id     text COLLATE "C"
);
CREATE INDEX webhook_endpoint_queues_due ON webhook_endpoint_queues (next_due_at, head_id)
    WHERE next_due_at IS NOT NULL;
-- Heads change with every claim: leave room on each page for the new row
-- versions, and vacuum often, as for the deliveries.
ALTER TABLE webhook_endpoint_queues SET (fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

INSERT INTO webhook_endpoint_queues (endpoint_id, next_due_at, head_id)
    SELECT DISTINCT ON (endpoint_id) endpoint_id, next_attempt_at, id FROM webhook_deliveries
    WHERE state = 'pending' AND NOT held ORDER BY endpoint_id, next_attempt_at, id;

-- Inserts come in batches: one lowering per endpoint per statement, in
-- endpoint order, so that two batches lock shared heads in the same order.
CREATE FUNCTION hymical_queue_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_endpoint_queues AS q (endpoint_id, next_due_at, head_id)
        SELECT DISTINCT ON (endpoint_id) endpoint_id, next_attempt_at, id FROM inserted
        WHERE state = 'pending' AND NOT held
        ORDER BY endpoint_id, next_attempt_at, id
    ON CONFLICT (endpoint_id) DO UPDATE SET next_due_at = excluded.next_due_at, head_id = excluded.head_id
        WHERE q.next_due_at IS NULL OR (excluded.next_due_at, excluded.head_id) < (q.next_due_at, q.head_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_deliveries_queue_insert AFTER INSERT ON webhook_deliveries
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION hymical_queue_inserted();

-- Updates that make a row claimable, or bring it forward, are fewer (a
-- retry, a release, a replay, an enable): one lowering per row, and the
-- WHEN keeps every other update (a claim, a completion) from calling it.
CREATE FUNCTION hymical_queue_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_endpoint_queues AS q (endpoint_id, next_due_at, head_id)
        VALUES (NEW.endpoint_id, NEW.next_attempt_at, NEW.id)
    ON CONFLICT (endpoint_id) DO UPDATE SET next_due_at = excluded.next_due_at, head_id = excluded.head_id
        WHERE q.next_due_at IS NULL OR (excluded.next_due_at, excluded.head_id) < (q.next_due_at, q.head_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_deliveries_queue_update AFTER UPDATE ON webhook_deliveries
    FOR EACH ROW
    WHEN (NEW.state = 'pending' AND NOT NEW.held
        AND (OLD.state <> 'pending' OR OLD.held OR NEW.next_attempt_at < OLD.next_attempt_at
            OR NEW.endpoint_id <> OLD.endpoint_id))
    EXECUTE FUNCTION hymical_queue_updated();
