package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/hymical/hymical/storage"
)

// A PostgreSQL server's disk cannot be filled from a test, so the
// classification of its resource errors is shown on the errors themselves,
// as pgx returns them.
func TestResourceErrorsMapToSentinels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code string
		want error // nil: neither sentinel
	}{
		{"53100", storage.ErrNoSpace},   // disk_full
		{"53000", storage.ErrResources}, // insufficient_resources
		{"53200", storage.ErrResources}, // out_of_memory
		{"53300", storage.ErrResources}, // too_many_connections
		{"53400", storage.ErrResources}, // configuration_limit_exceeded
		{"54000", nil},                  // program_limit_exceeded: not a resource
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			native := &pgconn.PgError{Code: tt.code, Message: "could not extend file"}
			err := mapErr("create event", fmt.Errorf("commit: %w", native))
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("mapErr(%s) = %v, want %v", tt.code, err, tt.want)
			}
			for _, other := range []error{storage.ErrNoSpace, storage.ErrResources} {
				if other != tt.want && errors.Is(err, other) {
					t.Errorf("mapErr(%s) = %v, must not be %v", tt.code, err, other)
				}
			}
			var pg *pgconn.PgError
			if !errors.As(err, &pg) || pg.Code != tt.code {
				t.Errorf("mapErr(%s) lost the native error: %v", tt.code, err)
			}
			if !strings.HasPrefix(err.Error(), "postgres: create event: ") {
				t.Errorf("mapErr(%s) = %q, does not name the operation", tt.code, err)
			}
		})
	}
	if err := mapErr("x", &pgconn.PgError{Code: "53100"}); !strings.Contains(err.Error(), "free space on its volume or grow the volume") {
		t.Errorf("disk_full error %q does not say what to do", err)
	}
}

// The errors pgx returns while the server is away, and those that look
// alike but are not the server's absence. The connect errors are real: a
// dial to a loopback port nobody listens on, and one that the caller's
// deadline cut short.
func TestUnreachableErrorsMapToErrUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	_, refused := pgconn.Connect(context.Background(), fmt.Sprintf("postgres://u@127.0.0.1:%d/db?sslmode=disable&connect_timeout=5", closedPort))
	if refused == nil {
		t.Fatal("connecting to a closed port succeeded")
	}
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, late := pgconn.Connect(expired, fmt.Sprintf("postgres://u@127.0.0.1:%d/db?sslmode=disable", closedPort))
	if late == nil {
		t.Fatal("connecting after the deadline succeeded")
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused, true},
		{"connect cut short by the deadline", late, true},
		{"reset by peer", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"end of stream", fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF), true},
		{"plain EOF", io.EOF, true},
		{"pool closed", puddle.ErrClosedPool, true},
		{"57P01 admin_shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"57P02 crash_shutdown", &pgconn.PgError{Code: "57P02"}, true},
		{"57P03 cannot_connect_now", &pgconn.PgError{Code: "57P03"}, true},
		{"08006 connection_failure", &pgconn.PgError{Code: "08006"}, true},
		{"08P01 protocol_violation", &pgconn.PgError{Code: "08P01"}, true},
		{"57014 query_canceled", &pgconn.PgError{Code: "57014"}, false},
		{"28P01 wrong password", &pgconn.PgError{Code: "28P01"}, false},
		{"53300 too many connections", &pgconn.PgError{Code: "53300"}, false},
		{"the caller's deadline", context.DeadlineExceeded, false},
		{"the caller's cancellation", context.Canceled, false},
		{"no rows", pgx.ErrNoRows, false},
		{"another error", errors.New("syntax error"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := mapErr("event create", fmt.Errorf("begin: %w", tt.err))
			if got := errors.Is(err, storage.ErrUnavailable); got != tt.want {
				t.Errorf("mapErr(%v) = %v: ErrUnavailable is %v, want %v", tt.err, err, got, tt.want)
			}
			if !errors.Is(err, tt.err) && !errors.Is(tt.err, pgx.ErrNoRows) {
				t.Errorf("mapErr(%v) = %v lost the native error", tt.err, err)
			}
		})
	}
}
