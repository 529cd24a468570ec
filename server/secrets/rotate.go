// Package secrets is the operator's work on endpoint signing secrets at
// rest: moving them to a new encryption key (hymical secrets rotate-key).
// Finding the current key and opening a store with it are server/database's,
// done the way the server does them at start; this package adds the new
// key, the refusal while servers are live (fleet.CheckNoneLive), the
// re-encryption in one transaction, and what to tell the operator after.
//
// It never shows a key or a secret: files and key ids only.
package secrets

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/server/fleet"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/secretbox"
)

// RotateParams says which database to rotate and to which key.
type RotateParams struct {
	// DatabaseURL is the database, as database.url names it.
	DatabaseURL string
	// Current is where the key the secrets are under now comes from. With
	// neither field set, a SQLite database's key is the key file beside
	// it (database.DefaultKeyFile), and otherwise there is none.
	Current database.SecretsConfig
	// NewKeyFile holds the key to move the secrets to.
	NewKeyFile string
	// Generate writes a new random key to NewKeyFile first; the file must
	// not exist.
	Generate bool
	// Force rotates although servers are registered as live, for when
	// they are gone and only their registry rows remain.
	Force bool
	// Log receives warnings, such as a key file others may read; nil
	// discards them.
	Log *slog.Logger
}

// RotateKey encrypts every endpoint's signing secrets under the key in
// p.NewKeyFile, in one transaction, and records that key's id in the
// database; secrets still in plaintext are encrypted too. It refuses while
// servers are live on the database, since they would go on with the old
// key, unless p.Force. It writes to out what it did and how to start the
// servers with the new key.
func RotateKey(ctx context.Context, p RotateParams, out io.Writer) error {
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	current, err := database.LoadSecretsKey(p.DatabaseURL, p.Current, false, log)
	if err != nil {
		return err
	}
	store, err := database.Open(ctx, p.DatabaseURL, append(current.Options(), storage.WithLogger(log))...)
	if err != nil {
		return err
	}
	defer store.Close()
	shown := redact.URL(p.DatabaseURL)
	if _, err := database.CheckSchema(ctx, store); err != nil {
		return fmt.Errorf("%s: %w", shown, err)
	}
	if !p.Force {
		if err := fleet.CheckNoneLive(ctx, store, time.Now(), "they would keep the old key"); err != nil {
			return fmt.Errorf("%s: %w", shown, err)
		}
	}
	at, ok := store.(storage.SecretsAtRest)
	if !ok {
		return fmt.Errorf("%s: the store cannot keep endpoint secrets encrypted", shown)
	}
	// The new key is made only now, so that a rotation refused above
	// leaves no key file behind that nothing was encrypted under.
	next, err := newKey(p, log, out)
	if err != nil {
		return err
	}
	res, err := at.SecretsEncrypt(ctx, next.Box)
	if err != nil {
		return fmt.Errorf("%s: %w", shown, err)
	}
	report(out, p, shown, res)
	return nil
}

// newKey reads the new key from p.NewKeyFile, writing a random one there
// first when p.Generate.
func newKey(p RotateParams, log *slog.Logger, out io.Writer) (database.SecretsKey, error) {
	if p.Generate {
		key, err := secretbox.GenerateKey()
		if err != nil {
			return database.SecretsKey{}, err
		}
		if err := database.WriteKeyFile(p.NewKeyFile, key); err != nil {
			return database.SecretsKey{}, fmt.Errorf("%w (--generate never replaces a file)", err)
		}
		fmt.Fprintf(out, "wrote a new key, id %s, to %s (mode 0600)\n", key.ID(), p.NewKeyFile)
	}
	return database.ReadKeyFile(p.NewKeyFile, log)
}

// report tells the operator what the rotation did and what to do next.
func report(out io.Writer, p RotateParams, shown string, res storage.SecretsEncryptResult) {
	switch {
	case res.From == res.To:
		fmt.Fprintf(out, "the endpoint signing secrets in %s are already encrypted under the key with id %s: nothing to do\n", shown, res.To)
	case res.From == "":
		fmt.Fprintf(out, "encrypted the signing secrets of %d endpoints in %s, in plaintext until now, under the key with id %s, in one transaction\n", res.Endpoints, shown, res.To)
	default:
		fmt.Fprintf(out, "re-encrypted the signing secrets of %d endpoints in %s from the key with id %s to the key with id %s, in one transaction\n", res.Endpoints, shown, res.From, res.To)
	}
	fmt.Fprintf(out, "start hymical serve with the new key: FORMS_SECRETS_KEY_FILE=%s (or secrets.key_file)", p.NewKeyFile)
	if def, ok := database.DefaultKeyFile(p.DatabaseURL); ok && p.Current == (database.SecretsConfig{}) {
		fmt.Fprintf(out, ", or put it where the server looks by default: mv %s %s", p.NewKeyFile, def)
	}
	fmt.Fprintln(out)
	if res.From != "" && res.From != res.To {
		fmt.Fprintf(out, "the old key (id %s) no longer opens anything in this database; keep it only as long as you keep backups made before now\n", res.From)
	}
}
