package database

import (
	"context"
	"strings"
	"testing"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite/sqlitetest"
)

func TestOpenRefusesUnknownURLs(t *testing.T) {
	for _, url := range []string{"", "mysql://x", "hymical.db"} {
		if _, err := Open(context.Background(), url); err == nil || !strings.Contains(err.Error(), "sqlite:PATH") {
			t.Errorf("Open(%q) = %v, want an error naming the accepted forms", url, err)
		}
	}
}

func TestCheckSchema(t *testing.T) {
	ctx := context.Background()
	s := sqlitetest.Open(t)
	if _, err := CheckSchema(ctx, s); err == nil || !strings.Contains(err.Error(), "hymical migrate") {
		t.Fatalf("unmigrated database: %v, want a hint to migrate", err)
	}
	if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckSchema(ctx, s); err != nil {
		t.Fatalf("migrated database: %v", err)
	}
}
