// Package redact is the one rule for keeping secrets out of what Hymical
// shows and what its plugins say: logs, traces, API answers, console pages,
// CLI output, config dumps, error text and a transport's outcome. A value
// is hidden when its name says it is a secret; a URL's credentials (its
// whole user:password@, since a bare token often stands where the user name
// goes) and its secret-named query and fragment parameters are hidden
// wherever a URL is shown, and Text finds the URLs inside free text, such
// as an error a transport plugin returned. Hide and Replace hide known
// values, such as a plugin's password, wherever text quotes them.
//
// It is public SDK on purpose: the server masks with it, and a transport
// plugin that hides its own secrets with it follows the same rule, so what
// one side hides the other cannot show. It lives in the SDK module because
// that is the side the server may import; it imports only the standard
// library.
//
// Masking is for showing only: what is stored and used to deliver is the
// URL as given, and a masked URL must never be written back (see
// HoldsMask).
package redact

import (
	"net/url"
	"slices"
	"strings"
)

// Mask replaces a hidden value.
const Mask = "[redacted]"

// What URLParts reports it hid.
const (
	// PartUserinfo is a URL's user:password@ (or user@), hidden whole.
	PartUserinfo = "userinfo"
	// PartQuery and PartFragment prefix the name of a hidden parameter:
	// "query:token", "fragment:access_token".
	PartQuery    = "query:"
	PartFragment = "fragment:"
)

// secretParts hide every name that contains one of them ("api_key",
// "x-hub-signature-256", "access_token").
var secretParts = []string{"secret", "token", "password", "passwd", "credential", "key", "signature"}

// secretWords hide a name that is one of them or holds one as a word
// between separators ("sig", "x-sig", "pw_hash", "session_id"); as
// substrings they would catch ordinary names ("design", "author",
// "passenger", "phash").
var secretWords = []string{
	"sig", "auth", "authorization", "jwt", "pass", "pw", "pwd", "hash", "hmac",
	"session", "sessionid", "sessid", "jsessionid", "phpsessid",
}

// secretNames hide only a name that is exactly one of them: "code" is the
// key of an Azure Functions URL, but as a word it would catch "zip_code"
// and "error_code".
var secretNames = []string{"code"}

// SecretName reports whether a setting or parameter of this name holds a
// secret: its name contains one of secretParts, holds one of secretWords
// as a word, or is one of secretNames (all case-insensitive).
func SecretName(name string) bool {
	n := strings.ToLower(name)
	if slices.Contains(secretNames, n) {
		return true
	}
	for _, s := range secretParts {
		if strings.Contains(n, s) {
			return true
		}
	}
	for _, w := range strings.FieldsFunc(n, func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') }) {
		if slices.Contains(secretWords, w) {
			return true
		}
	}
	return false
}

// Value is v as it may be shown under the name key.
func Value(key, v string) string {
	if v == "" {
		return v
	}
	if SecretName(key) {
		return Mask
	}
	return URL(v)
}

// Map applies Value to every entry, returning a new map.
func Map(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = Value(k, v)
	}
	return out
}

// URL hides the credentials and secret-named parameters of a URL. Text
// that is not a URL with a scheme comes back unchanged.
func URL(s string) string {
	masked, _ := URLParts(s)
	return masked
}

// URLParts is URL, also saying what it hid, in the order the parts appear
// in the URL: PartUserinfo, then PartQuery or PartFragment followed by the
// parameter's name. Everything else is kept byte for byte, so what is shown
// is the stored URL with only the secrets replaced. parts is nil when
// nothing was hidden.
func URLParts(s string) (masked string, parts []string) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || !isScheme(scheme) {
		return s, nil
	}
	prefix := scheme + "://"
	if _, err := url.Parse(s); err != nil {
		// A URL that does not parse may have a password holding a '/',
		// '?' or '#' (postgres://u:pa/ss@h): all before its last '@' is
		// taken for credentials.
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			prefix += Mask + "@"
			parts = append(parts, PartUserinfo)
			rest = rest[at+1:]
		}
	}
	tail, hid := maskRest(rest)
	parts = append(parts, hid...)
	if len(parts) == 0 {
		return s, nil
	}
	return prefix + tail, parts
}

