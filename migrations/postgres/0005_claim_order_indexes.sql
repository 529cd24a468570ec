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
-- Deliveries churn: every one is inserted, claimed and completed within
-- seconds, leaving dead row versions in every index. Vacuum and analyze run
-- after 2 % of the table changed instead of the default 20 %, so the claim's
-- index walk does not step over a long tail of dead entries and the planner
-- learns the table's size while it is still growing.
ALTER TABLE webhook_deliveries SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
