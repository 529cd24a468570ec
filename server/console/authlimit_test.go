package console_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/authlimit"
	"github.com/hymical/hymical/server/console"
)

// TestGuessesAreLimitedOnEveryConsoleRoute guesses with each kind of
// credential the console takes, on pages, actions and the login form: a
// wrong bearer token, a session id nobody issued, a wrong login. After the
// limit, every route refuses the address with 429, Retry-After and a page
// that says what happened and what to do, even with the right token.
func TestGuessesAreLimitedOnEveryConsoleRoute(t *testing.T) {
	t.Parallel()
	const failures = 3
	guesses := map[string]func(f *fixture) page{
		"a wrong bearer token on a page": func(f *fixture) page {
			return f.do(req{path: "/console/deliveries", header: map[string]string{"Authorization": "Bearer guess-0123456789abcdef"}})
		},
		"a wrong bearer token on an action": func(f *fixture) page {
			return f.do(req{path: "/console/deliveries/replay", form: url.Values{"state": {"failed"}}, header: map[string]string{"Authorization": "Bearer guess-0123456789abcdef"}})
		},
		"a forged session cookie on a page": func(f *fixture) page {
			return f.do(req{path: "/console/", cookie: "forged-session-id"})
		},
		"a forged session cookie on an action": func(f *fixture) page {
			return f.do(req{path: "/console/logout", form: url.Values{"csrf": {"x"}}, cookie: "forged-session-id"})
		},
		"a wrong token in the login form": func(f *fixture) page {
			return f.do(req{path: "/console/login", form: url.Values{"token": {"guess-0123456789abcdef"}}})
		},
	}
	refusals := map[string]func(f *fixture) page{
		"the overview with the right bearer token": func(f *fixture) page {
			return f.do(req{path: "/console/", header: map[string]string{"Authorization": "Bearer " + adminToken}})
		},
		"an action with the right bearer token": func(f *fixture) page {
			return f.do(req{path: "/console/deliveries/replay", form: url.Values{"state": {"failed"}}, header: map[string]string{"Authorization": "Bearer " + adminToken}})
		},
		"the login form with the right token": func(f *fixture) page {
			return f.do(req{path: "/console/login", form: url.Values{"token": {adminToken}}})
		},
		"the login page": func(f *fixture) page { return f.do(req{path: "/console/login"}) },
	}
	for name, guess := range guesses {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, func(o *console.Options) {
				o.AuthLimiter = authlimit.MustNew(authlimit.Config{Failures: failures, Window: time.Minute, Logger: o.Logger})
			})
			for i := range failures {
				if p := guess(f); p.status == http.StatusTooManyRequests {
					t.Fatalf("guess %d refused before the limit", i+1)
				}
			}
			for what, refused := range refusals {
				p := refused(f)
				if p.status != http.StatusTooManyRequests {
					t.Errorf("%s: status %d, want 429", what, p.status)
					continue
				}
				p.contains(t, "Too many wrong tokens", "from your address", "Wait")
				if secs, err := strconv.Atoi(p.header.Get("Retry-After")); err != nil || secs < 1 || secs > 60 {
					t.Errorf("%s: Retry-After %q, want whole seconds within the window", what, p.header.Get("Retry-After"))
				}
				if p.sessionCookie() != nil {
					t.Errorf("%s: a refused request got a session cookie", what)
				}
			}
			logs := f.logs.String()
			if n := strings.Count(logs, "too many failed authentications"); n != 1 || !strings.Contains(logs, "client=127.0.0.1") {
				t.Errorf("want one warning naming the client, got %d:\n%s", n, logs)
			}
			if strings.Contains(logs, "guess-0123") || strings.Contains(logs, adminToken) || strings.Contains(logs, "forged-session") {
				t.Error("a credential reached the log")
			}
		})
	}
}

// TestAStaleCookieCostsOneFailure: after a restart a browser still sends
// its old session cookie. The console clears it on the way to the login
// form, so an operator who comes back does not use up the allowance.
func TestAStaleCookieCostsOneFailure(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *console.Options) {
		o.AuthLimiter = authlimit.MustNew(authlimit.Config{Failures: 2, Window: time.Minute, Logger: o.Logger})
	})
	p := f.do(req{path: "/console/deliveries", cookie: "from-before-the-restart"}).must(t, http.StatusSeeOther)
	if c := p.sessionCookie(); c == nil || c.MaxAge >= 0 {
		t.Fatalf("the redirect to the login form did not clear the stale cookie: %v", p.header)
	}
	// The browser follows without the cookie, and logs in.
	f.do(req{path: p.header.Get("Location")}).must(t, http.StatusOK)
	s := f.login("alice")
	f.get(s, "/console/").must(t, http.StatusOK)
}
