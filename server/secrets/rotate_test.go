package secrets_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/server/fleet"
	"github.com/hymical/hymical/server/secrets"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// planted is an endpoint signing secret that must never be shown.
const planted = "whsec_cm90YXRlZC1zZWNyZXQtUExBTlRFRC0wMTIz"

// databases make a fresh, empty database of each kind and return its URL.
var databases = map[string]func(t *testing.T) string{
	"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "hymical.db") },
	"postgres": func(t *testing.T) string { return pgtest.NewDatabase(t) },
}

// TestRotateKey rotates the secrets of endpoints an older build wrote in
// plaintext on a real database of each kind: the first rotation encrypts
// them under a generated key, the second moves them to another, and what
// it prints says what it did and what to do next, with no key in it.
// Refusals change nothing; a live server is refused unless forced.
func TestRotateKey(t *testing.T) {
	t.Parallel()
	for name, newDatabase := range databases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dir := t.TempDir()
			db := newDatabase(t)
			var ids []string
			withStore(t, db, database.SecretsKey{}, func(s storage.Store) {
				if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
					t.Fatal(err)
				}
				for range 2 {
					ep, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: "https://receiver.example/hook",
						Secrets: []storage.Secret{storage.NewSecret(planted, nil)}}})
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, ep.ID)
				}
			})
			k1, k2, k3, k4 := filepath.Join(dir, "k1"), filepath.Join(dir, "k2"), filepath.Join(dir, "k3"), filepath.Join(dir, "k4")

			// rotate runs RotateKey and fails the test if its output, its
			// log or its error shows a secret or a key.
			rotate := func(p secrets.RotateParams) (string, error) {
				t.Helper()
				var out, log bytes.Buffer
				p.DatabaseURL, p.Log = db, slog.New(slog.NewTextHandler(&log, nil))
				err := secrets.RotateKey(ctx, p, &out)
				shown := out.String() + log.String()
				if err != nil {
					shown += err.Error()
				}
				hidden := []string{planted}
				for _, f := range []string{k1, k2, k3, k4} {
					if text, rerr := os.ReadFile(f); rerr == nil {
						hidden = append(hidden, strings.TrimSpace(string(text)))
					}
				}
				for _, h := range hidden {
					if strings.Contains(shown, h) {
						t.Fatalf("RotateKey(%+v) shows a secret or a key:\n%s", p, shown)
					}
				}
				return out.String(), err
			}
			from := func(file string) database.SecretsConfig { return database.SecretsConfig{KeyFile: file} }

			out, err := rotate(secrets.RotateParams{NewKeyFile: k1, Generate: true})
			if err != nil {
				t.Fatal(err)
			}
			first := keyOf(t, k1).Box.KeyID()
			wants := []string{"wrote a new key, id " + first + ", to " + k1, "encrypted the signing secrets of 2 endpoints", "in plaintext until now",
				"under the key with id " + first, "one transaction", "FORMS_SECRETS_KEY_FILE=" + k1}
			// Only SQLite has a place the server looks for a key by default.
			if def, ok := database.DefaultKeyFile(db); ok {
				wants = append(wants, "mv "+k1+" "+def)
			} else if strings.Contains(out, "mv ") {
				t.Errorf("first rotation on %s suggests a default key file:\n%s", name, out)
			}
			for _, want := range wants {
				if !strings.Contains(out, want) {
					t.Errorf("first rotation does not say %q:\n%s", want, out)
				}
			}
			if fi, err := os.Stat(k1); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("the generated key file: %v, %v; want mode 0600", fi, err)
			}

			out, err = rotate(secrets.RotateParams{Current: from(k1), NewKeyFile: k2, Generate: true})
			if err != nil {
				t.Fatal(err)
			}
			second := keyOf(t, k2).Box.KeyID()
			for _, want := range []string{"re-encrypted the signing secrets of 2 endpoints", "from the key with id " + first + " to the key with id " + second,
				"the old key (id " + first + ") no longer opens anything"} {
				if !strings.Contains(out, want) {
					t.Errorf("second rotation does not say %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "mv ") {
				t.Errorf("a rotation from a given key file suggests the default one:\n%s", out)
			}
			opensWith(t, db, ids, k2, k1)

			t.Run("refusals", func(t *testing.T) {
				for _, tc := range []struct {
					name string
					p    secrets.RotateParams
					want []string
				}{
					{"the old key again", secrets.RotateParams{Current: from(k1), NewKeyFile: k3, Generate: true},
						[]string{"encrypted under the key with id " + second, "the key given has id " + first}},
					{"no current key", secrets.RotateParams{NewKeyFile: k1}, []string{"id " + second, "no key was given"}},
					{"a key file that exists", secrets.RotateParams{Current: from(k2), NewKeyFile: k1, Generate: true}, []string{k1, "never replaces"}},
					{"a new key file that is missing", secrets.RotateParams{Current: from(k2), NewKeyFile: filepath.Join(dir, "missing")}, []string{"missing"}},
				} {
					_, err := rotate(tc.p)
					for _, w := range tc.want {
						if err == nil || !strings.Contains(err.Error(), w) {
							t.Errorf("%s: %v, want an error saying %q", tc.name, err, w)
						}
					}
				}
				out, err := rotate(secrets.RotateParams{Current: from(k2), NewKeyFile: k2})
				if err != nil || !strings.Contains(out, "already encrypted under the key with id "+second+": nothing to do") {
					t.Errorf("rotate to the current key: %v\n%s", err, out)
				}
				opensWith(t, db, ids, k2, k1)
			})

			t.Run("a live server", func(t *testing.T) {
				now := time.Now()
				withStore(t, db, keyOf(t, k2), func(s storage.Store) {
					if err := s.WorkerHeartbeat(ctx, storage.Worker{ID: "wrk_live", Build: "x", SchemaVersion: 9, Host: "box1", StartedAt: now, HeartbeatAt: now}); err != nil {
						t.Fatal(err)
					}
				})
				for _, p := range []secrets.RotateParams{{Current: from(k2), NewKeyFile: k1}, {Current: from(k2), NewKeyFile: k4, Generate: true}} {
					_, err := rotate(p)
					var live *fleet.LiveError
					if !errors.As(err, &live) || len(live.Workers) != 1 || live.Workers[0].ID != "wrk_live" ||
						!strings.Contains(err.Error(), "wrk_live on box1") || !strings.Contains(err.Error(), "--force") {
						t.Fatalf("rotate beside a live server: %v, want a refusal naming it and --force", err)
					}
				}
				if _, err := os.Stat(k4); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the refused rotation left the key file it was to generate: %v", err)
				}
				opensWith(t, db, ids, k2, k1)

				out, err := rotate(secrets.RotateParams{Current: from(k2), NewKeyFile: k1, Force: true})
				if err != nil || !strings.Contains(out, "from the key with id "+second+" to the key with id "+first) {
					t.Fatalf("forced rotation beside a live server: %v\n%s", err, out)
				}
				opensWith(t, db, ids, k1, k2)
			})
		})
	}
}

// withStore opens the database with key, runs f and closes it.
func withStore(t *testing.T, url string, key database.SecretsKey, f func(storage.Store)) {
	t.Helper()
	s, err := database.Open(t.Context(), url, key.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f(s)
}

// keyOf reads a key file.
func keyOf(t *testing.T, file string) database.SecretsKey {
	t.Helper()
	k, err := database.ReadKeyFile(file, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// opensWith fails unless the endpoints' secrets open with the key in good
// and are refused with the key in bad.
func opensWith(t *testing.T, url string, ids []string, good, bad string) {
	t.Helper()
	for file, want := range map[string]bool{good: true, bad: false} {
		withStore(t, url, keyOf(t, file), func(s storage.Store) {
			for _, id := range ids {
				ep, err := s.EndpointGet(t.Context(), id)
				switch {
				case want && (err != nil || ep.Secrets[0].Reveal() != planted):
					t.Errorf("%s with %s: %v, want the secret", id, filepath.Base(file), err)
				case !want && !errors.Is(err, storage.ErrSecretsKey):
					t.Errorf("%s with %s: %v, want ErrSecretsKey", id, filepath.Base(file), err)
				}
			}
		})
	}
}
