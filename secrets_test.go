package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite"
)

const rotatedSecret = "whsec_cm90YXRlZC1zZWNyZXQtUExBTlRFRC0wMTIz"

// TestSecretsRotateKey runs hymical secrets rotate-key in process on a
// SQLite database whose endpoints an older build wrote in plaintext: the
// first rotation encrypts them under a generated key, the second moves
// them to another, and what it prints says what it did and what to do
// next, with no key in it.
func TestSecretsRotateKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "hymical.db")
	db := "sqlite:" + dbPath
	store, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 {
		ep, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: "https://receiver.example/hook",
			Secrets: []storage.Secret{storage.NewSecret(rotatedSecret, nil)}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ep.ID)
	}
	store.Close()

	// rotate runs the command and fails the test if its output shows a
	// secret or a key.
	rotate := func(args ...string) (string, error) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := run(ctx, append([]string{"secrets", "rotate-key", "--database", db}, args...), &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if err != nil {
			out += err.Error()
		}
		secrets := []string{rotatedSecret}
		for _, f := range []string{"k1", "k2"} {
			if text, rerr := os.ReadFile(filepath.Join(dir, f)); rerr == nil {
				secrets = append(secrets, strings.TrimSpace(string(text)))
			}
		}
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Fatalf("rotate-key %v shows a secret or a key:\n%s", args, out)
			}
		}
		return stdout.String(), err
	}
	keyOf := func(name string) database.SecretsKey {
		t.Helper()
		k, err := database.ReadKeyFile(filepath.Join(dir, name), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k1, k2 := filepath.Join(dir, "k1"), filepath.Join(dir, "k2")

	out, err := rotate("--new-key-file", k1, "--generate")
	if err != nil {
		t.Fatal(err)
	}
	first := keyOf("k1").Box.KeyID()
	for _, want := range []string{"wrote a new key, id " + first + ", to " + k1, "encrypted the signing secrets of 2 endpoints", "in plaintext until now",
		"under the key with id " + first, "one transaction", "FORMS_SECRETS_KEY_FILE=" + k1, "mv " + k1 + " " + dbPath + ".key"} {
		if !strings.Contains(out, want) {
			t.Errorf("first rotation does not say %q:\n%s", want, out)
		}
	}
	if fi, err := os.Stat(k1); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the generated key file: %v, %v; want mode 0600", fi.Mode(), err)
	}

	out, err = rotate("--key-file", k1, "--new-key-file", k2, "--generate")
	if err != nil {
		t.Fatal(err)
	}
	second := keyOf("k2").Box.KeyID()
	for _, want := range []string{"re-encrypted the signing secrets of 2 endpoints", "from the key with id " + first + " to the key with id " + second,
		"the old key (id " + first + ") no longer opens anything"} {
		if !strings.Contains(out, want) {
			t.Errorf("second rotation does not say %q:\n%s", want, out)
		}
	}

	// The rows open with the new key only.
	for name, want := range map[string]bool{"k1": false, "k2": true} {
		s, err := sqlite.Open(ctx, dbPath, keyOf(name).Options()...)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			ep, err := s.EndpointGet(ctx, id)
			switch {
			case want && (err != nil || ep.Secrets[0].Reveal() != rotatedSecret):
				t.Errorf("%s with %s: %v, want the secret", id, name, err)
			case !want && !errors.Is(err, storage.ErrSecretsKey):
				t.Errorf("%s with the old key %s: %v, want ErrSecretsKey", id, name, err)
			}
		}
		s.Close()
	}

	t.Run("refusals", func(t *testing.T) {
		k3 := filepath.Join(dir, "k3")
		for _, tc := range []struct {
			name string
			args []string
			want []string
		}{
			{"no new key", []string{"--key-file", k2}, []string{"needs --new-key-file"}},
			{"the old key again", []string{"--key-file", k1, "--new-key-file", k3, "--generate"}, []string{"encrypted under the key with id " + second, "the key given has id " + first}},
			{"no current key", []string{"--new-key-file", k1}, []string{"id " + second, "no key was given"}},
			{"a key file that exists", []string{"--key-file", k2, "--new-key-file", k1, "--generate"}, []string{k1, "never replaces"}},
		} {
			_, err := rotate(tc.args...)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %v, want an error saying %q", tc.name, err, w)
				}
			}
		}
		out, err := rotate("--key-file", k2, "--new-key-file", k2)
		if err != nil || !strings.Contains(out, "already encrypted under the key with id "+second+": nothing to do") {
			t.Errorf("rotate to the current key: %v\n%s", err, out)
		}
	})

	t.Run("a live server", func(t *testing.T) {
		s, err := sqlite.Open(ctx, dbPath)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		now := time.Now()
		if err := s.WorkerHeartbeat(ctx, storage.Worker{ID: "wrk_live", Build: "x", SchemaVersion: 9, Host: "box1", StartedAt: now, HeartbeatAt: now}); err != nil {
			t.Fatal(err)
		}
		_, err = rotate("--key-file", k2, "--new-key-file", k1)
		if err == nil || !strings.Contains(err.Error(), "wrk_live on box1") || !strings.Contains(err.Error(), "--force") {
			t.Fatalf("rotate beside a live server: %v, want a refusal naming it", err)
		}
		if id, err := s.SecretsKeyID(ctx); err != nil || id != second {
			t.Fatalf("the refused rotation changed the key to %q (%v)", id, err)
		}
	})
}
