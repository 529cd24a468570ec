package webhook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is how far a message timestamp may lie in the past or the
// future before Verify rejects it, the value Standard Webhooks recommends.
const DefaultTolerance = 5 * time.Minute

// Sentinels for errors.Is. Verify wraps exactly one of them in every error it
// returns; MissingHeaderError and TimestampError carry the details.
var (
	ErrMissingHeader       = errors.New("webhook: missing header")
	ErrMalformedTimestamp  = errors.New("webhook: malformed timestamp")
	ErrTimestampTooOld     = errors.New("webhook: timestamp too old")
	ErrTimestampTooNew     = errors.New("webhook: timestamp too new")
	ErrNoMatchingSignature = errors.New("webhook: no matching signature")
)

// MissingHeaderError says which of the three headers was absent or empty.
type MissingHeaderError struct {
	Header string // HeaderID, HeaderTimestamp or HeaderSignature
}

func (e *MissingHeaderError) Error() string {
	return fmt.Sprintf("webhook: missing header %s: the request is not a signed webhook, or something on the way dropped the header", e.Header)
}

// Unwrap makes errors.Is(err, ErrMissingHeader) hold.
func (e *MissingHeaderError) Unwrap() error { return ErrMissingHeader }

// TimestampError reports a timestamp outside the tolerance window.
type TimestampError struct {
	Timestamp time.Time     // from webhook-timestamp
	Now       time.Time     // the verifier's clock when it checked
	Tolerance time.Duration // allowed distance either way
}

// Age is how far the timestamp lies before Now; negative when it lies after.
func (e *TimestampError) Age() time.Duration { return e.Now.Sub(e.Timestamp) }

func (e *TimestampError) Error() string {
	if age := e.Age(); age > 0 {
		return fmt.Sprintf("webhook: timestamp too old: %s in the past, tolerance is %s; the request may be a replay, or the receiver's clock is wrong",
			age, e.Tolerance)
	}
	return fmt.Sprintf("webhook: timestamp too new: %s in the future, tolerance is %s; the sender's or the receiver's clock is wrong",
		e.Timestamp.Sub(e.Now), e.Tolerance)
}

// Unwrap makes errors.Is match ErrTimestampTooOld or ErrTimestampTooNew.
func (e *TimestampError) Unwrap() error {
	if e.Age() > 0 {
		return ErrTimestampTooOld
	}
	return ErrTimestampTooNew
}

// Verifier checks signed messages against one or more secrets or public
// keys. It is safe for concurrent use. Build it with NewVerifier. Printed
// with fmt or logged with slog it shows how many keys of each scheme it
// holds, never the keys.
type Verifier struct {
	keys      verifyKeys
	tolerance time.Duration
	now       func() time.Time
}

// maxV1aChecks bounds the v1a signatures one message may have checked.
// An Ed25519 check costs tens of microseconds, against nanoseconds for an
// HMAC comparison, so a header packed with bogus v1a entries could
// otherwise buy a lot of CPU per request; a sender emits one per active key.
const maxV1aChecks = 16

// Format prints a summary without key material for every verb, %#v
// included, since the default would print the keys' bytes. The value
// receiver covers a dereferenced Verifier too.
func (v Verifier) Format(f fmt.State, _ rune) {
	fmt.Fprint(f, v.String())
}

// String summarises the Verifier without its keys.
func (v Verifier) String() string {
	return fmt.Sprintf("webhook.Verifier{%d %s secret(s), %d %s public key(s), tolerance %s}",
		len(v.keys.hmac), SchemeV1, len(v.keys.pub), SchemeV1a, v.tolerance)
}

// LogValue keeps slog from reflecting over the keys.
func (v Verifier) LogValue() slog.Value { return slog.StringValue(v.String()) }

// Option configures a Verifier.
type Option func(*Verifier)

// WithTolerance sets how far the timestamp may lie in the past or the
// future; it must be positive. The default is DefaultTolerance.
func WithTolerance(d time.Duration) Option { return func(v *Verifier) { v.tolerance = d } }

// WithNow replaces the clock, for tests. nil means time.Now.
func WithNow(now func() time.Time) Option { return func(v *Verifier) { v.now = now } }

