// Package sqlitetest gives tests a real SQLite store on a file of their
// own, closed when the test ends: the embedded backend needs no server, so
// unlike pgtest it never skips.
package sqlitetest

import (
	"path/filepath"
	"testing"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite"
)

// Open opens a store on a fresh file, unmigrated.
func Open(t testing.TB) storage.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hymical.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// New opens a store on a fresh file, migrated to the newest schema.
func New(t testing.TB) storage.Store {
	t.Helper()
	s := Open(t)
	if _, err := s.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	return s
}
