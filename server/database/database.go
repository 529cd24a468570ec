// Package database opens the store a database URL names and checks that
// its schema is the one this build knows. It is the one place that links
// both database drivers: the HTTP faces see the store through interfaces
// and never import it.
package database

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/sqlite"
)

// Open opens the store a database URL names: "sqlite:PATH" for the
// embedded single-node store, or a "postgres://" / "postgresql://" URL.
// opts go to the backend's Open (a SecretsKey's Options, a logger).
func Open(ctx context.Context, url string, opts ...storage.OpenOption) (storage.Store, error) {
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		path, _ := SQLitePath(url)
		s, err := sqlite.Open(ctx, path, opts...)
		if err != nil {
			return nil, fmt.Errorf("open SQLite database %q: %w", path, err)
		}
		return s, nil
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		s, err := postgres.Open(ctx, url, opts...)
		if err != nil {
			return nil, fmt.Errorf("open PostgreSQL database: %w", err)
		}
		return s, nil
	case url == "":
		return nil, errors.New("database URL is empty: use sqlite:PATH or postgres://USER@HOST/DB")
	default:
		scheme, _, _ := strings.Cut(url, ":")
		return nil, fmt.Errorf("database URL scheme %q is not supported: use sqlite:PATH or postgres://USER@HOST/DB", scheme)
	}
}

// CheckSchema refuses to run against a schema this build does not know, or
// one that still needs migrating.
func CheckSchema(ctx context.Context, s storage.Fleet) (int, error) {
	latest, err := migrations.Latest()
	if err != nil {
		return 0, err
	}
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	switch {
	case v > latest:
		return v, fmt.Errorf("%w: the database is at schema version %d and this build knows up to %d; run the newer hymical build that migrated it", storage.ErrSchemaUnknown, v, latest)
	case v < latest:
		return v, fmt.Errorf("the database is at schema version %d and this build needs %d: run `hymical migrate` first", v, latest)
	}
	return v, nil
}
