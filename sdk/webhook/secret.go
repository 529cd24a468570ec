package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// SecretPrefix starts every v1 (HMAC-SHA256) secret this package writes.
const SecretPrefix = "whsec_"

// secretBytes is the length of a secret minted by NewSecret: the HMAC-SHA256
// block size would allow more, but 32 bytes already matches the output size
// and sits inside the 24-64 bytes Standard Webhooks recommends.
const secretBytes = 32

// ErrInvalidSecret is returned (wrapped) for a secret that cannot be used.
// The error text says what is wrong with it but never contains it.
var ErrInvalidSecret = errors.New("webhook: invalid secret")

// NewSecret mints a signing secret: SecretPrefix followed by the standard
// base64 of 32 random bytes.
func NewSecret() (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("webhook: reading random bytes for a new secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// ParseSecret returns the HMAC key held by a secret written SecretPrefix +
// standard base64. Bare base64 without the prefix is accepted too, as the
// other Standard Webhooks libraries do, so a receiver can paste either form.
// Surrounding white space, such as a trailing newline from a file, is ignored.
func ParseSecret(s string) ([]byte, error) {
	if KeyScheme(s) == SchemeV1a {
		return nil, fmt.Errorf("%w: it is a %s (Ed25519) key, not a %s secret; use ParseSigningKey or ParsePublicKey", ErrInvalidSecret, SchemeV1a, SecretPrefix)
	}
	enc := strings.TrimPrefix(strings.TrimSpace(s), SecretPrefix)
	if enc == "" {
		return nil, fmt.Errorf("%w: it is empty; want %q followed by standard base64", ErrInvalidSecret, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		// Only the offset is reported: the base64 error itself is safe, but
		// wrapping it would invite later code to print more of the input.
		var corrupt base64.CorruptInputError
		if errors.As(err, &corrupt) {
			return nil, fmt.Errorf("%w: not standard base64 (bad data at byte %d after any %q prefix); copy the secret again exactly as issued",
				ErrInvalidSecret, int64(corrupt), SecretPrefix)
		}
		return nil, fmt.Errorf("%w: not standard base64; copy the secret again exactly as issued", ErrInvalidSecret)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("%w: it decodes to no bytes; want %q followed by standard base64", ErrInvalidSecret, SecretPrefix)
	}
	return key, nil
}
