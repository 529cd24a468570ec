// Package redact is the one rule for keeping secrets out of what Hymical
// shows: logs, API answers, config dumps and error text. A value is hidden
// when its name says it is a secret, and the password of a URL (and its
// secret-named query parameters) is hidden wherever a URL is shown.
package redact

import (
	"net/url"
	"strings"
)

// Mask replaces a hidden value.
const Mask = "[redacted]"

// SecretName reports whether a setting or parameter of this name holds a secret.
func SecretName(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"secret", "token", "password", "passwd", "credential", "key"} {
		if strings.Contains(n, s) {
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

// URL hides the password and secret-named query parameters of a URL. Text
// that is not a URL with a scheme and a host comes back unchanged.
func URL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		// An unparseable URL may still carry user:password@: cut it out.
		scheme, rest, _ := strings.Cut(s, "://")
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			return scheme + "://" + Mask + "@" + rest[at+1:]
		}
		return s
	}
	changed := false
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
		changed = true
	}
	q := u.Query()
	for k := range q {
		if SecretName(k) {
			q.Set(k, "xxxxx")
			changed = true
		}
	}
	if !changed {
		return s
	}
	u.RawQuery = q.Encode()
	return strings.ReplaceAll(u.String(), "xxxxx", Mask)
}
