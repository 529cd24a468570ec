package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/hymical/hymical/internal/groupcommit"
	"github.com/hymical/hymical/storage"
)

// Store is a storage.Store on one PostgreSQL database. It is safe for
// concurrent use; it holds a connection pool and, once asked for
// wake-ups, one more connection that listens for them (see wakeups.go).
type Store struct {
	pool *pgxpool.Pool
	// events batches this process's concurrent EventCreates into shared
	// transactions.
	events groupcommit.Queue[storage.Event, storage.EventCreateResult]
	// secrets seals endpoint secrets on every write and opens them on
	// every read, when it has a box.
	secrets storage.SecretsCodec
	// wake signals this process's claimers and, through NOTIFY, the others.
	wake *wakeups
}

var _ storage.Store = (*Store)(nil)

// Open connects to the database named by dsn (a postgres:// URL or a
// keyword/value string, as libpq takes) and checks that it answers. It does
// not migrate: call Migrate for that.
func Open(ctx context.Context, dsn string, opts ...storage.OpenOption) (*Store, error) {
	open := storage.NewOpenConfig(opts)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, dsnError(dsn, err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		// pgx returns timestamptz in time.Local; the Store promises UTC
		// whatever the host's zone, so decode into UTC at the source.
		c.TypeMap().RegisterType(&pgtype.Type{
			Name:  "timestamptz",
			OID:   pgtype.TimestamptzOID,
			Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC},
		})
		return commitDurably(ctx, c)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w (check the DSN, that the server is running and that it accepts this user)", err)
	}
	s := &Store{pool: pool, secrets: storage.SecretsCodec{Box: open.SecretBox}, wake: newWakeups()}
	s.events.Max, s.events.Write, s.events.Wrap = maxEventBatch, s.createEvents, createEventError
	return s, nil
}

// commitDurably raises synchronous_commit from off to on for this
// connection. With it off, a commit returns before its WAL reaches disk, so
// a PostgreSQL crash a moment later loses a submission already answered 202:
// at least once needs every acknowledged write durable, whatever the
// cluster, database or role default says. Only off is raised: local,
// remote_write and remote_apply are as durable on this server or more, and
// an operator who chose to wait for a standby keeps that.
func commitDurably(ctx context.Context, c *pgx.Conn) error {
	if _, err := c.Exec(ctx, `SELECT set_config('synchronous_commit', 'on', false) WHERE current_setting('synchronous_commit') = 'off'`); err != nil {
		return fmt.Errorf("postgres: set synchronous_commit for this connection: %w", err)
	}
	return nil
}

// Settings reads the named server settings as this store's connections see
// them (the session's values, after any database, role or connection
// default), keyed by name. A name PostgreSQL does not know is left out.
func (s *Store) Settings(ctx context.Context, names ...string) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, setting FROM pg_settings WHERE name = ANY($1)`, names)
	if err != nil {
		return nil, fmt.Errorf("postgres: read settings: %w", err)
	}
	out := make(map[string]string, len(names))
	var name, value string
	if _, err := pgx.ForEachRow(rows, []any{&name, &value}, func() error {
		out[name] = value
		return nil
	}); err != nil {
		return nil, fmt.Errorf("postgres: read settings: %w", err)
	}
	return out, nil
}

// Close closes every connection of the pool, waiting for those in use to be
// returned.
func (s *Store) Close() error {
	s.closeWakeups()
	s.pool.Close()
	return nil
}

// mapErr is the one place PostgreSQL errors become storage sentinels. The
// native error stays in the chain, after the sentinel, for errors.As.
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres: %s: %w", op, storage.ErrNotFound)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			return fmt.Errorf("postgres: %s: %w: %w", op, storage.ErrConflict, err)
		case "23514": // check_violation
			return fmt.Errorf("postgres: %s: %w: %w", op, storage.ErrInvalid, err)
		case "42P01": // undefined_table
			return fmt.Errorf("postgres: %s: %w (is the database migrated? run `hymical migrate`)", op, err)
		case "53100": // disk_full
			return fmt.Errorf("postgres: %s: %w: the database server's disk is full; free space on its volume or grow the volume: %w", op, storage.ErrNoSpace, err)
		}
		if strings.HasPrefix(pgErr.Code, "53") { // insufficient_resources: memory, connections, a configured limit
			return fmt.Errorf("postgres: %s: %w: %w", op, storage.ErrResources, err)
		}
	}
	if unreachable(err) {
		return fmt.Errorf("postgres: %s: %w: %w", op, storage.ErrUnavailable, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// unreachable reports whether err says the server could not be used at
// all just now, rather than that it refused this operation: the caller
// may send the same request again once it is back. The server's own
// errors count only when they are about the connection (class 08) or the
// server going away (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
// cannot_connect_now, as while it starts or recovers); a refusal such as a
// wrong password, which arrives as a connect error too, is not passing.
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03":
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08")
	}
	// The caller's own deadline or cancellation is not the server's
	// absence: it is answered as what it is.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		var connect *pgconn.ConnectError
		return errors.As(err, &connect)
	}
	var connect *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connect), errors.As(err, &netErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, puddle.ErrClosedPool):
		return true
	}
	// What pgconn calls safe to retry failed before anything reached the
	// server: a connection already closed, a write that did not go out.
	return pgconn.SafeToRetry(err)
}

// dbNow turns a params Now into a query argument: NULL when zero, so the SQL
// falls back to the database clock with coalesce($n::timestamptz, now()).
func dbNow(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// nullStatus stores HTTP status 0 ("no status") as NULL.
func nullStatus(code int) any {
	if code == 0 {
		return nil
	}
	return code
}

// dsnError describes why a DSN did not parse without echoing its password.
// pgconn masks passwords in its message, but only on a best-effort basis for
// malformed input, so every password-shaped value of the DSN is masked again.
func dsnError(dsn string, err error) error {
	text := err.Error()
	secrets := passwordCandidates(dsn)
	// Longest first, so a candidate that contains another is masked whole.
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, secret := range secrets {
		text = strings.ReplaceAll(text, secret, "xxxxx")
	}
	// Not wrapped: the cause's own text may hold the password.
	return fmt.Errorf("postgres: invalid DSN: %s", text)
}

var kvPassword = regexp.MustCompile(`(?i)password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]+)`)

// passwordCandidates finds every value in dsn that may be a password: the
// URL userinfo password and any password= value, quoted or not.
func passwordCandidates(dsn string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 {
			out = append(out, s)
			if u, err := url.QueryUnescape(s); err == nil && u != s {
				out = append(out, u)
			}
		}
	}
	for _, prefix := range []string{"postgres://", "postgresql://"} {
		if rest, ok := strings.CutPrefix(dsn, prefix); ok {
			if at := strings.LastIndex(rest, "@"); at >= 0 {
				if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
					add(pw)
				}
			}
		}
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		v := m[1]
		add(v)
		add(strings.Trim(v, "'"))
	}
	return out
}
