-- Fair share: a claim takes at most a room's worth of each endpoint's due
-- deliveries. When the oldest due rows all belong to endpoints that have no
-- room (one that hangs, with a backlog), the claim looks endpoint by
-- endpoint instead, each look one probe of this index for that endpoint's
-- oldest due rows, so the others are found however long the backlog ahead
-- of them. Only claimable pending rows are in it.
CREATE INDEX webhook_deliveries_endpoint_due ON webhook_deliveries (endpoint_id, next_attempt_at, id)
    WHERE state = 'pending' AND NOT held;
