package endpoint

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/hymical/hymical/sdk/boundtext"
	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/storage"
)

// Bounds on what an endpoint may hold, as the API states them.
const (
	MaxURLBytes         = 2048
	MaxDescriptionBytes = 1024
	MaxListEntries      = 100
)

// namePattern is a form id or an event type.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// FieldError says which field of an endpoint is wrong, and how.
type FieldError struct {
	// Field is "url", "form_ids", "event_types" or "description".
	Field   string
	Message string
	// kind, when set, is a sentinel the error also matches, for a face
	// that words that case its own way.
	kind error
}

func (e *FieldError) Error() string { return e.Message }

// ErrField matches every *FieldError with errors.Is.
var ErrField = errors.New("an endpoint field is invalid")

// ErrMaskedURL matches the FieldError of a URL that holds redact.Mask
// where a secret was: a URL copied as a face shows it. Each face says
// how to keep the stored URL in its own words.
var ErrMaskedURL = errors.New("the url holds the mask of a hidden secret")

// Is makes errors.Is(err, ErrField) hold for a FieldError, and
// errors.Is(err, ErrMaskedURL) for a masked URL's.
func (e *FieldError) Is(target error) bool {
	return target == ErrField || (e.kind != nil && target == e.kind)
}

func fieldError(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// CheckFields checks the URL, form ids, event types and description of an
// endpoint that a page of the portal is about to store, normalising its
// lists (repeats dropped). The rules and their words are the API's
// (server/api's checkFields): http(s) with a host, no credentials in the
// URL, names of letters, digits, '.', '_' and '-'. What the transport
// thinks of the target is the plugin's to say, after this.
func CheckFields(e *storage.Endpoint) error {
	if err := CheckURL(e.URL); err != nil {
		return err
	}
	var err error
	if e.FormIDs, err = normalise("form_ids", e.FormIDs, "a form id"); err != nil {
		return err
	}
	if e.EventTypes, err = normalise("event_types", e.EventTypes, "an event type"); err != nil {
		return err
	}
	if len(e.Description) > MaxDescriptionBytes {
		return fieldError("description", "description is %d bytes; the limit is %d", len(e.Description), MaxDescriptionBytes)
	}
	return nil
}

// CheckURL checks an endpoint's URL before any plugin sees it: it must
// parse, be http or https with a host, and carry no user name or password
// (those end up in logs and proxies; the signature is the
// authentication). The URL is never quoted back: its query may hold a
// token.
func CheckURL(raw string) error {
	bad := func(format string, args ...any) error { return fieldError("url", format, args...) }
	if raw == "" {
		return bad("url is required: give the receiver's https:// URL")
	}
	if len(raw) > MaxURLBytes {
		return bad("url is %d bytes long; the limit is %d", len(raw), MaxURLBytes)
	}
	if strings.TrimSpace(raw) != raw {
		return bad("url has leading or trailing white space; remove it")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return bad("url does not parse: %v; give an absolute http:// or https:// URL", err)
	}
	switch {
	case u.Scheme == "":
		return bad("url has no scheme; give an absolute URL starting with https:// (or http://)")
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("url scheme %q is not supported; endpoints take http:// or https:// URLs", boundtext.Bound(u.Scheme, 64))
	case redact.HoldsMask(raw):
		return &FieldError{Field: "url", kind: ErrMaskedURL,
			Message: fmt.Sprintf("url holds %q where a secret was: it is a URL as it is shown, with its secrets hidden; give the real URL", redact.Mask)}
	case u.User != nil:
		return bad("url carries a user name or password; remove it, since credentials in URLs end up in logs and proxies, and let the receiver verify the signature instead")
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return bad("url has no host; write it as https://host/path")
	}
	return nil
}

func normalise(field string, in []string, what string) ([]string, error) {
	if len(in) > MaxListEntries {
		return nil, fieldError(field, "%s has %d entries; the limit is %d", field, len(in), MaxListEntries)
	}
	out := make([]string, 0, len(in))
	seen := map[string]bool{}
	for i, v := range in {
		if !namePattern.MatchString(v) {
			return nil, fieldError(field, "%s[%d] %q is not %s: use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", field, i, boundtext.Bound(v, 64), what)
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}
