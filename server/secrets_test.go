package server_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hymical/hymical/server"
	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/secretbox"
	"github.com/hymical/hymical/storage/sqlite"
)

// planted is an endpoint secret that must never be found in a log line or
// an error.
const planted = "whsec_UExBTlRFRC1zZWNyZXQtb2Ytc2VydmVyLXRlc3Q="

// secretsKey is a fresh key and its box.
func secretsKey(t *testing.T) (secretbox.Key, *secretbox.Box) {
	t.Helper()
	k, err := secretbox.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.New(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, box
}

// syncBuffer is a log destination the server's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startAndStop runs New, and Run at once stopped, with cfg: a start-up and
// a clean exit. It returns New's error and what was logged.
func startAndStop(t *testing.T, cfg config.Config) (string, error) {
	t.Helper()
	if _, err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logged syncBuffer
	srv, err := server.New(t.Context(), cfg, slog.New(slog.NewTextHandler(&logged, nil)))
	if err == nil {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if rerr := srv.Run(ctx); rerr != nil {
			t.Fatalf("Run: %v", rerr)
		}
	}
	out := logged.String()
	if strings.Contains(out, planted) || err != nil && strings.Contains(err.Error(), planted) {
		t.Fatalf("a secret was shown:\n%s\n%v", out, err)
	}
	return out, err
}

// seed writes an endpoint with the planted secret through a store opened
// with opts, as an older build (or a process without a key) wrote it.
func seed(t *testing.T, s storage.Store) string {
	t.Helper()
	ep, err := s.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: "https://receiver.example/hook",
		Secrets: []storage.Secret{storage.NewSecret(planted, nil)}}})
	if err != nil {
		t.Fatal(err)
	}
	return ep.ID
}

func wantSecret(t *testing.T, s storage.Store, id string) {
	t.Helper()
	ep, err := s.EndpointGet(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(ep.Secrets) != 1 || ep.Secrets[0].Reveal() != planted {
		t.Fatalf("endpoint %s reads back %v, want the planted secret", id, ep.Secrets)
	}
}

// TestSQLiteEncryptsWithAKeyFileBesideTheDatabase: with no key configured,
// the first start writes DATABASE.key (0600) and encrypts the plaintext
// rows an older build left; later starts use that file; a start whose key
// file is gone, or with another key, fails saying which key it needs.
func TestSQLiteEncryptsWithAKeyFileBesideTheDatabase(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "hymical.db")
	keyPath := dbPath + ".key"
	old, err := sqlite.Open(t.Context(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	id := seed(t, old)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig("sqlite:" + dbPath)
	logged, err := startAndStop(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(keyPath)
	if err != nil {
		t.Fatalf("no key file beside the database: %v\n%s", err, logged)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the key file has mode %04o, want 0600", fi.Mode().Perm())
	}
	key, err := database.ReadKeyFile(keyPath, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"generated a key", keyPath, "back it up", "encrypted the endpoint signing secrets", "endpoints=1", "key_id=" + key.Box.KeyID()} {
		if !strings.Contains(logged, want) {
			t.Errorf("the log does not say %q:\n%s", want, logged)
		}
	}
	if text, _ := os.ReadFile(keyPath); strings.Contains(logged, strings.TrimSpace(string(text))) {
		t.Errorf("the key was logged:\n%s", logged)
	}

	// The database alone no longer gives the secret away; with its key it does.
	plain, err := sqlite.Open(t.Context(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.EndpointGet(t.Context(), id); !errors.Is(err, storage.ErrSecretsKey) {
		t.Fatalf("read without the key: %v, want ErrSecretsKey", err)
	}
	keyed, err := sqlite.Open(t.Context(), dbPath, key.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer keyed.Close()
	wantSecret(t, keyed, id)

	// A second start reads the same file.
	logged, err = startAndStop(t, cfg)
	if err != nil || !strings.Contains(logged, "encrypted at rest") || strings.Contains(logged, "generated") {
		t.Fatalf("second start: %v\n%s", err, logged)
	}

	t.Run("with another key", func(t *testing.T) {
		other, otherBox := secretsKey(t)
		cfg := cfg
		cfg.Secrets.Key = config.Secret(other.Text())
		_, err := startAndStop(t, cfg)
		for _, want := range []string{key.Box.KeyID(), otherBox.KeyID(), "secrets.key", "configure the key with id " + key.Box.KeyID()} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("start with another key: %v, want it to say %q", err, want)
			}
		}
		if err != nil && strings.Contains(err.Error(), other.Text()) {
			t.Errorf("the error shows the key: %v", err)
		}
	})
	t.Run("without its key file", func(t *testing.T) {
		if err := os.Rename(keyPath, keyPath+".bak"); err != nil {
			t.Fatal(err)
		}
		defer os.Rename(keyPath+".bak", keyPath)
		_, err := startAndStop(t, cfg)
		if !errors.Is(err, storage.ErrSecretsKey) {
			t.Fatalf("start without the key file: %v, want ErrSecretsKey", err)
		}
		for _, want := range []string{key.Box.KeyID(), keyPath, "missing", "restore"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if _, err := os.Stat(keyPath); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a new key file was written in place of the missing one: %v", err)
		}
	})
}

// TestPostgresSecretsAtRest: without a key the secrets stay in plaintext
// and every start warns; the first start with a key encrypts them; from
// then on a start without it, or with another, fails.
func TestPostgresSecretsAtRest(t *testing.T) {
	t.Parallel()
	dsn, direct := migratedPostgres(t)
	id := seed(t, direct)
	cfg := testConfig(dsn)

	logged, err := startAndStop(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"level=WARN", "stored in plaintext", "FORMS_SECRETS_KEY"} {
		if !strings.Contains(logged, want) {
			t.Errorf("a start without a key does not say %q:\n%s", want, logged)
		}
	}
	wantSecret(t, direct, id)

	key, box := secretsKey(t)
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	if err := database.WriteKeyFile(keyFile, key); err != nil {
		t.Fatal(err)
	}
	cfg.Secrets.KeyFile = keyFile
	logged, err = startAndStop(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged, "encrypted the endpoint signing secrets") || !strings.Contains(logged, "key_id="+box.KeyID()) {
		t.Errorf("the start with a key does not say it encrypted:\n%s", logged)
	}
	if _, err := direct.EndpointGet(t.Context(), id); !errors.Is(err, storage.ErrSecretsKey) {
		t.Fatalf("read without the key after encryption: %v, want ErrSecretsKey", err)
	}
	keyed, err := postgres.Open(t.Context(), dsn, storage.WithSecretBox(box))
	if err != nil {
		t.Fatal(err)
	}
	defer keyed.Close()
	wantSecret(t, keyed, id)

	cfg.Secrets.KeyFile = ""
	_, err = startAndStop(t, cfg)
	if !errors.Is(err, storage.ErrSecretsKey) || !strings.Contains(err.Error(), box.KeyID()) || !strings.Contains(err.Error(), "FORMS_SECRETS_KEY") {
		t.Fatalf("start without the key once encrypted: %v, want ErrSecretsKey naming key %s and what to set", err, box.KeyID())
	}
}
