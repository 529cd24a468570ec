package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/hymical/hymical/storage/secretbox"
)

// ErrSecretsKey: the endpoint secrets in the database cannot be read or
// written with the key this store was opened with (none, or another one).
// The message says which key id the database wants and what to do.
var ErrSecretsKey = errors.New("endpoint secrets key")

// OpenOption configures a store at Open.
type OpenOption func(*OpenConfig)

// OpenConfig is what the OpenOptions given to a backend's Open set.
type OpenConfig struct {
	// SecretBox, when set, seals every endpoint's secrets before they are
	// written and opens them when they are read. Nil keeps them in
	// plaintext, which only works while the database records no key.
	SecretBox *secretbox.Box
	// Log receives what the store has to warn about at Open (a database
	// file others can read). Nil is slog.Default().
	Log *slog.Logger
}

// WithSecretBox encrypts endpoint secrets at rest with box.
func WithSecretBox(box *secretbox.Box) OpenOption {
	return func(c *OpenConfig) { c.SecretBox = box }
}

// WithLogger gives the store a logger for its warnings.
func WithLogger(log *slog.Logger) OpenOption {
	return func(c *OpenConfig) { c.Log = log }
}

// NewOpenConfig applies opts.
func NewOpenConfig(opts []OpenOption) OpenConfig {
	var c OpenConfig
	for _, o := range opts {
		o(&c)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

// SecretsAtRest is what a store that can encrypt endpoint secrets offers
// beyond Store. Once a database records a key id, the database itself
// refuses a row whose secrets are not sealed under that key, so a process
// without the key can neither read secrets nor write plaintext ones.
type SecretsAtRest interface {
	// SecretsKeyID is the id of the key the database records its endpoint
	// secrets as sealed under; "" while they are kept in plaintext.
	SecretsKeyID(ctx context.Context) (string, error)
	// SecretsEncrypt seals every endpoint's secrets under to, in one
	// transaction, and records to's key id. It reads them as they are
	// stored: plaintext while no key is recorded, otherwise with the
	// store's own SecretBox, which must be the recorded key. When to's key
	// is already the recorded one it changes nothing.
	SecretsEncrypt(ctx context.Context, to *secretbox.Box) (SecretsEncryptResult, error)
}

// SecretsEncryptResult is what SecretsEncrypt did.
type SecretsEncryptResult struct {
	// From is the key id the secrets were sealed under before; "" for
	// plaintext.
	From string
	// To is the key id they are sealed under now.
	To string
	// Endpoints is how many endpoints' secrets were sealed again: 0 when
	// To was already the recorded key.
	Endpoints int
}

// SecretsCodec turns an endpoint's secrets into the text of its secrets
// column and back: a JSON array while they are in plaintext, a JSON string
// holding a secretbox envelope, bound to the endpoint's id, once sealed.
// Both are valid JSON, for PostgreSQL's jsonb column.
type SecretsCodec struct {
	// Box seals and opens; nil keeps secrets in plaintext.
	Box *secretbox.Box
}

// Encode is the column text of secrets of endpoint id.
func (c SecretsCodec) Encode(id string, secrets []Secret) (string, error) {
	plain, err := EncodeSecrets(secrets)
	if err != nil || c.Box == nil {
		return plain, err
	}
	sealed, err := c.Box.Seal([]byte(plain), id)
	if err != nil {
		return "", fmt.Errorf("endpoint %s: seal secrets: %w", id, err)
	}
	b, err := json.Marshal(sealed)
	return string(b), err
}

// Decode reads the column text of endpoint id. A sealed column without a
// box, or under another key, and a plaintext column with a box, are
// ErrSecretsKey: never a silent fallback to plaintext.
func (c SecretsCodec) Decode(id, column string) ([]Secret, error) {
	plain, err := c.open(id, column, id, secretsColumn)
	if err != nil {
		return nil, err
	}
	return DecodeSecrets(string(plain))
}

// sealedColumn is how the errors of one sealed column name it.
type sealedColumn struct {
	// what is the column's content in a sentence ("the signing secrets").
	what string
	// short names it in a decode error ("secrets").
	short string
	// copied says where a row that does not decrypt may have come from.
	copied string
}

var (
	secretsColumn = sealedColumn{what: "signing secrets", short: "secrets", copied: "another endpoint's row"}
	headersColumn = sealedColumn{what: "custom headers", short: "custom headers", copied: "another row"}
)

// open is the plaintext of endpoint id's sealed column, opened in context
// context, or the column as it is when it is not sealed and no box is
// configured. A sealed column without a box, or under another key, and a
// plaintext column with a box, are ErrSecretsKey.
func (c SecretsCodec) open(id, column, context string, col sealedColumn) ([]byte, error) {
	if !strings.HasPrefix(strings.TrimSpace(column), `"`) {
		if c.Box != nil {
			return nil, fmt.Errorf("%w: the %s of endpoint %s are stored in plaintext, but a secrets key (id %s) is configured: hymical serve encrypts them at start-up; check that nothing writes to the database without the key",
				ErrSecretsKey, col.what, id, c.Box.KeyID())
		}
		return []byte(column), nil
	}
	var sealed string
	if err := json.Unmarshal([]byte(column), &sealed); err != nil {
		return nil, fmt.Errorf("endpoint %s: decode sealed %s: %w", id, col.short, err)
	}
	keyID, err := secretbox.KeyIDOf(sealed)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %s: %w", id, col.what, err)
	}
	if c.Box == nil {
		return nil, fmt.Errorf("%w: the %s of endpoint %s are encrypted under the key with id %s and no key was given to read them: set FORMS_SECRETS_KEY or secrets.key_file to that key",
			ErrSecretsKey, col.what, id, keyID)
	}
	plain, err := c.Box.Open(sealed, context)
	switch {
	case errors.Is(err, secretbox.ErrWrongKey):
		return nil, fmt.Errorf("%w: the %s of endpoint %s are encrypted under the key with id %s, but the configured key has id %s: configure the key with id %s",
			ErrSecretsKey, col.what, id, keyID, c.Box.KeyID(), keyID)
	case err != nil:
		return nil, fmt.Errorf("%w: the %s of endpoint %s do not decrypt with the configured key (id %s): the row was changed, or copied from %s",
			ErrSecretsKey, col.what, id, keyID, col.copied)
	}
	return plain, nil
}

// Reseal is the column text of endpoint id sealed under to, read with c.
func (c SecretsCodec) Reseal(id, column string, to *secretbox.Box) (string, error) {
	secrets, err := c.Decode(id, column)
	if err != nil {
		return "", err
	}
	return SecretsCodec{Box: to}.Encode(id, secrets)
}

// SecretsFrom is the codec that reads the secrets of a database recording
// key id recorded ("" for plaintext) with own, the store's box: a
// mismatch is ErrSecretsKey, saying what to configure.
func SecretsFrom(recorded string, own *secretbox.Box) (SecretsCodec, error) {
	switch {
	case recorded == "":
		return SecretsCodec{}, nil
	case own == nil:
		return SecretsCodec{}, fmt.Errorf("%w: the endpoint secrets are encrypted under the key with id %s and no key was given to read them: set FORMS_SECRETS_KEY or secrets.key_file to that key",
			ErrSecretsKey, recorded)
	case own.KeyID() != recorded:
		return SecretsCodec{}, fmt.Errorf("%w: the endpoint secrets are encrypted under the key with id %s, but the key given has id %s: give the key with id %s",
			ErrSecretsKey, recorded, own.KeyID(), recorded)
	}
	return SecretsCodec{Box: own}, nil
}
