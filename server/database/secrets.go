package database

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"strings"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/secretbox"
)

// SecretsConfig is where the key that encrypts endpoint secrets comes
// from, as configured (secrets.key, secrets.key_file): at most one.
type SecretsConfig struct {
	// Key is the key itself, base64 or hex.
	Key string
	// KeyFile is a file holding it.
	KeyFile string
}

// SecretsKey is the key endpoint secrets are kept under, once resolved.
// Its zero value is no key: secrets in plaintext.
type SecretsKey struct {
	// Box seals and opens with the key; nil when there is none.
	Box *secretbox.Box
	// Source says where the key came from, for messages: never the key.
	Source string
	// create is the key file to write the key to, once PrepareSecrets
	// has seen that the database has no key yet: SQLite's default.
	create string
	key    secretbox.Key
}

// Options gives Open the store's options: the box of key.
func (k SecretsKey) Options() []storage.OpenOption {
	if k.Box == nil {
		return nil
	}
	return []storage.OpenOption{storage.WithSecretBox(k.Box)}
}

// DefaultKeyFile is where a SQLite database keeps its key when none is
// configured: beside the database, so the two are found together, but a
// separate file, so a copy or a backup of the database alone does not
// carry it.
func DefaultKeyFile(url string) (string, bool) {
	path, ok := SQLitePath(url)
	if !ok {
		return "", false
	}
	return path + ".key", true
}

// LoadSecretsKey resolves the key for the database at url from cfg. With
// neither key set, a SQLite database uses DefaultKeyFile: read when it
// exists, otherwise (when generate) a new key that PrepareSecrets writes
// there once it has checked the database has none yet; PostgreSQL has no
// key. A key file that others may read is a warning on log. Errors name
// the file or the setting, never the key.
func LoadSecretsKey(url string, cfg SecretsConfig, generate bool, log *slog.Logger) (SecretsKey, error) {
	switch {
	case cfg.Key != "" && cfg.KeyFile != "":
		return SecretsKey{}, errors.New("secrets.key and secrets.key_file are both set: give the key one way only")
	case cfg.Key != "":
		return newSecretsKey(cfg.Key, "secrets.key")
	case cfg.KeyFile != "":
		return readKeyFile(cfg.KeyFile, "secrets.key_file "+cfg.KeyFile, log)
	}
	path, ok := DefaultKeyFile(url)
	if !ok {
		return SecretsKey{}, nil
	}
	k, err := readKeyFile(path, "the key file beside the database, "+path, log)
	switch {
	case err == nil:
		return k, nil
	case !errors.Is(err, fs.ErrNotExist):
		return SecretsKey{}, err
	case !generate:
		return SecretsKey{}, nil
	}
	key, err := secretbox.GenerateKey()
	if err != nil {
		return SecretsKey{}, err
	}
	box, err := secretbox.New(key)
	if err != nil {
		return SecretsKey{}, err
	}
	return SecretsKey{Box: box, Source: "the key file beside the database, " + path + " (new)", create: path, key: key}, nil
}

func newSecretsKey(text, source string) (SecretsKey, error) {
	key, err := secretbox.ParseKey(text)
	if err != nil {
		return SecretsKey{}, fmt.Errorf("%s: %w: make one with openssl rand -base64 32", source, err)
	}
	box, err := secretbox.New(key)
	if err != nil {
		return SecretsKey{}, err
	}
	return SecretsKey{Box: box, Source: source, key: key}, nil
}

// ReadKeyFile reads the key in the file at path, warning on log when
// others may read the file.
func ReadKeyFile(path string, log *slog.Logger) (SecretsKey, error) {
	return readKeyFile(path, "the key file "+path, log)
}

// readKeyFile reads a key file, warning when others may read it.
func readKeyFile(path, source string, log *slog.Logger) (SecretsKey, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		// The os error names the file and why; it never holds the content.
		return SecretsKey{}, fmt.Errorf("%s: %w", source, err)
	}
	if fi, err := os.Stat(path); err == nil && runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		log.Warn(fmt.Sprintf("the secrets key file %s has mode %04o, so other users of this machine may read it and sign webhooks with the endpoints' secrets: run chmod 600 %s", path, fi.Mode().Perm(), path),
			"file", path, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()), "fix", "chmod 600 "+path)
	}
	return newSecretsKey(string(text), source)
}

