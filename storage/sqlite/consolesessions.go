package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hymical/hymical/storage"
)

const consoleSessionColumns = `hash, csrf, operator, expires_at, created_at`

func scanConsoleSession(row rowScanner) (storage.ConsoleSession, error) {
	var (
		s                storage.ConsoleSession
		hash             []byte
		expires, created int64
	)
	if err := row.Scan(&hash, &s.CSRF, &s.Operator, &expires, &created); err != nil {
		return storage.ConsoleSession{}, err
	}
	if len(hash) != len(s.Hash) {
		return storage.ConsoleSession{}, fmt.Errorf("console session: stored hash is %d bytes, want %d", len(hash), len(s.Hash))
	}
	copy(s.Hash[:], hash)
	s.ExpiresAt = fromMicros(expires)
	s.CreatedAt = fromMicros(created)
	return s, nil
}

// ConsoleSessionCreate stores a console session and, in the same write
// transaction, removes the expired ones and the live ones past p.Max
// closest to expiry (never the new one).
func (s *Store) ConsoleSessionCreate(ctx context.Context, p storage.ConsoleSessionCreateParams) (storage.ConsoleSession, error) {
	if err := p.Session.Validate(); err != nil {
		return storage.ConsoleSession{}, err
	}
	if p.Max < 1 {
		return storage.ConsoleSession{}, fmt.Errorf("sqlite: console session create: %w: Max is %d, want at least 1", storage.ErrInvalid, p.Max)
	}
	now := s.now(p.Now)
	cs := p.Session
	if cs.CreatedAt.IsZero() {
		cs.CreatedAt = now
	}
	var out storage.ConsoleSession
	err := s.write(ctx, "console session create", func(tx *sql.Tx) error {
		var err error
		out, err = scanConsoleSession(tx.QueryRowContext(ctx, `
			INSERT INTO hymical_console_sessions (hash, csrf, operator, expires_at, created_at)
			VALUES (?, ?, ?, ?, ?)
			RETURNING `+consoleSessionColumns,
			cs.Hash[:], cs.CSRF, cs.Operator, micros(cs.ExpiresAt), micros(cs.CreatedAt)))
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `
			DELETE FROM hymical_console_sessions
			WHERE expires_at <= ?1
			   OR hash IN (SELECT hash FROM hymical_console_sessions
				WHERE hash <> ?2 AND expires_at > ?1
				ORDER BY expires_at DESC, hash LIMIT -1 OFFSET ?3)`,
			micros(now), cs.Hash[:], p.Max-1)
		return err
	})
	return out, err
}

// ConsoleSessionGet reads a console session that has not expired.
func (s *Store) ConsoleSessionGet(ctx context.Context, hash [32]byte, now time.Time) (storage.ConsoleSession, error) {
	cs, err := scanConsoleSession(s.reader.QueryRowContext(ctx, `SELECT `+consoleSessionColumns+` FROM hymical_console_sessions
		WHERE hash = ? AND expires_at > ?`, hash[:], micros(s.now(now))))
	return cs, s.mapErr("console session get", err)
}

// ConsoleSessionEnd removes a console session.
func (s *Store) ConsoleSessionEnd(ctx context.Context, hash [32]byte) error {
	return s.write(ctx, "console session end", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM hymical_console_sessions WHERE hash = ?`, hash[:])
		return err
	})
}