// maskRest masks what follows a URL's "scheme://", split as net/url splits
// it: the fragment at the first '#', the query at the first '?' before it,
// the authority up to the first '/', and the user information up to the
// authority's last '@'. The rest is kept byte for byte.
func maskRest(rest string) (string, []string) {
	var parts []string
	rest, fragment, hasFragment := strings.Cut(rest, "#")
	rest, query, hasQuery := strings.Cut(rest, "?")
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	var b strings.Builder
	b.Grow(len(rest) + len(query) + len(fragment) + 2*len(Mask))
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		b.WriteString(Mask)
		b.WriteString(authority[at:])
		parts = append(parts, PartUserinfo)
	} else {
		b.WriteString(authority)
	}
	b.WriteString(path)
	if hasQuery {
		b.WriteByte('?')
		q, hid := maskParams(query, PartQuery)
		b.WriteString(q)
		parts = append(parts, hid...)
	}
	if hasFragment {
		b.WriteByte('#')
		f, hid := maskParams(fragment, PartFragment)
		b.WriteString(f)
		parts = append(parts, hid...)
	}
	return b.String(), parts
}

// maskParams replaces the value of each secret-named name=value pair of a
// raw query (or a fragment written like one), keeping the rest as written.
// Pairs are split at '&' and at ';', which some receivers still take for a
// separator.
func maskParams(raw, prefix string) (string, []string) {
	if !strings.Contains(raw, "=") {
		return raw, nil
	}
	var b strings.Builder
	var hid []string
	for raw != "" {
		pair, sep := raw, ""
		if i := strings.IndexAny(raw, "&;"); i >= 0 {
			pair, sep, raw = raw[:i], raw[i:i+1], raw[i+1:]
		} else {
			raw = ""
		}
		k, v, ok := strings.Cut(pair, "=")
		name := k
		if u, err := url.QueryUnescape(k); err == nil {
			name = u
		}
		if ok && v != "" && SecretName(name) {
			pair = k + "=" + Mask
			hid = append(hid, prefix+name)
		}
		b.WriteString(pair)
		b.WriteString(sep)
	}
	if hid == nil {
		return b.String(), nil
	}
	return b.String(), hid
}

// isScheme reports whether s is a URL scheme: a letter, then letters,
// digits, '+', '-' or '.'.
func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// Text hides the secrets of every URL in free text: an error message
// (Go's *url.Error quotes the whole URL), a plugin's log line, an attempt's
// recorded error. A URL runs from its scheme to the first space, quote,
// angle bracket, backquote or backslash, less the punctuation that ends a
// sentence.
func Text(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		start := i
		for start > 0 && schemeByte(s[start-1]) {
			start--
		}
		// A scheme starts with a letter; skip leading digits and signs.
		for start < i && !letter(s[start]) {
			start++
		}
		end := i + len("://")
		for end < len(s) && !strings.ContainsRune(" \t\r\n\"'<>`\\", rune(s[end])) {
			end++
		}
		// Punctuation that ends a sentence is not taken for the URL's.
		stop := end
		for stop > i+len("://") && strings.IndexByte(".,;:!?)", s[stop-1]) >= 0 {
			stop--
		}
		b.WriteString(s[:start])
		if start == i {
			// No scheme: not a URL.
			b.WriteString(s[start:stop])
		} else {
			b.WriteString(URL(s[start:stop]))
		}
		b.WriteString(s[stop:end])
		s = s[end:]
	}
}

func letter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func schemeByte(c byte) bool {
	return letter(c) || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

// HoldsMask reports whether a URL carries Mask where URL would have put
// it: as its user information, or as the value of a secret-named query or
// fragment parameter. Such a URL is a masked one sent back, and storing it
// would replace a real secret with the mask.
func HoldsMask(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return strings.Contains(s, Mask)
	}
	if u.User != nil {
		if p, _ := u.User.Password(); u.User.Username() == Mask || p == Mask || strings.Contains(u.User.String(), url.PathEscape(Mask)) {
			return true
		}
	}
	for _, raw := range []string{u.RawQuery, u.EscapedFragment()} {
		q, _ := url.ParseQuery(raw)
		for k, vs := range q {
			for _, v := range vs {
				if SecretName(k) && v == Mask {
					return true
				}
			}
		}
	}
	return false
}
