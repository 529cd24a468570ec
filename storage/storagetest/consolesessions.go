package storagetest

import (
	"errors"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func (f *fixture) consoleSession(max int, expires time.Time) storage.ConsoleSession {
	f.t.Helper()
	out, err := f.store.ConsoleSessionCreate(f.ctx, storage.ConsoleSessionCreateParams{
		Session: storage.ConsoleSession{Hash: newHash(), CSRF: "csrf-" + storage.NewID("c"), Operator: "ada", ExpiresAt: expires},
		Max:     max, Now: f.now,
	})
	if err != nil {
		f.t.Fatalf("ConsoleSessionCreate: %v", err)
	}
	return out
}

// testConsoleSessions holds the rules of console logins: found by the hash
// of their id on every store of the database, gone when expired or ended,
// and bounded in number.
func testConsoleSessions(t *testing.T, b Backend) {
	t.Run("a session made through one store is found through another", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		made := f.consoleSession(10, f.at(time.Hour))
		other := f.db.Open(t)
		got, err := other.ConsoleSessionGet(f.ctx, made.Hash, f.now)
		if err != nil {
			t.Fatalf("the other store: %v", err)
		}
		if got.Hash != made.Hash || got.CSRF != made.CSRF || got.Operator != "ada" || !got.ExpiresAt.Equal(f.at(time.Hour)) || !got.CreatedAt.Equal(f.now) {
			t.Fatalf("read back %+v, want %+v", got, made)
		}
		if _, err := other.ConsoleSessionGet(f.ctx, newHash(), f.now); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("unknown hash: %v, want ErrNotFound", err)
		}
		// Ended through the other store, it is gone for the first.
		if err := other.ConsoleSessionEnd(f.ctx, made.Hash); err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.ConsoleSessionGet(f.ctx, made.Hash, f.now); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("after logout on the other store: %v, want ErrNotFound", err)
		}
		if err := f.store.ConsoleSessionEnd(f.ctx, made.Hash); err != nil {
			t.Fatalf("ending it twice: %v, want nil", err)
		}
	})

	t.Run("an expired session is not found", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		made := f.consoleSession(10, f.at(time.Minute))
		if _, err := f.store.ConsoleSessionGet(f.ctx, made.Hash, f.at(time.Minute-time.Millisecond)); err != nil {
			t.Fatalf("just before expiry: %v", err)
		}
		if _, err := f.store.ConsoleSessionGet(f.ctx, made.Hash, f.at(time.Minute)); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("at expiry: %v, want ErrNotFound", err)
		}
	})

	t.Run("past Max the sessions closest to expiry go, never the new one", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		const max = 3
		var made []storage.ConsoleSession
		for i := range 5 {
			made = append(made, f.consoleSession(max, f.at(time.Hour+time.Duration(i)*time.Minute)))
		}
		// An older login expiring last is kept over newer ones that expire sooner.
		late := f.consoleSession(max, f.at(-time.Minute+2*time.Hour))
		for i, s := range made {
			_, err := f.store.ConsoleSessionGet(f.ctx, s.Hash, f.now)
			if kept := i >= 3; kept != (err == nil) {
				t.Errorf("session %d (expiring %s): err %v, want kept=%v", i, s.ExpiresAt.Sub(f.now), err, kept)
			}
		}
		// One more with the earliest expiry of all still stays: it is the new one.
		early := f.consoleSession(max, f.at(time.Minute))
		for _, s := range []storage.ConsoleSession{early, late, made[4]} {
			if _, err := f.store.ConsoleSessionGet(f.ctx, s.Hash, f.now); err != nil {
				t.Errorf("session expiring in %s: %v, want kept", s.ExpiresAt.Sub(f.now), err)
			}
		}
		if n := f.consoleSessionCount(); n != max {
			t.Errorf("%d sessions stored, want %d", n, max)
		}
	})

	t.Run("expired sessions are removed when a session is made", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.consoleSession(10, f.at(-time.Second))
		f.consoleSession(10, f.at(time.Hour))
		if n := f.consoleSessionCount(); n != 1 {
			t.Errorf("%d sessions stored, want the live one only", n)
		}
	})

	t.Run("an invalid session or bound is refused, and a hash is stored once", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		good := storage.ConsoleSession{Hash: newHash(), CSRF: "c", ExpiresAt: f.at(time.Hour)}
		for name, p := range map[string]storage.ConsoleSessionCreateParams{
			"no hash":   {Session: storage.ConsoleSession{CSRF: "c", ExpiresAt: f.at(time.Hour)}, Max: 1},
			"no csrf":   {Session: storage.ConsoleSession{Hash: newHash(), ExpiresAt: f.at(time.Hour)}, Max: 1},
			"no expiry": {Session: storage.ConsoleSession{Hash: newHash(), CSRF: "c"}, Max: 1},
			"no room":   {Session: good, Max: 0},
		} {
			if _, err := f.store.ConsoleSessionCreate(f.ctx, p); !errors.Is(err, storage.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if _, err := f.store.ConsoleSessionCreate(f.ctx, storage.ConsoleSessionCreateParams{Session: good, Max: 10}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.ConsoleSessionCreate(f.ctx, storage.ConsoleSessionCreateParams{Session: good, Max: 10}); !errors.Is(err, storage.ErrConflict) {
			t.Errorf("the same hash again: %v, want ErrConflict", err)
		}
	})
}

func (f *fixture) consoleSessionCount() int64 {
	f.t.Helper()
	n, err := f.db.QueryInt(f.ctx, `SELECT count(*) FROM hymical_console_sessions`)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}
