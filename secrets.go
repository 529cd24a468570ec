package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/server/secrets"
)

func runSecrets(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runGroup(ctx, "secrets", []subcommand{
		{"rotate-key", "encrypt every endpoint's signing secrets under a new key", runSecretsRotateKey},
	}, args, stdout, stderr)
}

const rotateKeyUsage = `usage: hymical secrets rotate-key --new-key-file FILE [flags]

Encrypts every endpoint's signing secrets under the key in FILE, in one
transaction, and records that key's id in the database; secrets still in
plaintext are encrypted too. The current key is found as hymical serve finds
it: FORMS_SECRETS_KEY, or --key-file (FORMS_SECRETS_KEY_FILE), or, for
SQLite, the key file beside the database (DATABASE.key). With --generate,
FILE must not exist: a new random key is written to it (mode 0600) first.

Stop every hymical serve on the database first, and start them again with
the new key: a server still holding the old key can neither read nor write
endpoint secrets, and refuses to start with it. No key is ever taken as a
flag, so none appears in the process list; the key ids printed are not
secret.`

func runSecretsRotateKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("secrets rotate-key", rotateKeyUsage)
	dbURL := fs.String("database", databaseURLDefault(), "database URL: sqlite:PATH or postgres://USER@HOST/DB (env FORMS_DATABASE_URL)")
	keyFile := fs.String("key-file", os.Getenv("FORMS_SECRETS_KEY_FILE"), "file holding the current key (env FORMS_SECRETS_KEY_FILE; or the key itself in FORMS_SECRETS_KEY; default for SQLite: DATABASE.key)")
	newKeyFile := fs.String("new-key-file", "", "file holding the new key, 32 bytes in base64 or hex (required)")
	generate := fs.Bool("generate", false, "write a new random key to --new-key-file, which must not exist yet, and rotate to it")
	force := fs.Bool("force", false, "rotate even while servers are registered as live on the database")
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("secrets rotate-key takes no arguments, got %q", fs.Args())
	}
	if *newKeyFile == "" {
		fs.printUsage(stderr)
		return fmt.Errorf("secrets rotate-key needs --new-key-file: the file holding the new key (with --generate, where to write one)")
	}
	return secrets.RotateKey(ctx, secrets.RotateParams{
		DatabaseURL: *dbURL,
		Current:     database.SecretsConfig{Key: os.Getenv("FORMS_SECRETS_KEY"), KeyFile: *keyFile},
		NewKeyFile:  *newKeyFile,
		Generate:    *generate,
		Force:       *force,
		Log:         slog.New(slog.NewTextHandler(stderr, nil)),
	}, stdout)
}
