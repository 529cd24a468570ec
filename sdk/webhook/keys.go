package webhook

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
)

// Scheme is a signature scheme, named by the identifier that stands in front
// of each of its signatures in the webhook-signature header.
type Scheme string

const (
	// SchemeV1 is HMAC-SHA256 with a shared secret written SecretPrefix +
	// base64. Sender and receiver hold the same secret.
	SchemeV1 Scheme = "v1"
	// SchemeV1a is Ed25519: the sender signs with a signing key written
	// SigningKeyPrefix + base64, and receivers verify with its public key,
	// written PublicKeyPrefix + base64, which need not be kept secret.
	SchemeV1a Scheme = "v1a"
)

// Schemes lists every scheme, the default first.
func Schemes() []Scheme { return []Scheme{SchemeV1, SchemeV1a} }

// The prefixes Standard Webhooks gives v1a keys, so that a key says which
// scheme it belongs to and whether it is the private or the public half.
const (
	SigningKeyPrefix = "whsk_"
	PublicKeyPrefix  = "whpk_"
)

// ParseScheme reads a scheme by its identifier, "v1" or "v1a".
func ParseScheme(s string) (Scheme, error) {
	for _, sc := range Schemes() {
		if s == string(sc) {
			return sc, nil
		}
	}
	return "", fmt.Errorf("webhook: unknown signature scheme %q; the schemes are %q (HMAC-SHA256) and %q (Ed25519)", clip(s), SchemeV1, SchemeV1a)
}

// NewKey mints what the sender signs with under the scheme: a whsec_ secret
// for v1 (as NewSecret), a whsk_ signing key for v1a (as NewKeyPair).
func (s Scheme) NewKey() (string, error) {
	switch s {
	case SchemeV1:
		return NewSecret()
	case SchemeV1a:
		sk, _, err := NewKeyPair()
		return sk, err
	}
	return "", fmt.Errorf("webhook: cannot mint a key for unknown signature scheme %q", clip(string(s)))
}

// KeyScheme tells the scheme a secret or key belongs to from its prefix:
// whsk_ and whpk_ are v1a, anything else is taken for a v1 secret (which
// ParseSecret accepts with or without its whsec_ prefix). It does not check
// that the rest is well formed.
func KeyScheme(key string) Scheme {
	key = strings.TrimSpace(key)
	if strings.HasPrefix(key, SigningKeyPrefix) || strings.HasPrefix(key, PublicKeyPrefix) {
		return SchemeV1a
	}
	return SchemeV1
}

// NewKeyPair mints a v1a key pair: the signing key, SigningKeyPrefix + the
// standard base64 of the 64-byte Ed25519 private key (the 32-byte seed
// followed by the public key, the form the Standard Webhooks reference
// implementation writes and reads), and its public key, PublicKeyPrefix +
// the standard base64 of the 32-byte Ed25519 public key.
func NewKeyPair() (signingKey, publicKey string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("webhook: generating an Ed25519 key pair: %w", err)
	}
	return SigningKeyPrefix + base64.StdEncoding.EncodeToString(priv), PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub), nil
}

// PublicKey returns the whpk_ public key of a whsk_ signing key: what a
// receiver is given to verify the v1a signatures the signing key makes.
func PublicKey(signingKey string) (string, error) {
	priv, err := ParseSigningKey(signingKey)
	if err != nil {
		return "", err
	}
	return encodePublicKey(priv.Public().(ed25519.PublicKey)), nil
}

func encodePublicKey(pub ed25519.PublicKey) string {
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub)
}

// ParseSigningKey returns the Ed25519 private key held by a whsk_ signing
// key. The prefix is required: without it a key could not be told from a
// v1 secret. The public half stored in the key must be the one its seed
// gives, or every signature it made would fail to verify.
func ParseSigningKey(s string) (ed25519.PrivateKey, error) {
	raw, err := decodeKey(s, SigningKeyPrefix, "signing key", ed25519.PrivateKeySize,
		"the 32-byte Ed25519 seed followed by its 32-byte public key")
	if err != nil {
		return nil, err
	}
	priv := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
	if subtle.ConstantTimeCompare(priv[ed25519.SeedSize:], raw[ed25519.SeedSize:]) != 1 {
		return nil, fmt.Errorf("%w: the signing key's second half is not the public key of its seed; copy the key again exactly as issued", ErrInvalidSecret)
	}
	return priv, nil
}

// ParsePublicKey returns the Ed25519 public key held by a whpk_ public key.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	raw, err := decodeKey(s, PublicKeyPrefix, "public key", ed25519.PublicKeySize, "an Ed25519 public key")
	if err != nil {
		return nil, err
	}
	return ed25519.PublicKey(raw), nil
}

