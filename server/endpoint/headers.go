package endpoint

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/hymical/hymical/storage"
)

// Bounds of an endpoint's custom headers. They keep a request's headers
// well under the 8 KiB to 16 KiB that common receivers and proxies accept
// in all (beyond it they answer 431, a failure every attempt would repeat).
const (
	MaxHeaders         = 20
	MaxHeaderNameBytes = 128
	MaxHeaderValue     = 4096
	MaxHeadersBytes    = 8192
)

// ErrInvalidHeader: a custom header the server will not send. The message
// names the header and what to do, never its value.
var ErrInvalidHeader = errors.New("invalid custom header")

// reservedReason is why name may not be a custom header; "" when it may.
func reservedReason(name string) string {
	const hop = "it is a hop-by-hop header, which describes one connection and is not forwarded"
	switch lower := strings.ToLower(name); {
	case strings.HasPrefix(lower, "webhook-"):
		return "webhook-* headers carry the delivery id, timestamp and signature that receivers verify"
	case strings.HasPrefix(lower, "proxy-"):
		return "proxy-* headers are meant for a proxy on the way, not for the receiver"
	case lower == "connection", lower == "keep-alive", lower == "te", lower == "trailer",
		lower == "transfer-encoding", lower == "upgrade":
		return hop
	case lower == "host":
		return "the transport sets it from the endpoint's URL"
	case lower == "content-length":
		return "the transport sets it from the body"
	case lower == "content-type":
		return "the body is JSON and the transport says so"
	case lower == "traceparent", lower == "tracestate":
		return "the server sets it to the attempt's trace, so that the receiver's spans join it"
	}
	return ""
}

// CheckHeaders checks custom headers before they are stored: names are
// HTTP tokens (RFC 9110), none reserved, none twice (ignoring case);
// values hold no control character (no CR or LF, which would start another
// header) and no leading or trailing white space; and the set is within
// the bounds above. Errors wrap ErrInvalidHeader and never hold a value.
func CheckHeaders(hs []storage.Header) error {
	if len(hs) > MaxHeaders {
		return fmt.Errorf("%w: %d custom headers given, at most %d are allowed: remove %d", ErrInvalidHeader, len(hs), MaxHeaders, len(hs)-MaxHeaders)
	}
	seen := make(map[string]bool, len(hs))
	total := 0
	for i, h := range hs {
		switch {
		case h.Name == "":
			return fmt.Errorf("%w: custom header %d has no name: write it as Name: value", ErrInvalidHeader, i+1)
		case len(h.Name) > MaxHeaderNameBytes:
			return fmt.Errorf("%w: the name of custom header %d is %d bytes long, at most %d are allowed", ErrInvalidHeader, i+1, len(h.Name), MaxHeaderNameBytes)
		case !httpguts.ValidHeaderFieldName(h.Name):
			return fmt.Errorf("%w: %q is not a valid HTTP header name: use letters, digits and !#$%%&'*+-.^_`|~ only, without spaces or a colon", ErrInvalidHeader, h.Name)
		}
		if why := reservedReason(h.Name); why != "" {
			return fmt.Errorf("%w: header %s cannot be set per endpoint: %s; remove it", ErrInvalidHeader, h.Name, why)
		}
		lower := strings.ToLower(h.Name)
		if seen[lower] {
			return fmt.Errorf("%w: header %s is given twice (names ignore case): keep one, or join the values with a comma", ErrInvalidHeader, h.Name)
		}
		seen[lower] = true
		v := h.Reveal()
		switch {
		case v == "":
			return fmt.Errorf("%w: header %s has an empty value: give a value, or remove it", ErrInvalidHeader, h.Name)
		case len(v) > MaxHeaderValue:
			return fmt.Errorf("%w: the value of header %s is %d bytes long, at most %d are allowed", ErrInvalidHeader, h.Name, len(v), MaxHeaderValue)
		case !httpguts.ValidHeaderFieldValue(v) || strings.ContainsAny(v, "\r\n\x00"):
			return fmt.Errorf("%w: the value of header %s holds a line break or another control character: write it on one line of printable text", ErrInvalidHeader, h.Name)
		case strings.TrimSpace(v) != v:
			return fmt.Errorf("%w: the value of header %s starts or ends with white space, which HTTP drops: trim it", ErrInvalidHeader, h.Name)
		}
		total += len(h.Name) + len(v)
	}
	if total > MaxHeadersBytes {
		return fmt.Errorf("%w: the custom headers add up to %d bytes of names and values, at most %d are allowed: shorten or remove some", ErrInvalidHeader, total, MaxHeadersBytes)
	}
	return nil
}
