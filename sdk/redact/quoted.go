package redact

import (
	"cmp"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// minQuoted is the shortest value Replace hides wherever it appears. A
// shorter one is hidden only where it stands alone: inside a word ("pw" in
// "pwd", a user "u" in "unexpected") it is far more often part of the word
// than the secret, and hiding it there would garble the text.
const minQuoted = 4

// A Replacement is a value to hide in text and what to show in its place.
type Replacement struct {
	Value string
	With  string
}

// Replace hides every replacement's Value wherever text quotes it, showing
// its With instead. It is the one rule for values quoted on their own,
// outside any URL, on both sides of the plugin boundary:
//
//   - a value is looked for as given and as a URL's query or path would
//     carry it escaped, since a client library's error may quote the URL it
//     was given or one it rebuilt (a password "p@ss" shows as p%40ss);
//   - a value (or escaped form) of 4 bytes or more is hidden wherever it
//     appears; a shorter one where it stands alone, with no letter or digit
//     right before or after it;
//   - where hidden values overlap, or one holds another, the whole run goes
//     under one replacement, the With of the value that starts first (the
//     longest of those, then the first given), so no piece of either shows.
//
// An empty Value is skipped.
func Replace(text string, rs ...Replacement) string {
	type hit struct {
		start, end int
		with       string
	}
	var hits []hit
	for _, r := range rs {
		// A value longer than the text is not in it, and neither are its
		// escaped forms, which are no shorter: escaping a large body for
		// a short error would be wasted.
		if r.Value == "" || len(r.Value) > len(text) {
			continue
		}
		forms := []string{r.Value}
		for _, f := range []string{url.QueryEscape(r.Value), url.PathEscape(r.Value)} {
			if !slices.Contains(forms, f) {
				forms = append(forms, f)
			}
		}
		for _, form := range forms {
			for off := 0; off+len(form) <= len(text); {
				i := strings.Index(text[off:], form)
				if i < 0 {
					break
				}
				start, end := off+i, off+i+len(form)
				if len(form) >= minQuoted || standsAlone(text, start, end) {
					hits = append(hits, hit{start, end, r.With})
					off = end
				} else {
					off = start + 1
				}
			}
		}
	}
	if len(hits) == 0 {
		return text
	}
	slices.SortStableFunc(hits, func(a, b hit) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(b.end, a.end)) })
	var b strings.Builder
	b.Grow(len(text))
	pos, cur := 0, hits[0]
	for _, h := range hits[1:] {
		if h.start < cur.end {
			cur.end = max(cur.end, h.end)
			continue
		}
		b.WriteString(text[pos:cur.start])
		b.WriteString(cur.with)
		pos, cur = cur.end, h
	}
	b.WriteString(text[pos:cur.start])
	b.WriteString(cur.with)
	b.WriteString(text[cur.end:])
	return b.String()
}

// Hide replaces every one of secrets in text with Mask, by the rule of
// Replace: a plugin hides its own password this way before an error leaves
// it, and the server the secrets SecretsOf lists.
func Hide(text string, secrets ...string) string {
	rs := make([]Replacement, 0, len(secrets))
	for _, s := range secrets {
		rs = append(rs, Replacement{Value: s, With: Mask})
	}
	return Replace(text, rs...)
}

// standsAlone reports whether text[start:end] has no letter or digit right
// before or right after it.
func standsAlone(text string, start, end int) bool {
	word := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }
	if r, _ := utf8.DecodeLastRuneInString(text[:start]); start > 0 && word(r) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(text[end:])
	return end == len(text) || !word(r)
}

// SecretsOf lists the secret values a URL and a set of settings hold, as
// URL and Map would hide them: the URL's user name and password, the values
// of its secret-named query and fragment parameters (as written and
// unescaped), the values of secret-named settings and the secrets of
// setting values that are URLs. TextFor hides them wherever they appear.
// The list is sorted longest first, without repeats.
func SecretsOf(rawURL string, settings map[string]string) []string {
	var out []string
	add := func(vs ...string) {
		for _, v := range vs {
			if v != "" {
				out = append(out, v)
			}
		}
	}
	urlSecrets := func(s string) {
		if _, parts := URLParts(s); parts == nil {
			return
		}
		creds, rest := credentials(s)
		if creds != "" {
			user, pass, _ := strings.Cut(creds, ":")
			add(creds, user, pass)
			if u, err := url.PathUnescape(user); err == nil {
				add(u)
			}
			if p, err := url.PathUnescape(pass); err == nil {
				add(p)
			}
		}
		rest, fragment, _ := strings.Cut(rest, "#")
		_, query, _ := strings.Cut(rest, "?")
		for _, raw := range []string{query, fragment} {
			for _, pair := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
				k, v, _ := strings.Cut(pair, "=")
				name, err := url.QueryUnescape(k)
				if err != nil {
					name = k
				}
				if SecretName(name) {
					add(v)
					if u, err := url.QueryUnescape(v); err == nil {
						add(u)
					}
				}
			}
		}
	}
	urlSecrets(rawURL)
	for k, v := range settings {
		if SecretName(k) {
			add(v)
			continue
		}
		urlSecrets(v)
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b)) })
	return slices.Compact(out)
}

// TextFor is Text, and also hides every one of secrets (from SecretsOf)
// wherever Hide finds it: a plugin may quote a token or a password on its
// own, outside any URL.
func TextFor(text string, secrets []string) string {
	return Hide(Text(text), secrets...)
}

// credentials splits a URL's user information, as URLParts finds it, from
// what follows it (the host onwards); creds is empty when there is none.
func credentials(s string) (creds, rest string) {
	_, rest, _ = strings.Cut(s, "://")
	at := -1
	if _, err := url.Parse(s); err != nil {
		at = strings.LastIndexByte(rest, '@')
	} else {
		authority, _, _ := strings.Cut(rest, "#")
		authority, _, _ = strings.Cut(authority, "?")
		authority, _, _ = strings.Cut(authority, "/")
		at = strings.LastIndexByte(authority, '@')
	}
	if at < 0 {
		return "", rest
	}
	return rest[:at], rest[at+1:]
}
