package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/hymical/hymical/internal/groupcommit"
	"github.com/hymical/hymical/internal/wakeup"
	"github.com/hymical/hymical/storage"
)

// DefaultBusyTimeout is how long a writer waits for another process's write
// lock on the file before giving up.
const DefaultBusyTimeout = 10 * time.Second

// Store is a storage.Store on one SQLite file.
type Store struct {
	path        string
	busyTimeout time.Duration
	// writer has exactly one connection; every write transaction runs on it.
	writer *sql.DB
	// reader is a read-only pool for pure reads.
	reader *sql.DB
	clock  func() time.Time
	// stmts are the hot path's statements, prepared once on the writer.
	stmts stmtCache
	// events batches concurrent EventCreates into shared transactions.
	events groupcommit.Queue[storage.Event, storage.EventCreateResult]
	// secrets seals endpoint secrets on every write and opens them on
	// every read, when it has a box.
	secrets storage.SecretsCodec
	// wake wakes this process's claimers once a write that made a
	// delivery due has committed. SQLite serves one process, so nothing
	// crosses a process boundary: the claimers of another process on the
	// same file find such deliveries by polling.
	wake wakeup.Hub
	log  *slog.Logger
	// vacuumConvertMax is the most live data Migrate converts to
	// incremental auto_vacuum by itself (see convertAutoVacuum).
	vacuumConvertMax int64
}

var _ storage.Store = (*Store)(nil)

// Open opens (creating if missing) the SQLite database file at path. The
// parent directory must exist. It does not migrate. An existing database,
// WAL or shared-memory file that other users may read or write is logged
// as a warning (see warnLoose).
func Open(ctx context.Context, path string, opts ...storage.OpenOption) (*Store, error) {
	return open(ctx, path, DefaultBusyTimeout, opts...)
}

func open(ctx context.Context, path string, busyTimeout time.Duration, opts ...storage.OpenOption) (*Store, error) {
	cfg := storage.NewOpenConfig(opts)
	if err := checkPath(path); err != nil {
		return nil, err
	}
	if err := createPrivate(path); err != nil {
		return nil, err
	}
	s := &Store{path: path, busyTimeout: busyTimeout, clock: time.Now, secrets: storage.SecretsCodec{Box: cfg.SecretBox},
		log: cfg.Log, vacuumConvertMax: vacuumConvertMax}
	s.stmts.m = map[string]*sql.Stmt{}
	s.events.Max, s.events.Write, s.events.Wrap = maxEventBatch, s.createEvents, createEventError

	var err error
	s.writer, err = sql.Open("sqlite", dsn(path, busyTimeout, true))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open writer on %s: %w", path, err)
	}
	// One connection, kept open: in-process writers queue for it instead of
	// contending for SQLite's lock.
	s.writer.SetMaxOpenConns(1)
	s.writer.SetMaxIdleConns(1)
	s.writer.SetConnMaxLifetime(0)
	s.writer.SetConnMaxIdleTime(0)

	// The writer connects first so the file exists and is in WAL mode before
	// any read-only connection touches it.
	var mode string
	if err := s.writer.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		s.writer.Close()
		return nil, s.mapErr("open "+path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		s.writer.Close()
		return nil, fmt.Errorf("sqlite: open %s: journal mode is %q, not WAL: the file system may not support WAL (network file systems usually do not); put the database on a local disk", path, mode)
	}

	s.reader, err = sql.Open("sqlite", dsn(path, busyTimeout, false))
	if err != nil {
		s.writer.Close()
		return nil, fmt.Errorf("sqlite: open reader on %s: %w", path, err)
	}
	s.reader.SetMaxOpenConns(max(4, runtime.GOMAXPROCS(0)))
	s.reader.SetMaxIdleConns(max(4, runtime.GOMAXPROCS(0)))
	if err := s.reader.PingContext(ctx); err != nil {
		s.Close()
		return nil, s.mapErr("open "+path, err)
	}
	// After both pools connected, so the -wal and -shm files exist.
	warnLoose(cfg.Log, path)
	return s, nil
}

