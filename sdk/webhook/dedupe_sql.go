package webhook

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Dialect is the SQL a SQLDeduper speaks. database/sql does not rewrite
// placeholders, so the deduper must be told which database it talks to.
type Dialect int

const (
	// DialectSQLite is SQLite, for example through modernc.org/sqlite
	// (driver name "sqlite"): "?" placeholders, times as unix milliseconds.
	DialectSQLite Dialect = iota + 1
	// DialectPostgres is PostgreSQL, for example through
	// github.com/jackc/pgx/v5/stdlib (driver name "pgx"): "$n"
	// placeholders, times as timestamptz.
	DialectPostgres
)

func (d Dialect) String() string {
	switch d {
	case DialectSQLite:
		return "sqlite"
	case DialectPostgres:
		return "postgres"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// DefaultDedupeTable is the table a SQLDeduper uses when SQLOptions.Table is
// empty.
const DefaultDedupeTable = "webhook_processed_ids"

// tableName is what SQLOptions.Table may be: a plain, unquoted identifier,
// optionally schema-qualified. It is spliced into SQL, so nothing else is
// allowed.
var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// SQLOptions configure a SQLDeduper.
type SQLOptions struct {
	// Dialect is required.
	Dialect Dialect
	// Table holds the processed ids; empty means DefaultDedupeTable. It may
	// be schema-qualified ("receiver.processed_ids").
	Table string
	// TxOptions are used for every transaction; nil means the driver's
	// default isolation, which is what the deduper is designed for.
	TxOptions *sql.TxOptions
	// Now replaces the clock that stamps processed_at, for tests. nil means
	// time.Now.
	Now func() time.Time
}

// SQLDeduper is a Deduper on a database/sql database, SQLite or PostgreSQL.
// It keeps one row per processed id in its table, whose primary key is what
// detects a duplicate.
//
// Every call is one transaction: insert the id, run the work, commit. A
// duplicate is found by the insert itself (INSERT ... ON CONFLICT DO
// NOTHING inserting no row), never by reading first, so two deliveries of
// one id racing each other cannot both pass; on PostgreSQL the second insert
// waits for the first transaction and inserts nothing if it committed. When
// the work fails, the transaction is rolled back and the id is not recorded.
//
// Use ProcessTx and do the work through its *sql.Tx when the work writes to
// the same database: then recording the id and the work's effects commit
// together or not at all, and a submission has its effect exactly once.
// Work done elsewhere (an e-mail, another service) runs before the commit,
// so if the commit fails after the work succeeded the id is not recorded and
// a redelivery does the work again.
//
// On SQLite the transaction holds the database's single write lock while
// the work runs, so the deduper runs its own transactions one at a time and
// the work should be quick. Open the database with a busy timeout so that
// other connections and processes wait for the lock instead of failing; with
// modernc.org/sqlite that is "file.db?_pragma=busy_timeout(10000)&_txlock=immediate".
// Inside the work, write only through the transaction: a write through the
// *sql.DB would wait for the lock the transaction holds.
type SQLDeduper struct {
	db      *sql.DB
	dialect Dialect
	table   string
	txOpts  *sql.TxOptions
	now     func() time.Time
	// serial is a one-slot semaphore on SQLite, where there is one writer
	// per database anyway: queueing here, where the context is honoured,
	// beats contending for the file lock. nil on PostgreSQL.
	serial chan struct{}

	insert, create, prune string
}

var _ Deduper = (*SQLDeduper)(nil)

// NewSQLDeduper returns a deduper on db. It does not touch the database;
// call CreateTable once at start-up unless the table is made elsewhere (by
// your own migrations, with the columns CreateTable shows).
func NewSQLDeduper(db *sql.DB, opts SQLOptions) (*SQLDeduper, error) {
	if db == nil {
		return nil, errors.New("webhook: SQL deduper: db is nil")
	}
	table := opts.Table
	if table == "" {
		table = DefaultDedupeTable
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("webhook: SQL deduper: table %q is not a plain identifier: use letters, digits and '_', optionally as schema.table", clip(table))
	}
	d := &SQLDeduper{db: db, dialect: opts.Dialect, table: table, txOpts: opts.TxOptions, now: opts.Now}
	if d.now == nil {
		d.now = time.Now
	}
	switch opts.Dialect {
	case DialectSQLite:
		d.serial = make(chan struct{}, 1)
		d.create = `CREATE TABLE IF NOT EXISTS ` + table + ` (
	id TEXT NOT NULL PRIMARY KEY,
	processed_at INTEGER NOT NULL -- unix milliseconds
) WITHOUT ROWID`
		d.insert = `INSERT INTO ` + table + ` (id, processed_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`
		d.prune = `DELETE FROM ` + table + ` WHERE processed_at < ?`
	case DialectPostgres:
		d.create = `CREATE TABLE IF NOT EXISTS ` + table + ` (
	id TEXT NOT NULL PRIMARY KEY,
	processed_at TIMESTAMPTZ NOT NULL
)`
		d.insert = `INSERT INTO ` + table + ` (id, processed_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`
		d.prune = `DELETE FROM ` + table + ` WHERE processed_at < $1`
	default:
		return nil, fmt.Errorf("webhook: SQL deduper: dialect %s is not supported: use DialectSQLite or DialectPostgres", opts.Dialect)
	}
	return d, nil
}

// Table is the table the deduper records ids in.
func (d *SQLDeduper) Table() string { return d.table }

// CreateTable creates the deduper's table if it does not exist. Call it once
// at start-up, not from every process at the same instant: PostgreSQL's
// CREATE TABLE IF NOT EXISTS is not safe against itself running
// concurrently.
func (d *SQLDeduper) CreateTable(ctx context.Context) error {
	if _, err := d.db.ExecContext(ctx, d.create); err != nil {
		return fmt.Errorf("webhook: creating dedupe table %s (%s): %w", d.table, d.dialect, err)
	}
	return nil
}

// Process implements Deduper: fn runs inside the transaction that records
// id, which commits only when fn returns nil. fn's own effects are not part
// of that transaction; see ProcessTx for work in the same database.
func (d *SQLDeduper) Process(ctx context.Context, id string, fn func(ctx context.Context) error) (bool, error) {
	return d.ProcessTx(ctx, id, func(ctx context.Context, _ *sql.Tx) error { return fn(ctx) })
}

// ProcessTx runs fn unless id is already recorded, in one transaction: it
// begins, inserts id, calls fn with the transaction, and commits when fn
// returns nil. When fn returns an error, or panics, or ctx ends, the
// transaction is rolled back: id stays unrecorded and whatever fn wrote
// through tx is undone. duplicate is true, and fn is not called, when id
// was recorded before.
//
// fn must not commit or roll back tx itself.
func (d *SQLDeduper) ProcessTx(ctx context.Context, id string, fn func(ctx context.Context, tx *sql.Tx) error) (duplicate bool, err error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	if d.serial != nil {
		select {
		case d.serial <- struct{}{}:
			defer func() { <-d.serial }()
		case <-ctx.Done():
			return false, fmt.Errorf("webhook: waiting for the SQLite write lock to record %s: %w", id, ctx.Err())
		}
	}
	tx, err := d.db.BeginTx(ctx, d.txOpts)
	if err != nil {
		return false, fmt.Errorf("webhook: beginning the dedupe transaction for %s: %w", id, err)
	}
	// A no-op after Commit; otherwise it undoes the id and fn's writes,
	// also when fn panics.
	defer func() { _ = tx.Rollback() }()

	res, err := tx.ExecContext(ctx, d.insert, id, d.timeArg(d.now()))
	if err != nil {
		return false, fmt.Errorf("webhook: recording %s in %s: %w", id, d.table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("webhook: recording %s in %s: %w", id, d.table, err)
	}
	if n == 0 {
		return true, nil
	}
	if err := fn(ctx, tx); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("webhook: committing %s: %w; it was not recorded and a redelivery will process it again", id, err)
	}
	return false, nil
}

// Prune deletes the ids recorded before before and returns how many it
// deleted. A submission whose id was pruned is processed again if it is
// delivered again, and an operator can replay a delivery at any time, so
// keep ids for as long as a repeat would do harm.
func (d *SQLDeduper) Prune(ctx context.Context, before time.Time) (int64, error) {
	res, err := d.db.ExecContext(ctx, d.prune, d.timeArg(before))
	if err != nil {
		return 0, fmt.Errorf("webhook: pruning %s: %w", d.table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("webhook: pruning %s: %w", d.table, err)
	}
	return n, nil
}

func (d *SQLDeduper) timeArg(t time.Time) any {
	if d.dialect == DialectSQLite {
		return t.UnixMilli()
	}
	return t.UTC()
}