// WriteKeyFile writes key to a new file at path, readable by its owner
// only. It never replaces a file: a key file that exists may be the only
// copy of a key some database needs.
func WriteKeyFile(path string, key secretbox.Key) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write the secrets key file: %w", err)
	}
	_, err = f.WriteString(key.Text() + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("write the secrets key file %s: %w", path, err)
	}
	return nil
}

// PrepareSecrets is the start-up step of secrets at rest, on a store
// opened with key.Options() whose schema CheckSchema has passed:
//
//   - the database records no key and there is none: it warns that the
//     secrets are in plaintext (PostgreSQL without secrets.key);
//   - it records none and there is a key: it writes a new default key
//     file first, then encrypts every plaintext row in one transaction;
//   - it records a key: the key given must be that one. None, or another,
//     is an error saying which key id the database needs and how to give
//     it, never a fallback to plaintext.
func PrepareSecrets(ctx context.Context, store storage.Store, key SecretsKey, log *slog.Logger) error {
	at, ok := store.(storage.SecretsAtRest)
	if !ok {
		return fmt.Errorf("the store %T cannot keep endpoint secrets encrypted", store)
	}
	recorded, err := at.SecretsKeyID(ctx)
	if err != nil {
		return fmt.Errorf("read which key the endpoint secrets are encrypted under: %w", err)
	}
	switch {
	case recorded == "" && key.Box == nil:
		log.Warn("endpoint signing secrets are stored in plaintext in the database: anyone with a dump or a backup of it can sign webhooks as this server; set FORMS_SECRETS_KEY (e.g. openssl rand -base64 32) or secrets.key_file and restart to encrypt them")
		return nil
	case recorded != "" && key.create != "":
		return fmt.Errorf("%w: the endpoint signing secrets in this database are encrypted under the key with id %s, but its key file %s is missing and no key is configured: restore the key file from your backup, or set FORMS_SECRETS_KEY or secrets.key_file to that key",
			storage.ErrSecretsKey, recorded, key.create)
	case recorded != "" && key.Box == nil:
		return fmt.Errorf("%w: the endpoint signing secrets in this database are encrypted under the key with id %s and no key is configured: set FORMS_SECRETS_KEY or secrets.key_file to that key",
			storage.ErrSecretsKey, recorded)
	case recorded != "" && recorded != key.Box.KeyID():
		return fmt.Errorf("%w: the endpoint signing secrets in this database are encrypted under the key with id %s, but the key from %s has id %s: configure the key with id %s (after hymical secrets rotate-key, the new key)",
			storage.ErrSecretsKey, recorded, key.Source, key.Box.KeyID(), recorded)
	case recorded != "":
		log.Info("endpoint signing secrets are encrypted at rest", "key_id", recorded, "key", key.Source)
		return nil
	}
	// A key, and plaintext in the database: encrypt, keeping the key first.
	if key.create != "" {
		if err := WriteKeyFile(key.create, key.key); err != nil {
			return err
		}
		log.Warn("generated a key to encrypt endpoint signing secrets and wrote it beside the database: back it up apart from the database, since the secrets cannot be read without it",
			"file", key.create, "key_id", key.Box.KeyID())
	}
	res, err := at.SecretsEncrypt(ctx, key.Box)
	if err != nil {
		return fmt.Errorf("encrypt the endpoint signing secrets: %w", err)
	}
	if res.From != res.To { // not done already by another process
		log.Info("encrypted the endpoint signing secrets stored in plaintext", "endpoints", res.Endpoints, "key_id", res.To, "key", key.Source)
	}
	return nil
}

// SQLitePath is the file a sqlite: URL names; false for any other URL.
func SQLitePath(url string) (string, bool) {
	if !strings.HasPrefix(url, "sqlite:") {
		return "", false
	}
	return strings.TrimPrefix(strings.TrimPrefix(url, "sqlite:"), "//"), true
}
