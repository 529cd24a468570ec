package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// With its PostgreSQL stopped, every page and action of the console that
// reads or writes the store answers 503 with Retry-After and says the
// database cannot be reached, never a 500.
func TestADatabaseAwayIsA503OnEveryPage(t *testing.T) {
	t.Parallel()
	cluster := pgtest.StartCluster(t)
	store, err := postgres.Open(t.Context(), cluster.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if _, err := store.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	f := newFixtureOn(t, store, nil)
	e := f.endpoint("contact", "away")
	s := f.login("ada")
	cluster.Stop("fast")

	dlv := "/console/deliveries/dlv_00000000000000000000000000000000"
	ep := "/console/endpoints/" + e.ID
	for _, r := range []struct {
		method, path string
		form         url.Values
	}{
		{"GET", "/console/", nil},
		{"GET", "/console/deliveries", nil},
		{"GET", dlv, nil},
		{"GET", "/console/endpoints", nil},
		{"GET", ep + "/delete", nil},
		{"POST", "/console/deliveries/replay", url.Values{"state": {"failed"}}},
		{"POST", dlv + "/replay", url.Values{}},
		{"POST", ep + "/disable", url.Values{}},
		{"POST", ep + "/enable", url.Values{}},
		{"POST", ep + "/rotate-secret", url.Values{}},
		{"POST", ep + "/delete", url.Values{}},
	} {
		var p page
		if r.method == "GET" {
			p = f.get(s, r.path)
		} else {
			p = f.post(s, r.path, r.form)
		}
		if p.status != http.StatusServiceUnavailable || p.header.Get("Retry-After") == "" {
			t.Errorf("%s %s with the database stopped: %d, Retry-After %q; want 503 with Retry-After",
				r.method, r.path, p.status, p.header.Get("Retry-After"))
			continue
		}
		p.contains(t, "The database cannot be reached")
	}
}