// NewVerifier returns a Verifier that accepts a message signed with any of
// secrets: whsec_ secrets (or bare base64) check v1 signatures, whpk_
// public keys check v1a signatures, and the two may be mixed. A whsk_
// signing key is refused: it is the sender's private key, and a receiver
// verifies with its public key. Give it both the old and the new key while
// a rotation is under way, and drop the old one once the sender has stopped
// using it.
func NewVerifier(secrets []string, opts ...Option) (*Verifier, error) {
	keys, err := parseVerifyKeys(secrets)
	if err != nil {
		return nil, fmt.Errorf("webhook: building verifier: %w", err)
	}
	v := &Verifier{keys: keys, tolerance: DefaultTolerance, now: time.Now}
	for _, o := range opts {
		o(v)
	}
	if v.tolerance <= 0 {
		return nil, fmt.Errorf("webhook: building verifier: tolerance must be positive, got %s", v.tolerance)
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v, nil
}

// Verify is a one-off NewVerifier(secrets).Verify(headers, body) with the
// default tolerance and the real clock.
func Verify(headers http.Header, body []byte, secrets ...string) error {
	v, err := NewVerifier(secrets)
	if err != nil {
		return err
	}
	return v.Verify(headers, body)
}

// Verify returns nil when headers carry a timestamp within the tolerance and
// at least one signature of body that matches one of the keys: a v1
// signature checked against the whsec_ secrets, or a v1a signature checked
// against the whpk_ public keys (the first 16 v1a signatures at most). body
// must be the raw request body, before any parsing. Signatures of a scheme
// the Verifier holds no key for, or of versions it does not know, are
// skipped, so a sender can add a new scheme alongside.
//
// The error wraps one of ErrMissingHeader, ErrMalformedTimestamp,
// ErrTimestampTooOld, ErrTimestampTooNew or ErrNoMatchingSignature, and
// never contains a secret or an expected signature.
func (v *Verifier) Verify(headers http.Header, body []byte) error {
	id := firstHeader(headers, HeaderID)
	if id == "" {
		return &MissingHeaderError{Header: HeaderID}
	}
	unix := firstHeader(headers, HeaderTimestamp)
	if unix == "" {
		return &MissingHeaderError{Header: HeaderTimestamp}
	}
	sigValues := headerValues(headers, HeaderSignature)
	if strings.TrimSpace(strings.Join(sigValues, "")) == "" {
		return &MissingHeaderError{Header: HeaderSignature}
	}

	ts, err := parseUnix(unix)
	if err != nil {
		return err
	}
	now := v.now()
	if now.Sub(ts) > v.tolerance || ts.Sub(now) > v.tolerance {
		return &TimestampError{Timestamp: ts, Now: now, Tolerance: v.tolerance}
	}

	// The header's own digits are hashed, and parseUnix accepted only the
	// canonical form, so they are the digits the sender hashed.
	expected := make([][]byte, len(v.keys.hmac))
	for i, k := range v.keys.hmac {
		expected[i] = mac(k, id, unix, body)
	}
	var content []byte // built on the first v1a signature there is a key for
	seen, v1, v1a, v1aChecked := 0, 0, 0, 0
	for _, value := range sigValues {
		for _, field := range strings.Fields(value) {
			seen++
			version, enc, ok := strings.Cut(field, ",")
			if !ok {
				continue
			}
			switch Scheme(version) {
			case SchemeV1:
				v1++
				got, err := base64.StdEncoding.Strict().DecodeString(enc)
				if err != nil || len(got) != sha256.Size {
					continue
				}
				for _, want := range expected {
					if hmac.Equal(got, want) {
						return nil
					}
				}
			case SchemeV1a:
				v1a++
				if len(v.keys.pub) == 0 || v1aChecked == maxV1aChecks {
					continue
				}
				got, err := base64.StdEncoding.Strict().DecodeString(enc)
				if err != nil || len(got) != ed25519.SignatureSize {
					continue
				}
				v1aChecked++
				if content == nil {
					content = signedContent(id, unix, body)
				}
				for _, pub := range v.keys.pub {
					if ed25519.Verify(pub, content, got) {
						return nil
					}
				}
			}
		}
	}
	return fmt.Errorf("%w: none of the %d signatures in %s (%d of them %s, %d %s) matches the %d secret(s) and %d public key(s) tried; the body was altered (verify the raw bytes, before parsing) or the key is wrong",
		ErrNoMatchingSignature, seen, HeaderSignature, v1, SchemeV1, v1a, SchemeV1a, len(v.keys.hmac), len(v.keys.pub))
}

// parseUnix accepts only canonical decimal unix seconds. A "+" sign or
// leading zeros would parse to the same time but hash differently from what
// the sender signed, so they are refused up front with a clear error.
func parseUnix(s string) (time.Time, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s {
		return time.Time{}, fmt.Errorf("%w: %s is %q, want whole unix seconds in decimal", ErrMalformedTimestamp, HeaderTimestamp, clip(s))
	}
	// time.Unix wraps around for seconds this far out, turning a timestamp
	// in the far future into one in the past. Clamping keeps the direction;
	// either bound is centuries beyond any tolerance a Duration can hold.
	const bound = 1 << 62
	n = max(-bound, min(n, bound))
	return time.Unix(n, 0), nil
}

// headerValues reads a header under its canonical key and, failing that,
// under the lower-case key, for header maps built by hand (from a queue
// message or a serverless event) rather than by net/http.
func headerValues(h http.Header, name string) []string {
	if vs := h.Values(name); len(vs) > 0 {
		return vs
	}
	return h[name]
}

func firstHeader(h http.Header, name string) string {
	if vs := headerValues(h, name); len(vs) > 0 {
		return strings.TrimSpace(vs[0])
	}
	return ""
}

// clip bounds attacker-supplied text before it goes into an error.
func clip(s string) string {
	const limit = 32
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
