package console_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
	"github.com/hymical/hymical/storage/sqlite"
)

// TestALoginHoldsOnEveryServerOfTheDatabase runs two consoles, each over a
// store of its own on one database, as two servers behind a load balancer
// are: a login made on one works on the other, and a logout on the other
// ends it on the first.
func TestALoginHoldsOnEveryServerOfTheDatabase(t *testing.T) {
	t.Parallel()
	backends := map[string]func(t *testing.T) (a, b storage.Store){
		"sqlite": func(t *testing.T) (storage.Store, storage.Store) {
			path := filepath.Join(t.TempDir(), "hymical.db")
			return openTwice(t, func(ctx context.Context) (storage.Store, error) { return sqlite.Open(ctx, path) })
		},
		"postgres": func(t *testing.T) (storage.Store, storage.Store) {
			dsn := pgtest.NewDatabase(t)
			return openTwice(t, func(ctx context.Context) (storage.Store, error) { return postgres.Open(ctx, dsn) })
		},
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storeA, storeB := open(t)
			a, b := newFixtureOn(t, storeA, nil), newFixtureOn(t, storeB, nil)
			s := a.login("ada")
			b.get(s, "/console/").must(t, http.StatusOK)
			b.post(s, "/console/logout", nil).must(t, http.StatusSeeOther)
			if p := a.get(s, "/console/").must(t, http.StatusSeeOther); p.header.Get("Location") == "/console/" {
				t.Fatal("the first server still serves a login ended on the second")
			}
		})
	}
}

// openTwice opens two stores on one database and migrates it through the
// first.
func openTwice(t *testing.T, open func(context.Context) (storage.Store, error)) (storage.Store, storage.Store) {
	t.Helper()
	var out [2]storage.Store
	for i := range out {
		s, err := open(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out[i] = s
	}
	if _, err := out[0].Migrate(t.Context(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	return out[0], out[1]
}
