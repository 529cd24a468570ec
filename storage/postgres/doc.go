// Package postgres is the PostgreSQL implementation of storage.Store, the
// backend for production: any number of hymical processes on any number of
// hosts share one database and nothing else coordinates them.
//
// It owns the SQL that enforces the delivery state machine against the
// schema in migrations/postgres, applying those migrations, and the mapping
// of PostgreSQL errors onto the storage sentinels. It must not hold delivery
// state in memory between calls, decide retry schedules (the caller passes
// RetryDelay), or know anything about transports, signing or HTTP.
//
// How it keeps many processes honest:
//
//   - Claims select due rows with FOR UPDATE SKIP LOCKED inside the same
//     statement that marks them processing, so concurrent claimers never
//     wait on each other and never take the same row. Rows that are not
//     claimable are never written.
//   - Every transition that ends a claim is an UPDATE fenced on the claim
//     token; the attempt row is inserted in the same transaction with the
//     number the UPDATE returned, so the row lock the UPDATE holds is what
//     keeps attempt numbers unique between an owner and a late worker.
//   - When a params Now is zero, times are taken from the database clock
//     (now()), never from the host's, so hosts whose clocks are skewed still
//     agree on when a lease ends. A non-zero Now is used as given, which is
//     how tests inject time.
//   - Each Store method is one transaction.
//   - Native errors are mapped to storage sentinels in one function, mapErr.
//   - Every connection commits with synchronous_commit at least on (an off
//     default is raised when it connects), so what the store acknowledged
//     survives a PostgreSQL crash.
//
// Times are returned in UTC. Migrations are applied by Migrate, one
// transaction per migration, serialised between concurrent migrators with a
// transaction-scoped advisory lock; Open never migrates.
package postgres
