package api

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/hymical/hymical/sdk/boundtext"
	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/storage"
)

// Bounds on what a caller may store. They keep one request from writing
// rows that are slow to fan out over or awkward to show.
const (
	maxDescriptionBytes = endpoint.MaxDescriptionBytes
	maxListEntries      = endpoint.MaxListEntries
	maxConfigEntries    = 64
	maxConfigKeyBytes   = 128
	maxConfigValueBytes = 4096
	maxIdempotencyKey   = 255
	maxOperatorBytes    = storage.MaxOperatorBytes
	maxIDParamBytes     = 128
)

// namePattern is what a form id and an event type may look like. No ':' so
// a form id can be joined into an idempotency scope without ambiguity.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkFormID(field, v string) error {
	if !namePattern.MatchString(v) {
		return refuse(apiwire.CodeInvalidFormID, "%s %q is not a form id: use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", field, clip(v))
	}
	return nil
}

func checkEventType(field, v string) error {
	if !namePattern.MatchString(v) {
		return refuse(apiwire.CodeInvalidEventType, "%s %q is not an event type: use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit, e.g. form.published", field, clip(v))
	}
	return nil
}

// checkEndpointURL checks a URL before any plugin sees it, by the rules
// the console and the portal use too (endpoint.CheckURL), answered in the
// API's code; only a masked URL's advice is the API's own.
func checkEndpointURL(raw string) error {
	err := endpoint.CheckURL(raw)
	var fe *endpoint.FieldError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, endpoint.ErrMaskedURL):
		return refuse(apiwire.CodeInvalidURL, "url holds %q where a secret was: it is a URL as the API shows it, with its secrets hidden; send the real URL (or leave url out of a PATCH to keep the stored one)", redact.Mask)
	case errors.As(err, &fe):
		return refuse(apiwire.CodeInvalidURL, "%s", fe.Message)
	}
	return err
}

// normaliseList checks a list of ids or types, dropping repeats.
func normaliseList(field string, in []string, check func(field, v string) error) ([]string, error) {
	if len(in) > maxListEntries {
		return nil, refuse(apiwire.CodeInvalidRequest, "%s has %d entries; the limit is %d", field, len(in), maxListEntries)
	}
	out := make([]string, 0, len(in))
	seen := map[string]bool{}
	for i, v := range in {
		if err := check(fmt.Sprintf("%s[%d]", field, i), v); err != nil {
			return nil, err
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}

func checkConfig(cfg map[string]string) error {
	if len(cfg) > maxConfigEntries {
		return refuse(apiwire.CodeInvalidRequest, "config has %d entries; the limit is %d", len(cfg), maxConfigEntries)
	}
	for k, v := range cfg {
		if k == "" || len(k) > maxConfigKeyBytes {
			return refuse(apiwire.CodeInvalidRequest, "config key %q must be 1 to %d bytes", clip(k), maxConfigKeyBytes)
		}
		if len(v) > maxConfigValueBytes {
			return refuse(apiwire.CodeInvalidRequest, "config value of %q is %d bytes; the limit is %d", clip(k), len(v), maxConfigValueBytes)
		}
	}
	return nil
}

func checkDescription(d string) error {
	if len(d) > maxDescriptionBytes {
		return refuse(apiwire.CodeInvalidRequest, "description is %d bytes; the limit is %d", len(d), maxDescriptionBytes)
	}
	return nil
}

// checkIdempotencyKey allows printable ASCII only, so the key is safe to
// store and log and cannot smuggle a separator into its scope.
func checkIdempotencyKey(k string) error {
	if len(k) > maxIdempotencyKey {
		return refuse(apiwire.CodeInvalidIdempotencyKey, "the %s header is %d bytes; the limit is %d (a UUID is plenty)", HeaderIdempotencyKey, len(k), maxIdempotencyKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return refuse(apiwire.CodeInvalidIdempotencyKey, "the %s header may hold only printable ASCII without spaces; use a UUID or similar", HeaderIdempotencyKey)
		}
	}
	return nil
}

// operatorActor is the replay audit's actor: "api", plus the operator the
// Hymical-Operator header names, kept to printable characters that cannot
// forge a log line or another field, and cut to maxOperatorBytes
// (storage.OperatorName).
func operatorActor(header string) string {
	op := storage.OperatorName(header)
	if op == "" {
		return "api"
	}
	return "api:" + op
}

// clip shortens a caller's value for quoting in an error message.
func clip(s string) string { return boundtext.Bound(s, 64) }
