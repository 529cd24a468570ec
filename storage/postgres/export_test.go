package postgres

// ClaimSQL lets the plan test EXPLAIN the exact statement DeliveryClaim runs.
const ClaimSQL = claimSQL
