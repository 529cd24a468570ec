package migrations

import "testing"

func TestBothBackendsHaveTheSameHistory(t *testing.T) {
	pg, err := Postgres()
	if err != nil {
		t.Fatal(err)
	}
	lite, err := SQLite()
	if err != nil {
		t.Fatal(err)
	}
	if len(pg) != len(lite) {
		t.Fatalf("postgres has %d migrations, sqlite %d: both must replay the same history", len(pg), len(lite))
	}
	wantFirst := []string{"initial", "claim_token", "cycle_attempts"}
	for i, name := range wantFirst {
		if pg[i].Name != name || lite[i].Name != name {
			t.Errorf("migration %d: postgres %q, sqlite %q, want %q", i+1, pg[i].Name, lite[i].Name, name)
		}
	}
	for i := range pg {
		if pg[i].Version != i+1 || pg[i].Name != lite[i].Name {
			t.Errorf("migration %d differs: postgres %d_%s, sqlite %d_%s", i+1, pg[i].Version, pg[i].Name, lite[i].Version, lite[i].Name)
		}
		if pg[i].SQL == "" || lite[i].SQL == "" {
			t.Errorf("migration %d is empty", i+1)
		}
	}
}
