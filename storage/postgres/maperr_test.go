package postgres

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

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
