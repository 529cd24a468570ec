// Package secretbox seals endpoint signing secrets for storage at rest:
// AES-256-GCM from the standard library, a 32-byte key, and a versioned
// envelope that names the key it was sealed under.
//
// It lives under storage/ rather than internal/ because its envelope is
// part of what the database holds, like the migrations: the stores write
// it and read it back, and a change to it is a change to the stored
// format. It imports nothing of the project, so anything that opens a
// store (server/database, the CLI) may use it.
//
// The envelope is text: "hsb1:", the key id in 16 hex digits, ":", then
// unpadded base64url of nonce (12 bytes) ‖ ciphertext and tag. The key id
// is the first 8 bytes of the key's SHA-256: it tells a wrong key from a
// damaged row without trying, it lets the database itself check which key
// a row is sealed under (a trigger compares the header with the key id it
// records), and it is no help in guessing the key. The associated data is
// the header and the caller's context (the endpoint id), so a sealed value
// copied into another endpoint's row, or relabelled with another key id,
// does not open.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// KeySize is the length of a key in bytes: AES-256.
const KeySize = 32

// Prefix starts every sealed value; the digit is the envelope's version.
const Prefix = "hsb1:"

const (
	idSize    = 8
	nonceSize = 12
	// headerLen is Prefix, the key id in hex and ":".
	headerLen = len(Prefix) + 2*idSize + 1
)

// Header is the start of every value sealed under the key with id keyID.
func Header(keyID string) string { return Prefix + keyID + ":" }

// Errors a caller tells apart with errors.Is. None of them carries a key
// or a secret.
var (
	// ErrKeyFormat: a key's text is not 32 bytes in base64 or hex.
	ErrKeyFormat = errors.New("not a 32-byte key written in base64 or hex")
	// ErrWrongKey: the value was sealed under another key.
	ErrWrongKey = errors.New("sealed under another key")
	// ErrOpen: the value is damaged, or belongs to another context (another
	// endpoint's row).
	ErrOpen = errors.New("does not open: it was changed, or it belongs to another row")
	// ErrNotSealed: the value has no envelope.
	ErrNotSealed = errors.New("not a sealed value")
)

// Key is a 32-byte key. Its String, GoString and LogValue hide it.
type Key struct {
	b [KeySize]byte
	// set tells a parsed or generated key from the zero Key.
	set bool
}

// GenerateKey returns a fresh random key.
func GenerateKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k.b[:]); err != nil {
		return Key{}, fmt.Errorf("generate a key: %w", err)
	}
	k.set = true
	return k, nil
}

// ParseKey reads a key written as standard or URL-safe base64 (padded or
// not) or as 64 hex digits; surrounding white space is ignored, so a key
// file may end in a newline. The error never repeats the text.
func ParseKey(text string) (Key, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return Key{}, fmt.Errorf("the key is empty: %w", ErrKeyFormat)
	}
	var raw []byte
	if len(text) == 2*KeySize {
		if b, err := hex.DecodeString(text); err == nil {
			raw = b
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw != nil {
			break
		}
		if b, err := enc.DecodeString(text); err == nil {
			raw = b
		}
	}
	if raw == nil {
		return Key{}, fmt.Errorf("the key (%d characters) is neither base64 nor hex: %w", len(text), ErrKeyFormat)
	}
	if len(raw) != KeySize {
		return Key{}, fmt.Errorf("the key decodes to %d bytes, want %d: %w", len(raw), KeySize, ErrKeyFormat)
	}
	var k Key
	copy(k.b[:], raw)
	k.set = true
	return k, nil
}

// IsZero reports whether k is the zero Key, which is no key at all.
func (k Key) IsZero() bool { return !k.set }

// ID is the key's id: hex of the first 8 bytes of its SHA-256. It is safe
// to show, and is what the database records.
func (k Key) ID() string {
	sum := sha256.Sum256(k.b[:])
	return hex.EncodeToString(sum[:idSize])
}

// Text is the key in standard base64, for writing a key file.
func (k Key) Text() string { return base64.StdEncoding.EncodeToString(k.b[:]) }

// String shows the key's id, never the key.
func (k Key) String() string {
	if !k.set {
		return "secretbox.Key(none)"
	}
	return "secretbox.Key(id " + k.ID() + ")"
}

// GoString keeps %#v from printing the key.
func (k Key) GoString() string { return k.String() }

// LogValue implements slog.LogValuer.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// Box seals and opens values under one key. It is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
	id   string // the key id, hex
}

// New returns a Box for k.
func New(k Key) (*Box, error) {
	if !k.set {
		return nil, errors.New("secretbox: no key given")
	}
	block, err := aes.NewCipher(k.b[:])
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	return &Box{aead: aead, id: k.ID()}, nil
}

// KeyID is the id of the Box's key.
func (b *Box) KeyID() string { return b.id }

// String shows the key id only.
func (b *Box) String() string { return "secretbox.Box(key id " + b.id + ")" }

// Seal returns plaintext sealed under the Box's key, bound to context
// (e.g. the endpoint id): Open must be given the same context.
func (b *Box) Seal(plaintext []byte, context string) (string, error) {
	header := Header(b.id)
	out := make([]byte, nonceSize, nonceSize+len(plaintext)+b.aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return "", fmt.Errorf("secretbox: nonce: %w", err)
	}
	out = b.aead.Seal(out, out[:nonceSize], plaintext, []byte(header+context))
	return header + base64.RawURLEncoding.EncodeToString(out), nil
}

// Open returns what Seal sealed with the same context. The error says
// which of ErrNotSealed, ErrWrongKey (naming both key ids) or ErrOpen
// it is, and never holds the value.
func (b *Box) Open(sealed, context string) ([]byte, error) {
	id, raw, err := decode(sealed)
	if err != nil {
		return nil, err
	}
	if id != b.id {
		return nil, fmt.Errorf("secretbox: sealed under the key with id %s, not %s: %w", id, b.id, ErrWrongKey)
	}
	out, err := b.aead.Open(nil, raw[:nonceSize], raw[nonceSize:], []byte(Header(id)+context))
	if err != nil {
		return nil, fmt.Errorf("secretbox: sealed value %w", ErrOpen)
	}
	return out, nil
}

// KeyIDOf is the id of the key a sealed value names, without opening it.
func KeyIDOf(sealed string) (string, error) {
	id, _, err := decode(sealed)
	return id, err
}

// IsSealed reports whether s carries the envelope's prefix.
func IsSealed(s string) bool { return strings.HasPrefix(s, Prefix) }

func decode(sealed string) (id string, raw []byte, err error) {
	if !IsSealed(sealed) {
		return "", nil, fmt.Errorf("secretbox: %w", ErrNotSealed)
	}
	if len(sealed) < headerLen || sealed[headerLen-1] != ':' {
		return "", nil, fmt.Errorf("secretbox: sealed value has no key id: %w", ErrOpen)
	}
	id = sealed[len(Prefix) : headerLen-1]
	if _, err := hex.DecodeString(id); err != nil {
		return "", nil, fmt.Errorf("secretbox: sealed value has no key id: %w", ErrOpen)
	}
	raw, err = base64.RawURLEncoding.DecodeString(sealed[headerLen:])
	if err != nil || len(raw) < nonceSize+16 {
		return "", nil, fmt.Errorf("secretbox: sealed value is truncated or not base64: %w", ErrOpen)
	}
	return id, raw, nil
}
