-- A claim reads due rows oldest first, by (next_attempt_at, id). The old
-- partial indexes ordered by one column each, so the claim's OR of the two
-- sorted every claimable row: a backlog of a million made every claim read a
-- million. Each branch of the claim now walks one of these in order and
-- stops at its LIMIT, whatever the backlog. Expired leases are found among
-- processing rows, which are never more than the deliveries in flight.
CREATE INDEX webhook_deliveries_pending_order ON webhook_deliveries (next_attempt_at, id)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_processing_order ON webhook_deliveries (next_attempt_at, id)
    WHERE state = 'processing';
DROP INDEX webhook_deliveries_due;
DROP INDEX webhook_deliveries_lease;