// warnLoose logs a warning for each of the database's files that users
// other than its owner may read or write: files made by an older version,
// or copied, keep their mode, and they hold every submission, and the
// endpoints' signing secrets (sealed, when a secrets key is on, but a
// reader still learns everything else). It warns rather than tightening
// the mode itself: a group may have been given the file on purpose (a
// backup job), and a chmod the operator did not ask for would break it
// without a word.
func warnLoose(log *slog.Logger, path string) {
	if runtime.GOOS == "windows" {
		return // no Unix modes to speak of
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			continue // -wal and -shm come and go
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			log.Warn(fmt.Sprintf("sqlite: %s has mode %04o, so other users of this machine may read or change it; it holds every submission and the endpoints' signing secrets: run chmod 600 %s (hymical leaves the mode as it is)", f, perm, f),
				"file", f, "mode", fmt.Sprintf("%04o", perm), "fix", "chmod 600 "+f)
		}
	}
}

func checkPath(path string) error {
	switch {
	case strings.TrimSpace(path) == "":
		return errors.New("sqlite: database path is empty: give the path of a database file, e.g. /var/lib/hymical/hymical.db")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return fmt.Errorf("sqlite: database path %q is not a plain file path: the store needs a real file, because its readers and its writer are separate connections", path)
	case strings.Contains(path, "?"):
		return fmt.Errorf("sqlite: database path %q contains '?', which the driver reads as the start of connection parameters: choose a path without it", path)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("sqlite: directory %s for database %s: %w: create the directory first", dir, path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("sqlite: %s, the parent of database %s, is not a directory", dir, path)
	}
	return nil
}

// createPrivate creates the database file, when it does not exist yet,
// readable and writable by its owner only: it holds every endpoint's
// signing secrets. SQLite gives the -wal and -shm files it makes beside it
// the database file's permissions, so they are private too. An existing
// file is left as it is.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		return nil
	case err != nil:
		return fmt.Errorf("sqlite: create database %s: %w", path, err)
	}
	return f.Close()
}

// dsn spells the connection settings in modernc.org/sqlite's DSN: each
// _pragma runs on every new connection, busy_timeout first.
func dsn(path string, busyTimeout time.Duration, writer bool) string {
	q := fmt.Sprintf("?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)",
		busyTimeout.Milliseconds())
	if writer {
		// auto_vacuum takes effect only on a file that has no table yet,
		// so only a new database is made with it; on an older one it is
		// the mode a later VACUUM converts to (see convertAutoVacuum).
		// Incremental, not full: pages freed by a prune are given back in
		// bounded passes (see DeliveryPrune), not at every commit.
		q += "&_pragma=auto_vacuum(INCREMENTAL)"
		// The writer's savepoints (one per create in a shared transaction)
		// journal the pages they change; on disk that was a write system
		// call a page, about a twentieth of serve's CPU flat out. In memory
		// it is bounded by what one transaction changes.
		return path + q + "&_pragma=temp_store(MEMORY)&_txlock=immediate"
	}
	// Reads must never write; query_only turns a mistake into an error.
	return path + q + "&_pragma=query_only(1)"
}

// Close closes both connection pools.
func (s *Store) Close() error {
	s.wake.Close()
	var errs []error
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	errs = append(errs, s.stmts.close())
	errs = append(errs, s.writer.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlite: close %s: %w", s.path, err)
	}
	return nil
}

