// Package sqlite implements storage.Store on one SQLite file, through
// modernc.org/sqlite (pure Go, no cgo). It is the single-node backend: one
// hymical process on one host. Beyond that, use storage/postgres.
//
// It owns the SQL that enforces the delivery state machine on SQLite and the
// mapping of SQLite's errors onto the storage sentinels. It must not hold
// rules of its own: what is claimable, how a completion is fenced and what a
// late attempt may change are defined by package storage and checked by
// storage/storagetest, and this package only writes them down in SQL.
//
// How it stays correct:
//
//   - Every write goes through one writer connection (a *sql.DB with exactly
//     one open connection) whose transactions start with BEGIN IMMEDIATE, so
//     claims, completions, late attempts and replays are serialised by SQLite
//     itself: a claim is `UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING`
//     inside that one transaction, and no two claims can pick the same row.
//   - The file is in WAL mode, and pure reads go through a separate,
//     read-only pool, so readers never block the writer and the writer never
//     blocks readers.
//   - Several Stores on one file (several processes, or a CLI run next to a
//     server) still work: SQLite's file lock serialises their writers, and
//     busy_timeout makes a writer wait for the lock instead of failing. A
//     writer that waits longer than that gets an error saying the database
//     stayed locked.
//   - Times are INTEGER microseconds since the Unix epoch, UTC, and come back
//     as UTC time.Time values with microsecond precision. When a params
//     struct's Now is zero the Go clock is used; EventCreate takes its "now"
//     from the event's CreatedAt, which defaults to the Go clock.
//
// Because readers and the writer are separate connections, the store needs a
// real file: ":memory:" is refused. Open does not migrate; call Migrate.
package sqlite
