package redact

import (
	"slices"
	"testing"
)

// masks hides each value under Mask, as Hide does.
func masks(values ...string) []Replacement {
	var rs []Replacement
	for _, v := range values {
		rs = append(rs, Replacement{Value: v, With: Mask})
	}
	return rs
}

// One table for the rule of values quoted on their own, which the server
// (TextFor over SecretsOf) and the plugins (Hide, transport.ScrubError)
// share.
func TestReplace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
		rs   []Replacement
		want string
	}{
		{"no values", "dial amqp://u:pw@h: refused", nil, "dial amqp://u:pw@h: refused"},
		{"absent", "nothing here", masks("secret"), "nothing here"},
		{"an empty value is skipped", "text", masks(""), "text"},
		{"one value, twice", "pw then pw", masks("pw"), "[redacted] then [redacted]"},
		{"several", "user tok and pass", masks("tok", "pass"), "user [redacted] and [redacted]"},
		{"a value inside another", "abc and abcdef", masks("abc", "abcdef"), "[redacted] and [redacted]"},

		// Escaped as a URL's query or path would carry it, asked for or not.
		{"an escaped form asked for too", "p@ss or p%40ss", masks("p@ss", "p%40ss"), "[redacted] or [redacted]"},
		{"the escaped forms unasked", "p@ss w/rd, p%40ss+w%2Frd, p@ss%20w%2Frd", masks("p@ss w/rd"), "[redacted], [redacted], [redacted]"},
		{"a short value's longer escaped form, anywhere", "xa%20by", masks("a b"), "x[redacted]y"},

		// What an endpoint's URL and settings give (see TestSecretsOf),
		// quoted outside any URL, as written or unescaped.
		{"a token unescaped", "token SECRET+123 refused", masks("SECRET%2B123", "SECRET+123"), "token [redacted] refused"},
		{"a token as written", "token SECRET%2B123 refused", masks("SECRET%2B123", "SECRET+123"), "token [redacted] refused"},
		{"a user and a password", "login carol with pw-LONG failed", masks("carol:pw-LONG", "pw-LONG", "carol"), "login [redacted] with [redacted] failed"},
		{"a settings' password and a URL's", "auth natspass / brokerpass", masks("brokerpass", "u:natspass", "natspass", "u"), "auth [redacted] / [redacted]"},

		// 4 bytes or more: wherever it appears. Shorter: only standing
		// alone, so a one-letter user name does not garble every word.
		{"4 bytes, inside a word", "xxabcdxx", masks("abcd"), "xx[redacted]xx"},
		{"3 bytes, standing alone", "abc x=1 forms.in", masks("abc"), "[redacted] x=1 forms.in"},
		{"3 bytes, inside a word, stays", "abcdef xabc abc1", masks("abc"), "abcdef xabc abc1"},
		{"a one-letter user", "unexpected EOF from u, user u:pw@h", masks("u", "pw"), "unexpected EOF from [redacted], user [redacted]:[redacted]@h"},
		{"a letter beyond ASCII is part of the word", "pwé épw pw", masks("pw"), "pwé épw [redacted]"},
		{"a digit is part of the word", "HTTP 500 after 5 s", masks("5"), "HTTP 500 after [redacted] s"},

		// Overlaps go under one replacement, so no piece of either shows.
		{"two overlapping values", "key abcdef!", masks("abcd", "cdef"), "key [redacted]!"},
		{"side by side, each its own", "abcdwxyz", masks("abcd", "wxyz"), "[redacted][redacted]"},
		{"the With of the value starting first", "got v1,SIG{\"a\":1}", []Replacement{{`{"a":1}`, "[body]"}, {"v1,SIG{", "[header webhook-signature]"}}, "got [header webhook-signature]"},
		{"the longest of those starting together", "id msg_123456", []Replacement{{"msg_", "[short]"}, {"msg_123456", "[header webhook-id]"}}, "id [header webhook-id]"},
		{"a value longer than the text", "short", masks("a value far longer than the text"), "short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Replace(tt.text, tt.rs...); got != tt.want {
				t.Fatalf("Replace(%q, %q)\n = %q\nwant %q", tt.text, tt.rs, got, tt.want)
			}
		})
	}
}

func TestHide(t *testing.T) {
	t.Parallel()
	if got, want := Hide("user tok and pass, pw", "tok", "pass", ""), "user [redacted] and [redacted], pw"; got != want {
		t.Fatalf("Hide = %q, want %q", got, want)
	}
}

func TestSecretsOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		url      string
		settings map[string]string
		want     []string
	}{
		{"none", "https://h/in?x=1", nil, nil},
		{
			"the URL's credentials and secret parameters, and the settings'",
			"https://carol:pw-LONG@h/hook?token=SECRET%2B123&x=1&key=abc",
			map[string]string{"password": "brokerpass", "url": "nats://u:natspass@n:4222", "subject": "forms.in"},
			// Longest first, short ones too: Replace decides where those
			// are hidden.
			[]string{"carol:pw-LONG", "SECRET%2B123", "SECRET+123", "brokerpass", "u:natspass", "natspass", "pw-LONG", "carol", "abc", "u"},
		},
		{"a password that does not parse, and a fragment", "postgres://u:pa%2Fss@db/x#access_token=t", nil,
			[]string{"u:pa%2Fss", "pa%2Fss", "pa/ss", "t", "u"}},
		{"an empty value is none", "https://h/?token=&x=1", map[string]string{"password": ""}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := SecretsOf(tt.url, tt.settings); !slices.Equal(got, tt.want) {
				t.Fatalf("SecretsOf(%q, %v) = %q, want %q", tt.url, tt.settings, got, tt.want)
			}
		})
	}
}

// TextFor is both halves: the URLs in the text, and the secrets quoted
// outside them.
func TestTextFor(t *testing.T) {
	t.Parallel()
	secrets := SecretsOf("https://carol:pw-LONG@h/hook?token=SECRET%2B123&x=1&key=abc", nil)
	for _, tc := range []struct{ in, want string }{
		{`Post "https://carol:pw-LONG@h/hook?token=SECRET%2B123&x=1": EOF`, `Post "https://[redacted]@h/hook?token=[redacted]&x=1": EOF`},
		{"carol's token SECRET+123 to https://h/?key=abc", "[redacted]'s token [redacted] to https://h/?key=[redacted]"},
		{"receiver answered HTTP 500", "receiver answered HTTP 500"},
	} {
		if got := TextFor(tc.in, secrets); got != tc.want {
			t.Errorf("TextFor(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
