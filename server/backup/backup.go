// Package backup is hymical backup: a consistent copy of a SQLite
// database taken while servers go on running on it, and what the operator
// must know to restore it (where the secrets key is, and that it must be
// kept apart from the copy). The copy itself is the SQLite store's
// (BackupInto); opening the store and finding the key are server/database's,
// done the way serve does them. PostgreSQL is refused: pg_dump is its tool.
//
// It never shows a key or a secret: files, settings and key ids only.
package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/storage"
)

// ErrPostgres is the refusal to back up a PostgreSQL database.
var ErrPostgres = errors.New("hymical backup copies SQLite databases only")

// Params says which database to copy, where its key is, and where to.
type Params struct {
	// DatabaseURL is the database, as database.url names it.
	DatabaseURL string
	// Secrets is where the key for endpoint secrets comes from, as serve
	// is configured; with neither field set, a SQLite database's key is
	// the key file beside it (database.DefaultKeyFile).
	Secrets database.SecretsConfig
	// To is the file to write the copy to. It must not exist.
	To string
	// Log receives warnings, such as a key file others may read; nil
	// discards them.
	Log *slog.Logger
}

// copier is what a store needs to be copied online: the SQLite store.
type copier interface {
	BackupInto(ctx context.Context, path string) error
}

// Run writes a consistent copy of the SQLite database p.DatabaseURL names
// to p.To, readable by its owner only, and writes to out what it copied,
// where the key that opens the copy's endpoint secrets is, and how to
// restore. It refuses to replace any file, and refuses PostgreSQL with
// what to run instead.
func Run(ctx context.Context, p Params, out io.Writer) error {
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dbPath, ok := database.SQLitePath(p.DatabaseURL)
	if !ok {
		if strings.HasPrefix(p.DatabaseURL, "postgres://") || strings.HasPrefix(p.DatabaseURL, "postgresql://") {
			return fmt.Errorf("%w: %s is PostgreSQL, so back it up with PostgreSQL's own tools: pg_dump --format=custom of the whole database hymical uses (every table in it is hymical's state: schema version, endpoints, events, deliveries and their attempts), restored with pg_restore; and keep the secrets key (secrets.key or secrets.key_file) safe apart from the dump. See docs/backup.md",
				ErrPostgres, redact.URL(p.DatabaseURL))
		}
		// Open's message names the forms it accepts.
		_, err := database.Open(ctx, p.DatabaseURL)
		return err
	}
	if p.To == "" {
		return errors.New("backup needs --to FILE: the file to write the copy to, which must not exist yet")
	}
	// Open would create a database where there is none: a typo in the path
	// must not back up an empty database and call it done.
	if _, err := os.Stat(dbPath); err != nil {
		return fmt.Errorf("the database %s: %w: check database.url (or --config) names the file serve runs on", dbPath, err)
	}
	if same(dbPath, p.To) {
		return fmt.Errorf("--to %s is the database itself: write the copy to another file", p.To)
	}

	key, keyErr := database.LoadSecretsKey(p.DatabaseURL, p.Secrets, false, log)
	store, err := database.Open(ctx, p.DatabaseURL, storage.WithLogger(log))
	if err != nil {
		return err
	}
	defer store.Close()
	c, ok := store.(copier)
	if !ok {
		return fmt.Errorf("the store %T cannot be copied online", store)
	}
	schema, err := store.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("read the schema version of %s: %w", dbPath, err)
	}
	keyID := ""
	if at, ok := store.(storage.SecretsAtRest); ok {
		if keyID, err = at.SecretsKeyID(ctx); err != nil {
			return fmt.Errorf("read which key the endpoint secrets of %s are encrypted under: %w", dbPath, err)
		}
	}

	size, err := write(ctx, c, p.To)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "copied %s (schema version %d) to %s: %d bytes, mode 0600\n", dbPath, schema, p.To, size)
	writeKeyAdvice(out, keyID, key, keyErr)
	fmt.Fprintf(out, "to restore: put the copy in place as the database file, give serve the key as above (the same file, or the same secrets.key), and start hymical serve with a build that knows schema version %d or later\n", schema)
	return nil
}

// write makes the file at path (refusing one that exists) with mode 0600,
// has c copy the database into it, and makes the copy durable. A copy that
// fails is removed, so what is left at path is always a whole backup.
func write(ctx context.Context, c copier, path string) (size int64, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return 0, fmt.Errorf("--to %s exists: hymical backup never replaces a file (it may be the backup you need); choose a new name or move that one away", path)
	}
	if err != nil {
		return 0, fmt.Errorf("create the backup file: %w", err)
	}
	// Closed at once: SQLite writes it through a handle of its own.
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("create the backup file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	if err := c.BackupInto(ctx, path); err != nil {
		return 0, fmt.Errorf("copy the database to %s: %w", path, err)
	}
	// SQLite does not sync what VACUUM INTO writes: a crash just after
	// "copied" must not leave a backup that is half on disk.
	if err := syncFile(path); err != nil {
		return 0, err
	}
	if err := syncFile(filepath.Dir(path)); err != nil {
		return 0, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("the backup file: %w", err)
	}
	return fi.Size(), nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync the backup to disk: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s to disk: %w", path, err)
	}
	return nil
}

// writeKeyAdvice says where the key that opens the copy's endpoint secrets
// is, or that there is none, and why it must be kept apart from the copy.
func writeKeyAdvice(out io.Writer, keyID string, key database.SecretsKey, keyErr error) {
	const apart = "keep the key apart from the copy (another disk, another machine, a secrets manager): a backup with its key beside it hands out every endpoint's signing secret"
	switch {
	case keyID == "":
		fmt.Fprintln(out, "the endpoint signing secrets in the copy are in plaintext (no secrets key is set): anyone who reads the copy can sign webhooks as this server, so keep it as you would a key; set secrets.key_file or FORMS_SECRETS_KEY to encrypt them (docs/security.md)")
	case keyErr != nil:
		fmt.Fprintf(out, "warning: the endpoint signing secrets in the copy are encrypted under the key with id %s, and that key could not be read (%v): the copy is of no use without it, so find it and keep it safe; %s\n", keyID, keyErr, apart)
	case key.Box == nil:
		fmt.Fprintf(out, "warning: the endpoint signing secrets in the copy are encrypted under the key with id %s, and no key is configured nor beside the database: the copy is of no use without that key, so find it and keep it safe; %s\n", keyID, apart)
	case key.Box.KeyID() != keyID:
		fmt.Fprintf(out, "warning: the endpoint signing secrets in the copy are encrypted under the key with id %s, but %s holds the key with id %s: the copy needs the key with id %s; %s\n", keyID, key.Source, key.Box.KeyID(), keyID, apart)
	default:
		fmt.Fprintf(out, "the endpoint signing secrets in the copy are encrypted under the key with id %s, which is not in the copy: it is %s\n%s\n", keyID, keySource(key.Source), apart)
	}
}

// keySource says where the key is, for the operator to back it up.
func keySource(source string) string {
	if source == "secrets.key" {
		return "set as secrets.key (FORMS_SECRETS_KEY) in serve's configuration, so back it up from wherever that is kept"
	}
	return source
}

// same reports whether a and b name the same file, as far as can be told
// before b exists.
func same(a, b string) bool {
	if fa, err := os.Stat(a); err == nil {
		if fb, err := os.Stat(b); err == nil {
			return os.SameFile(fa, fb)
		}
	}
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == ab
}
