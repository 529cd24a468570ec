package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The three headers of a signed message. http.Header canonicalises them
// (Webhook-Id, ...); lookups through Header.Get find either spelling.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// ErrInvalidMessageID is returned (wrapped) by Sign for a message id that
// could not survive the trip in a header and so could never be verified.
var ErrInvalidMessageID = errors.New("webhook: invalid message id")

// Sign returns the value of the webhook-signature header for one message:
// one signature per key, space separated, in the order given, each over
// msgID + "." + unixSeconds + "." + body. The key's prefix picks the scheme:
// a whsec_ secret (or bare base64) signs "v1," + base64(HMAC-SHA256), a
// whsk_ signing key signs "v1a," + base64(Ed25519). Pass the new and the old
// keys during a rotation. ts is truncated to whole seconds.
func Sign(msgID string, ts time.Time, body []byte, secrets ...string) (string, error) {
	if err := checkMessageID(msgID); err != nil {
		return "", err
	}
	keys, err := parseSigningKeys(secrets)
	if err != nil {
		return "", fmt.Errorf("webhook: signing message: %w", err)
	}
	unix := strconv.FormatInt(ts.Unix(), 10)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(k.scheme))
		b.WriteByte(',')
		b.WriteString(base64.StdEncoding.EncodeToString(k.sign(msgID, unix, body)))
	}
	return b.String(), nil
}

// SignHeaders returns the three headers to send with body: webhook-id set to
// msgID, webhook-timestamp to ts in unix seconds, and webhook-signature as
// Sign writes it.
func SignHeaders(msgID string, ts time.Time, body []byte, secrets ...string) (http.Header, error) {
	sig, err := Sign(msgID, ts, body, secrets...)
	if err != nil {
		return nil, err
	}
	h := make(http.Header, 3)
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return h, nil
}

// mac computes the raw HMAC-SHA256 over the signed content. unix is the
// timestamp exactly as it travels in the header, so sender and receiver hash
// the same bytes.
func mac(key []byte, msgID, unix string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msgID))
	h.Write([]byte{'.'})
	h.Write([]byte(unix))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// signedContent is the bytes an Ed25519 signature covers, the same content
// the HMAC is computed over; Ed25519 needs it whole, not streamed.
func signedContent(msgID, unix string, body []byte) []byte {
	b := make([]byte, 0, len(msgID)+len(unix)+len(body)+2)
	b = append(b, msgID...)
	b = append(b, '.')
	b = append(b, unix...)
	b = append(b, '.')
	return append(b, body...)
}

// checkMessageID rejects ids a receiver would never see intact: an empty one
// reads as a missing header, surrounding white space is trimmed by HTTP
// parsers, and control characters are not allowed in a header value.
func checkMessageID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: it is empty; pass the delivery id", ErrInvalidMessageID)
	}
	if strings.TrimSpace(id) != id {
		return fmt.Errorf("%w: %q has leading or trailing white space, which HTTP would strip", ErrInvalidMessageID, id)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %q contains a control character, which a header cannot carry", ErrInvalidMessageID, id)
		}
	}
	return nil
}