// mapErr is the one place SQLite's native errors become storage sentinels.
// Errors that already carry a sentinel are only given the operation name.
func (s *Store) mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlite: %s: %w", op, storage.ErrNotFound)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("sqlite: %s: %w: %w", op, storage.ErrConflict, err)
		case sqlite3.SQLITE_CONSTRAINT_CHECK:
			return fmt.Errorf("sqlite: %s: %w: %w", op, storage.ErrInvalid, err)
		}
		if se.Code()&0xff == sqlite3.SQLITE_FULL {
			// The file could not grow: its disk is full, or (in tests) the
			// connection's max_page_count is reached. SQLite rolled back the
			// statement, or the whole transaction, so nothing was kept.
			return fmt.Errorf("sqlite: %s: %w: the database %s cannot grow; free space on its volume or grow the volume: %w",
				op, storage.ErrNoSpace, s.path, err)
		}
		if se.Code() == sqlite3.SQLITE_BUSY_SNAPSHOT {
			// Not a wait that ran out: a read snapshot went stale before
			// its transaction could write, which BEGIN IMMEDIATE prevents.
			return fmt.Errorf("sqlite: %s: another connection wrote to %s between this transaction's read and its write; retry the operation: %w",
				op, s.path, err)
		}
		if se.Code()&0xff == sqlite3.SQLITE_BUSY {
			// A lock another process holds is a resource this one lacks for
			// now, as a full connection table is on PostgreSQL: nothing was
			// kept, and the same operation succeeds once the lock is let go.
			return fmt.Errorf("sqlite: %s: %w: the database %s stayed locked for longer than the busy timeout (%s): another process is holding a write transaction on it; check for other hymical processes or tools such as the sqlite3 shell with the file open: %w",
				op, storage.ErrResources, s.path, s.busyTimeout, err)
		}
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// write runs fn in one BEGIN IMMEDIATE transaction on the writer connection.
// fn must not call other Store methods that write: the writer has a single
// connection and fn already holds it.
func (s *Store) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return s.mapErr(op, err)
	}
	// A panic in fn must not leave the transaction open: it would hold the
	// only writer connection, and every write after it would wait for ever.
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return s.mapErr(op, err)
	}
	if err := tx.Commit(); err != nil {
		return s.mapErr(op, err)
	}
	return nil
}

// stmtCache holds statements prepared on the writer. SQLite compiles a
// statement on every prepare, which profiles showed costing more than
// running it; a statement prepared once is reused by every transaction on
// the writer's one connection (database/sql re-prepares it by itself if the
// connection is ever replaced).
type stmtCache struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// prepare returns the writer's statements for queries, preparing the ones
// it has not seen. Call it before the write transaction, never inside one:
// preparing takes the writer's only connection.
func (s *Store) prepare(ctx context.Context, queries ...string) ([]*sql.Stmt, error) {
	c := &s.stmts
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*sql.Stmt, len(queries))
	for i, q := range queries {
		st, ok := c.m[q]
		if !ok {
			var err error
			if st, err = s.writer.PrepareContext(ctx, q); err != nil {
				return nil, err
			}
			c.m[q] = st
		}
		out[i] = st
	}
	return out, nil
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for q, st := range c.m {
		errs = append(errs, st.Close())
		delete(c.m, q)
	}
	return errors.Join(errs...)
}

// read runs fn in one read transaction on the reader pool, so several
// queries see one snapshot.
func (s *Store) read(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return s.mapErr(op, err)
	}
	// Read-only: rolling back loses nothing.
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return s.mapErr(op, err)
	}
	return nil
}

// now is t, or the Go clock when t is zero, in UTC at microsecond precision.
func (s *Store) now(t time.Time) time.Time {
	if t.IsZero() {
		t = s.clock()
	}
	return t.UTC().Truncate(time.Microsecond)
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullMicros(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func fromNullMicros(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

func nullString(s string) sql.NullString {
	return sql.NullString{String: s, Valid: s != ""}
}

func nullStatus(status int) sql.NullInt64 {
	return sql.NullInt64{Int64: int64(status), Valid: status != 0}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rowScanner is what *sql.Row and *sql.Rows share.
type rowScanner interface {
	Scan(dest ...any) error
}

// querier is what *sql.DB and *sql.Tx share, so reads can run inside a
// writer transaction or on the reader pool.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}
