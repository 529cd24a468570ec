package postgres

import (
	"context"
	"fmt"

	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/storage"
)

const consoleSessionColumns = `hash, csrf, operator, expires_at, created_at`

func scanConsoleSession(row pgx.Row) (storage.ConsoleSession, error) {
	var (
		s    storage.ConsoleSession
		hash []byte
	)
	if err := row.Scan(&hash, &s.CSRF, &s.Operator, &s.ExpiresAt, &s.CreatedAt); err != nil {
		return storage.ConsoleSession{}, err
	}
	if len(hash) != len(s.Hash) {
		return storage.ConsoleSession{}, fmt.Errorf("console session: stored hash is %d bytes, want %d", len(hash), len(s.Hash))
	}
	copy(s.Hash[:], hash)
	s.ExpiresAt = s.ExpiresAt.UTC()
	s.CreatedAt = s.CreatedAt.UTC()
	return s, nil
}

// ConsoleSessionCreate stores a console session and, in the same
// transaction, removes the expired ones and the live ones past p.Max
// closest to expiry (never the new one). Concurrent creates on several
// servers may each keep Max for a moment; the next create trims again.
func (s *Store) ConsoleSessionCreate(ctx context.Context, p storage.ConsoleSessionCreateParams) (storage.ConsoleSession, error) {
	if err := p.Session.Validate(); err != nil {
		return storage.ConsoleSession{}, err
	}
	if p.Max < 1 {
		return storage.ConsoleSession{}, fmt.Errorf("postgres: console session create: %w: Max is %d, want at least 1", storage.ErrInvalid, p.Max)
	}
	cs := p.Session
	if cs.CreatedAt.IsZero() {
		cs.CreatedAt = p.Now
	}
	var out storage.ConsoleSession
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = scanConsoleSession(tx.QueryRow(ctx, `
			INSERT INTO hymical_console_sessions (hash, csrf, operator, expires_at, created_at)
			VALUES ($1, $2, $3, $4, coalesce($5::timestamptz, now()))
			RETURNING `+consoleSessionColumns,
			cs.Hash[:], cs.CSRF, cs.Operator, cs.ExpiresAt, dbNow(cs.CreatedAt)))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			DELETE FROM hymical_console_sessions
			WHERE expires_at <= coalesce($2::timestamptz, now())
			   OR hash IN (SELECT hash FROM hymical_console_sessions
				WHERE hash <> $1 AND expires_at > coalesce($2::timestamptz, now())
				ORDER BY expires_at DESC, hash OFFSET $3)`,
			cs.Hash[:], dbNow(p.Now), p.Max-1)
		return err
	})
	return out, mapErr("console session create", err)
}

// ConsoleSessionGet reads a console session that has not expired.
func (s *Store) ConsoleSessionGet(ctx context.Context, hash [32]byte, now time.Time) (storage.ConsoleSession, error) {
	cs, err := scanConsoleSession(s.pool.QueryRow(ctx, `SELECT `+consoleSessionColumns+` FROM hymical_console_sessions
		WHERE hash = $1 AND expires_at > coalesce($2::timestamptz, now())`, hash[:], dbNow(now)))
	return cs, mapErr("console session get", err)
}

// ConsoleSessionEnd removes a console session.
func (s *Store) ConsoleSessionEnd(ctx context.Context, hash [32]byte) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM hymical_console_sessions WHERE hash = $1`, hash[:])
	return mapErr("console session end", err)
}
