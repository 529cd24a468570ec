package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hymical/hymical/internal/redact"
	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/server/fleet"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/secretbox"
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
	log := slog.New(slog.NewTextHandler(stderr, nil))
	current, err := database.LoadSecretsKey(*dbURL, database.SecretsConfig{Key: os.Getenv("FORMS_SECRETS_KEY"), KeyFile: *keyFile}, false, log)
	if err != nil {
		return err
	}
	if *generate {
		key, err := secretbox.GenerateKey()
		if err != nil {
			return err
		}
		if err := database.WriteKeyFile(*newKeyFile, key); err != nil {
			return fmt.Errorf("%w (--generate never replaces a file)", err)
		}
		fmt.Fprintf(stdout, "wrote a new key, id %s, to %s (mode 0600)\n", key.ID(), *newKeyFile)
	}
	next, err := database.ReadKeyFile(*newKeyFile, log)
	if err != nil {
		return err
	}

	store, err := database.Open(ctx, *dbURL, append(current.Options(), storage.WithLogger(log))...)
	if err != nil {
		return err
	}
	defer store.Close()
	shown := redact.URL(*dbURL)
	if _, err := database.CheckSchema(ctx, store); err != nil {
		return fmt.Errorf("%s: %w", shown, err)
	}
	if !*force {
		live, err := store.WorkerList(ctx, time.Now().Add(-fleet.LiveWindow))
		if err != nil {
			return fmt.Errorf("%s: list live servers: %w", shown, err)
		}
		if len(live) > 0 {
			var names []string
			for _, w := range live {
				names = append(names, fmt.Sprintf("%s on %s", w.ID, w.Host))
			}
			return fmt.Errorf("%s: servers are running on this database (%s): stop them first, since they would keep the old key; or pass --force if they are gone and only their registry rows remain", shown, strings.Join(names, "; "))
		}
	}
	at, ok := store.(storage.SecretsAtRest)
	if !ok {
		return fmt.Errorf("%s: the store cannot keep endpoint secrets encrypted", shown)
	}
	res, err := at.SecretsEncrypt(ctx, next.Box)
	if err != nil {
		return fmt.Errorf("%s: %w", shown, err)
	}
	switch {
	case res.From == res.To:
		fmt.Fprintf(stdout, "the endpoint signing secrets in %s are already encrypted under the key with id %s: nothing to do\n", shown, res.To)
	case res.From == "":
		fmt.Fprintf(stdout, "encrypted the signing secrets of %d endpoints in %s, in plaintext until now, under the key with id %s, in one transaction\n", res.Endpoints, shown, res.To)
	default:
		fmt.Fprintf(stdout, "re-encrypted the signing secrets of %d endpoints in %s from the key with id %s to the key with id %s, in one transaction\n", res.Endpoints, shown, res.From, res.To)
	}
	fmt.Fprintf(stdout, "start hymical serve with the new key: FORMS_SECRETS_KEY_FILE=%s (or secrets.key_file)", *newKeyFile)
	if def, ok := database.DefaultKeyFile(*dbURL); ok && *keyFile == "" && os.Getenv("FORMS_SECRETS_KEY") == "" {
		fmt.Fprintf(stdout, ", or put it where the server looks by default: mv %s %s", *newKeyFile, def)
	}
	fmt.Fprintln(stdout)
	if res.From != "" && res.From != res.To {
		fmt.Fprintf(stdout, "the old key (id %s) no longer opens anything in this database; keep it only as long as you keep backups made before now\n", res.From)
	}
	return nil
}
