package redact

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestValue(t *testing.T) {
	tests := []struct{ key, in, want string }{
		{"url", "postgres://u:s3cret@db:5432/x?sslmode=disable", "postgres://[redacted]@db:5432/x?sslmode=disable"},
		{"url", "redis://:s3cret@r:6379/0", "redis://[redacted]@r:6379/0"},
		{"url", "nats://u@n:4222", "nats://[redacted]@n:4222"},
		{"url", "nats://n:4222", "nats://n:4222"},
		{"url", "https://h/x?token=s3cret&a=1", "https://h/x?token=[redacted]&a=1"},
		{"api_key", "s3cret", "[redacted]"},
		{"Password", "s3cret", "[redacted]"},
		{"subject", "forms.submissions", "forms.submissions"},
		{"url", "redis://u:s3cret@[bad", "redis://[redacted]@[bad"},
		{"token", "", ""},
	}
	for _, tc := range tests {
		if got := Value(tc.key, tc.in); got != tc.want {
			t.Errorf("Value(%q, %q) = %q, want %q", tc.key, tc.in, got, tc.want)
		}
	}
}

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"api_token": true, "client_secret": true, "Password": true, "signing_key": true, "APIKEY": true,
		"db_passwd": true, "credentials_file": true, "X-Amz-Signature": true, "sig": true,
		"url": false, "region": false, "timeout": false, "design": false, "x": false,
	} {
		if got := SecretName(name); got != want {
			t.Errorf("SecretName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestURLParts(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		parts    []string
	}{
		{"https://user:pw@127.0.0.1:8080/hook?token=SECRET123&x=1", "https://[redacted]@127.0.0.1:8080/hook?token=[redacted]&x=1", []string{"userinfo", "query:token"}},
		// A bare token where the user name goes is as secret as a password.
		{"https://TOKEN@hooks.example/in", "https://[redacted]@hooks.example/in", []string{"userinfo"}},
		// Order, repeats and the other parameters' encoding are kept.
		{"https://h/p?b=%20&api_key=k1&a=1&api_key=k2", "https://h/p?b=%20&api_key=[redacted]&a=1&api_key=[redacted]", []string{"query:api_key", "query:api_key"}},
		{"https://h/p?access%5Ftoken=t", "https://h/p?access%5Ftoken=[redacted]", []string{"query:access_token"}},
		{"https://h/p?token=&token", "https://h/p?token=&token", nil},
		{"https://h/p?a=1;token=t&", "https://h/p?a=1;token=[redacted]&", []string{"query:token"}},
		{"https://h/cb#access_token=t&state=s", "https://h/cb#access_token=[redacted]&state=s", []string{"fragment:access_token"}},
		{"https://h/p#section", "https://h/p#section", nil},
		// An '@' after the authority is no credential.
		{"https://h/users/@me?x=a@b", "https://h/users/@me?x=a@b", nil},
		// A password with '/' or '?' does not parse; it is still hidden.
		{"postgres://u:pa/ss@db/x", "postgres://[redacted]@db/x", []string{"userinfo"}},
		{"postgres://u:pa?ss@db/x?password=p", "postgres://[redacted]@db/x?password=[redacted]", []string{"userinfo", "query:password"}},
		{"https://h.example/in", "https://h.example/in", nil},
		{"not a url", "not a url", nil},
		{"sqlite:/var/lib/x.db", "sqlite:/var/lib/x.db", nil},
		{"", "", nil},
	} {
		got, parts := URLParts(tc.in)
		if got != tc.want || !slices.Equal(parts, tc.parts) {
			t.Errorf("URLParts(%q) = %q, %q; want %q, %q", tc.in, got, parts, tc.want, tc.parts)
		}
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// Go's *url.Error, as net/http returns it.
		{`Post "https://user:pw@127.0.0.1:9/hook?token=SECRET123&x=1": dial tcp 127.0.0.1:9: connect: connection refused`,
			`Post "https://[redacted]@127.0.0.1:9/hook?token=[redacted]&x=1": dial tcp 127.0.0.1:9: connect: connection refused`},
		{"from nats://u:p@a:4222 to redis://b:6379?password=p, then 'https://T@c/x'",
			"from nats://[redacted]@a:4222 to redis://b:6379?password=[redacted], then 'https://[redacted]@c/x'"},
		{"<a href=https://h/?token=t>x</a>", "<a href=https://h/?token=[redacted]>x</a>"},
		{"no scheme ://u:p@h", "no scheme ://u:p@h"},
		{"receiver answered HTTP 500", "receiver answered HTTP 500"},
		{"", ""},
	} {
		if got := Text(tc.in); got != tc.want {
			t.Errorf("Text(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestHoldsMask(t *testing.T) {
	for in, want := range map[string]bool{
		"https://h/hook?token=[redacted]&x=1":     true,
		"https://h/hook?token=%5Bredacted%5D&x=1": true,
		"https://[redacted]@h/hook":               true,
		"https://u:[redacted]@h/hook":             true,
		"https://h/cb#access_token=[redacted]":    true,
		"https://h/hook?token=real&x=1":           false,
		"https://h/hook?note=[redacted]":          false,
		"https://h/hook":                          false,
	} {
		if got := HoldsMask(in); got != want {
			t.Errorf("HoldsMask(%q) = %v, want %v", in, got, want)
		}
	}
	// Whatever URL masks, HoldsMask recognises.
	for _, in := range []string{"https://user:pw@h/hook?token=t&x=1", "https://T@h/", "https://h/?password=p"} {
		if !HoldsMask(URL(in)) {
			t.Errorf("HoldsMask(URL(%q) = %q) is false", in, URL(in))
		}
	}
}

// FuzzURL: whatever the input, a URL that parses after masking has no
// credentials but the mask and no secret-named parameter with a value but
// the mask.
func FuzzURL(f *testing.F) {
	for _, s := range []string{
		"https://user:pw@127.0.0.1:8080/hook?token=SECRET123&x=1", "https://T@h/#access_token=x", "postgres://u:pa/ss@db/x",
		"https://h/p?a=1;token=x", "https://h/p?%74oken=x", "http://[::1]:80/?key=%zz", "x://@/?&=#=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := URL(s)
		u, err := url.Parse(got)
		if scheme, _, ok := strings.Cut(s, "://"); err != nil || !ok || !isScheme(scheme) {
			return // not a URL with a scheme: nothing to mask
		}
		if u.User != nil && u.User.String() != url.PathEscape(Mask) && u.User.Username() != Mask {
			t.Fatalf("URL(%q) = %q keeps credentials %q", s, got, u.User.String())
		}
		for _, raw := range []string{u.RawQuery, u.EscapedFragment()} {
			for _, pair := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
				k, v, _ := strings.Cut(pair, "=")
				if v, err := url.QueryUnescape(v); err == nil && v == Mask {
					continue
				}
				if name, err := url.QueryUnescape(k); err == nil && SecretName(name) && v != "" {
					t.Fatalf("URL(%q) = %q keeps %s=%s", s, got, name, v)
				}
			}
		}
	})
}
