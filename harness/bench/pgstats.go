package bench

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Statement is one normalised SQL statement the server ran during a phase,
// as pg_stat_statements counted it.
type Statement struct {
	Query   string  `json:"query"`
	Calls   int64   `json:"calls"`
	Rows    int64   `json:"rows"`
	TotalMS float64 `json:"total_ms"`
	// PerMessage is Calls divided by the phase's deliveries: round trips
	// per delivery for this statement.
	PerMessage float64 `json:"calls_per_message"`
}

// pgStats reads pg_stat_statements for one bench database. It is optional:
// the server must load the module (shared_preload_libraries), and without
// it the report simply has no statement table.
type pgStats struct {
	conn *pgx.Conn
}

// openPGStats returns nil when pg_stat_statements is not available.
func openPGStats(ctx context.Context, dsn string) *pgStats {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil
	}
	p := &pgStats{conn: conn}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		p.close(ctx)
		return nil
	}
	if err := p.reset(ctx); err != nil {
		p.close(ctx)
		return nil
	}
	return p
}

// reset forgets what this database ran so far.
func (p *pgStats) reset(ctx context.Context) error {
	_, err := p.conn.Exec(ctx, `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`)
	return err
}

// top returns the n statements of this database with the most execution
// time, leaving out the bench's own look-ups.
func (p *pgStats) top(ctx context.Context, n int, messages int) ([]Statement, error) {
	rows, err := p.conn.Query(ctx, `
		SELECT query, calls, rows, total_exec_time
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND query NOT LIKE '%pg_stat_statements%'
		ORDER BY total_exec_time DESC
		LIMIT $1`, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Statement, error) {
		var s Statement
		err := r.Scan(&s.Query, &s.Calls, &s.Rows, &s.TotalMS)
		s.Query = strings.Join(strings.Fields(s.Query), " ")
		s.PerMessage = float64(s.Calls) / float64(messages)
		return s, err
	})
}

func (p *pgStats) close(ctx context.Context) { _ = p.conn.Close(ctx) }
