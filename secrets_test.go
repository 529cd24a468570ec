package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite"
)

// TestSecretsRotateKeyCommand holds the command to its flags: what it
// refuses before touching anything, and that each flag reaches the
// rotation (server/secrets tests the rotation itself on both databases).
func TestSecretsRotateKeyCommand(t *testing.T) {
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
	if _, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: "https://receiver.example/hook",
		Secrets: []storage.Secret{storage.NewSecret("whsec_cm90YXRlZC1zZWNyZXQtUExBTlRFRC0wMTIz", nil)}}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := store.WorkerHeartbeat(ctx, storage.Worker{ID: "wrk_live", Build: "x", SchemaVersion: 9, Host: "box1", StartedAt: now, HeartbeatAt: now}); err != nil {
		t.Fatal(err)
	}
	store.Close()
	k1, k2 := filepath.Join(dir, "k1"), filepath.Join(dir, "k2")

	tests := []struct {
		name string
		args []string
		// want is in the output when the command succeeds, in the error
		// when it fails.
		ok   bool
		want []string
	}{
		{"no new key file", []string{"--key-file", k1}, false, []string{"needs --new-key-file"}},
		{"an argument", []string{"--new-key-file", k1, "extra"}, false, []string{"takes no arguments", "extra"}},
		{"a live server", []string{"--new-key-file", k1, "--generate"}, false, []string{"wrk_live on box1", "--force"}},
		{"--force, from the default key", []string{"--new-key-file", k2, "--generate", "--force"}, true,
			[]string{"wrote a new key", "encrypted the signing secrets of 1 endpoints", "in plaintext until now", "mv " + k2 + " " + dbPath + ".key"}},
		{"--key-file", []string{"--key-file", k2, "--new-key-file", k1, "--generate", "--force"}, true,
			[]string{"re-encrypted the signing secrets of 1 endpoints", "FORMS_SECRETS_KEY_FILE=" + k1}},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		err := run(ctx, append([]string{"secrets", "rotate-key", "--database", db}, tt.args...), &stdout, &stderr)
		if (err == nil) != tt.ok {
			t.Fatalf("%s: err = %v, want success %v\n%s", tt.name, err, tt.ok, stderr.String())
		}
		said := stdout.String()
		if err != nil {
			said = err.Error()
		}
		for _, w := range tt.want {
			if !strings.Contains(said, w) {
				t.Errorf("%s: %q does not say %q", tt.name, said, w)
			}
		}
	}
}
