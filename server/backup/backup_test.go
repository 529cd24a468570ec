package backup

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/storage"
)

// newDatabase makes a migrated SQLite database in a new directory with
// one endpoint; encrypted, its secrets are under a new key file beside it,
// as serve's first start leaves them. It returns the database URL.
func newDatabase(t *testing.T, encrypted bool) string {
	t.Helper()
	ctx := t.Context()
	url := "sqlite:" + filepath.Join(t.TempDir(), "hymical.db")
	key, err := database.LoadSecretsKey(url, database.SecretsConfig{}, encrypted, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s, err := database.Open(ctx, url, key.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	if err := database.PrepareSecrets(ctx, s, key, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{
		Transport: "http", URL: "http://127.0.0.1:1/hook",
		Secrets: []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)},
	}}); err != nil {
		t.Fatal(err)
	}
	return url
}

func TestRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		encrypted bool
		// params adjusts the params of a backup of url into a new file.
		params func(t *testing.T, p *Params)
		// wantErr and wantOut are texts the error or the output must hold.
		wantErr, wantOut []string
	}{
		{
			name:    "a plaintext database is copied, with a warning that the copy holds usable secrets",
			wantOut: []string{"schema version", "mode 0600", "in plaintext", "to restore"},
		},
		{
			name:      "an encrypted database is copied, and the key beside it is named as not in the copy",
			encrypted: true,
			wantOut:   []string{"encrypted under the key with id", "hymical.db.key", "keep the key apart from the copy"},
		},
		{
			name:      "a missing key is a warning that the copy is of no use without it",
			encrypted: true,
			params: func(t *testing.T, p *Params) {
				path, _ := database.DefaultKeyFile(p.DatabaseURL)
				if err := os.Rename(path, path+".moved"); err != nil {
					t.Fatal(err)
				}
			},
			wantOut: []string{"warning:", "no key is configured", "of no use without that key"},
		},
		{
			name: "an existing file is never replaced",
			params: func(t *testing.T, p *Params) {
				if err := os.WriteFile(p.To, []byte("an older backup"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: []string{"exists", "never replaces"},
		},
		{
			name:    "the database itself is refused as the target",
			params:  func(t *testing.T, p *Params) { p.To, _ = database.SQLitePath(p.DatabaseURL) },
			wantErr: []string{"is the database itself"},
		},
		{
			name: "a database that is not there is not created and backed up empty",
			params: func(t *testing.T, p *Params) {
				p.DatabaseURL = "sqlite:" + filepath.Join(t.TempDir(), "typo.db")
			},
			wantErr: []string{"typo.db", "check database.url"},
		},
		{
			name:    "no --to is refused",
			params:  func(t *testing.T, p *Params) { p.To = "" },
			wantErr: []string{"--to FILE"},
		},
		{
			name:    "PostgreSQL is refused, with what to use instead",
			params:  func(t *testing.T, p *Params) { p.DatabaseURL = "postgres://hymical:hunter2@db.example/hymical" },
			wantErr: []string{"pg_dump", "pg_restore", "secrets key", "docs/backup.md"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p := Params{DatabaseURL: newDatabase(t, tc.encrypted), To: filepath.Join(t.TempDir(), "backup.db")}
			if tc.params != nil {
				tc.params(t, &p)
			}
			before, _ := os.ReadFile(p.To)
			var out bytes.Buffer
			err := Run(ctx, p, &out)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Run succeeded, want an error saying %q; output:\n%s", tc.wantErr, out.String())
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("error %q shows the database password", err)
				}
				if after, _ := os.ReadFile(p.To); p.To != "" && !bytes.Equal(before, after) {
					t.Errorf("a refused backup changed %s", p.To)
				}
				if path, ok := database.SQLitePath(p.DatabaseURL); ok && strings.HasSuffix(path, "typo.db") {
					if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("a backup of a missing database made %s: %v", path, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output does not say %q:\n%s", w, out.String())
				}
			}
			fi, err := os.Stat(p.To)
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o600 {
				t.Errorf("the copy has mode %04o, want 0600", perm)
			}
			// The copy opens, with the original's key, as a database of its
			// own with the endpoint and its secret.
			var moved database.SecretsConfig
			if path, _ := database.DefaultKeyFile(p.DatabaseURL); fileExists(path + ".moved") {
				moved.KeyFile = path + ".moved"
			}
			key, err := database.LoadSecretsKey(p.DatabaseURL, moved, false, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			s, err := database.Open(ctx, "sqlite:"+p.To, key.Options()...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := database.CheckSchema(ctx, s); err != nil {
				t.Errorf("the copy: %v", err)
			}
			eps, err := s.EndpointList(ctx)
			if err != nil || len(eps) != 1 {
				t.Fatalf("the copy's endpoints: %d, %v; want 1", len(eps), err)
			}
			if got := eps[0].Secrets[0].Reveal(); got != "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=" {
				t.Errorf("the copy's endpoint secret did not open to the one stored")
			}
		})
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
