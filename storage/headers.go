package storage

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/hymical/hymical/storage/secretbox"
)

// Header is a custom header an endpoint sends with every attempt. Its
// value is often a credential the receiver checks (an API key, a basic
// auth pair), so it is kept like a signing secret: sealed at rest, and
// String, GoString, LogValue and MarshalJSON show the name only. Reveal
// reads the value, for the send.
type Header struct {
	Name  string
	value string
}

// NewHeader is the header name: value.
func NewHeader(name, value string) Header { return Header{Name: name, value: value} }

// Reveal returns the header's value.
func (h Header) Reveal() string { return h.value }

// String shows the name and hides the value.
func (h Header) String() string { return h.Name + ": [redacted]" }

// GoString keeps %#v from printing the value.
func (h Header) GoString() string { return "storage.Header{" + h.String() + "}" }

// LogValue keeps slog from printing the value, whatever the handler.
func (h Header) LogValue() slog.Value { return slog.StringValue(h.String()) }

// MarshalJSON refuses to put the value into JSON by accident.
func (h Header) MarshalJSON() ([]byte, error) { return json.Marshal(h.String()) }

// MaxHeaders is the most custom headers the store keeps for an endpoint;
// the server may allow fewer.
const MaxHeaders = 64

// validateHeaders is the store's rule for an endpoint's headers: each has
// a name, and no two names are the same ignoring case, since HTTP treats
// them as one header and which value wins would be an accident.
func validateHeaders(hs []Header) error {
	if len(hs) > MaxHeaders {
		return fmt.Errorf("%w: endpoint has %d custom headers, at most %d are allowed", ErrInvalid, len(hs), MaxHeaders)
	}
	seen := make(map[string]bool, len(hs))
	for _, h := range hs {
		if strings.TrimSpace(h.Name) == "" {
			return fmt.Errorf("%w: endpoint custom header has no name", ErrInvalid)
		}
		k := strings.ToLower(h.Name)
		if seen[k] {
			return fmt.Errorf("%w: endpoint custom header %q is given twice (names ignore case): keep one", ErrInvalid, h.Name)
		}
		seen[k] = true
	}
	return nil
}

type storedHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// noHeaders is the column text of an endpoint without custom headers. It
// is never sealed: it hides nothing, and rows written before the column
// existed hold it whatever the key.
const noHeaders = "[]"

// headersContext binds a sealed header set to its endpoint and to the
// headers column, so neither another endpoint's sealed headers nor a
// sealed secrets column copied into it opens.
func headersContext(id string) string { return id + "#headers" }

// EncodeHeaders is the column text of the custom headers of endpoint id:
// "[]" when there are none, a JSON array while secrets are kept in
// plaintext, otherwise a JSON string holding a secretbox envelope.
func (c SecretsCodec) EncodeHeaders(id string, hs []Header) (string, error) {
	if len(hs) == 0 {
		return noHeaders, nil
	}
	out := make([]storedHeader, len(hs))
	for i, h := range hs {
		out[i] = storedHeader{Name: h.Name, Value: h.value}
	}
	plain, err := json.Marshal(out)
	if err != nil || c.Box == nil {
		return string(plain), err
	}
	sealed, err := c.Box.Seal(plain, headersContext(id))
	if err != nil {
		return "", fmt.Errorf("endpoint %s: seal custom headers: %w", id, err)
	}
	b, err := json.Marshal(sealed)
	return string(b), err
}

// DecodeHeaders reads what EncodeHeaders wrote. Like Decode, it never
// falls back: headers in plaintext with a key configured, or sealed under
// another key, are ErrSecretsKey.
func (c SecretsCodec) DecodeHeaders(id, column string) ([]Header, error) {
	column = strings.TrimSpace(column)
	if column == noHeaders || column == "" {
		return []Header{}, nil
	}
	plain, err := c.open(id, column, headersContext(id), headersColumn)
	if err != nil {
		return nil, err
	}
	var in []storedHeader
	// The decode error is not wrapped: its text could quote the value.
	if err := json.Unmarshal(plain, &in); err != nil {
		return nil, fmt.Errorf("endpoint %s: the custom headers column is not a JSON list of name and value", id)
	}
	out := make([]Header, len(in))
	for i, h := range in {
		out[i] = Header{Name: h.Name, value: h.Value}
	}
	return out, nil
}

// ResealHeaders is the headers column of endpoint id sealed under to,
// read with c.
func (c SecretsCodec) ResealHeaders(id, column string, to *secretbox.Box) (string, error) {
	hs, err := c.DecodeHeaders(id, column)
	if err != nil {
		return "", err
	}
	return SecretsCodec{Box: to}.EncodeHeaders(id, hs)
}
