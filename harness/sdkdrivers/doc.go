// Package sdkdrivers holds tests of the SDK's database/sql deduper
// (sdk/webhook's SQLDeduper and NewTxHandler) against real PostgreSQL and
// real SQLite files. It lives in the server module because the SDK module
// carries no database driver: a receiver picks its own, and the SDK's tests
// must not pull pgx or SQLite into its go.mod. It has no code of its own.
//
// PostgreSQL comes from HYMICAL_TEST_POSTGRES_DSN through pgtest: without it
// the PostgreSQL cases skip, except under CI=true, where they fail.
package sdkdrivers