// decodeKey strips prefix from s and decodes standard base64 of exactly
// size bytes. Like ParseSecret it reports what is wrong, never the key.
func decodeKey(s, prefix, what string, size int, shape string) ([]byte, error) {
	s = strings.TrimSpace(s)
	enc, ok := strings.CutPrefix(s, prefix)
	if !ok {
		hint := ""
		switch {
		case strings.HasPrefix(s, SecretPrefix):
			hint = fmt.Sprintf(": it is a %s secret of scheme %s", SecretPrefix, SchemeV1)
		case strings.HasPrefix(s, SigningKeyPrefix):
			hint = fmt.Sprintf(": it is a %s signing key, the private half", SigningKeyPrefix)
		case strings.HasPrefix(s, PublicKeyPrefix):
			hint = fmt.Sprintf(": it is a %s public key", PublicKeyPrefix)
		}
		return nil, fmt.Errorf("%w: a %s %s must start with %q%s", ErrInvalidSecret, SchemeV1a, what, prefix, hint)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("%w: the %s is not standard base64 after %q; copy it again exactly as issued", ErrInvalidSecret, what, prefix)
	}
	if len(raw) != size {
		return nil, fmt.Errorf("%w: the %s decodes to %d bytes, want %d: %s", ErrInvalidSecret, what, len(raw), size, shape)
	}
	return raw, nil
}

// signingKey is one parsed key a sender signs with: an HMAC secret (v1) or
// an Ed25519 private key (v1a).
type signingKey struct {
	scheme Scheme
	hmac   []byte
	ed     ed25519.PrivateKey
}

// sign returns the raw signature over the signed content.
func (k signingKey) sign(msgID, unix string, body []byte) []byte {
	if k.scheme == SchemeV1a {
		return ed25519.Sign(k.ed, signedContent(msgID, unix, body))
	}
	return mac(k.hmac, msgID, unix, body)
}

// parseSigningKeys reads each key by its prefix, naming a bad one by its
// position only.
func parseSigningKeys(keys []string) ([]signingKey, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no secret given; pass at least one", ErrInvalidSecret)
	}
	out := make([]signingKey, len(keys))
	for i, s := range keys {
		var err error
		switch t := strings.TrimSpace(s); {
		case strings.HasPrefix(t, SigningKeyPrefix):
			out[i].scheme = SchemeV1a
			out[i].ed, err = ParseSigningKey(t)
		case strings.HasPrefix(t, PublicKeyPrefix):
			err = fmt.Errorf("%w: a %s public key verifies but cannot sign; sign with the %s signing key it belongs to", ErrInvalidSecret, PublicKeyPrefix, SigningKeyPrefix)
		default:
			out[i].scheme = SchemeV1
			out[i].hmac, err = ParseSecret(t)
		}
		if err != nil {
			return nil, numbered(i, len(keys), err)
		}
	}
	return out, nil
}

// verifyKeys are the parsed keys a receiver checks signatures against, one
// list per scheme, so each signature is tried only against keys of its own.
type verifyKeys struct {
	hmac [][]byte
	pub  []ed25519.PublicKey
}

func parseVerifyKeys(keys []string) (verifyKeys, error) {
	var out verifyKeys
	if len(keys) == 0 {
		return out, fmt.Errorf("%w: no secret given; pass at least one", ErrInvalidSecret)
	}
	for i, s := range keys {
		t := strings.TrimSpace(s)
		switch {
		case strings.HasPrefix(t, PublicKeyPrefix):
			pub, err := ParsePublicKey(t)
			if err != nil {
				return verifyKeys{}, numbered(i, len(keys), err)
			}
			out.pub = append(out.pub, pub)
		case strings.HasPrefix(t, SigningKeyPrefix):
			// Accepting it would work, but would teach receivers to hold
			// the sender's private key, which v1a exists to avoid.
			return verifyKeys{}, numbered(i, len(keys), fmt.Errorf("%w: a %s signing key is the sender's private key; verify with its %s public key (webhook.PublicKey derives it) and keep the signing key off the receiver",
				ErrInvalidSecret, SigningKeyPrefix, PublicKeyPrefix))
		default:
			k, err := ParseSecret(t)
			if err != nil {
				return verifyKeys{}, numbered(i, len(keys), err)
			}
			out.hmac = append(out.hmac, k)
		}
	}
	return out, nil
}

// numbered names a bad key by its position when there are several.
func numbered(i, n int, err error) error {
	if n == 1 {
		return err
	}
	return fmt.Errorf("secret %d of %d: %w", i+1, n, err)
}
