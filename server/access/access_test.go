package access_test

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/access"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite/sqlitetest"
)

func TestNewScopeChecksTheFormIDs(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		forms []string
		ok    bool
	}{
		"one form":        {[]string{"form_a"}, true},
		"several, sorted": {[]string{"form_b", "form_a"}, true},
		"none":            {nil, false},
		"an empty list":   {[]string{}, false},
		"an empty id":     {[]string{"form_a", ""}, false},
		"an id twice":     {[]string{"form_a", "form_a"}, false},
		"an id too long":  {[]string{strings.Repeat("f", storage.MaxAccessFormBytes+1)}, false},
		"the longest id":  {[]string{strings.Repeat("f", storage.MaxAccessFormBytes)}, true},
		"too many ids":    {manyForms(storage.MaxAccessForms + 1), false},
		"the most ids":    {manyForms(storage.MaxAccessForms), true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := access.NewScope(tc.forms, false)
			if tc.ok != (err == nil) {
				t.Fatalf("NewScope(%d forms) = %v, want ok %v", len(tc.forms), err, tc.ok)
			}
			if err != nil && !errors.Is(err, storage.ErrInvalid) {
				t.Fatalf("NewScope error %v is not ErrInvalid", err)
			}
			if err == nil && !slices.IsSorted(s.Forms) {
				t.Fatalf("scope forms %v are not sorted", s.Forms)
			}
		})
	}
}

func manyForms(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = storage.NewID("form")
	}
	return out
}

func TestScopeAllowsEndpointsOfANonEmptySubsetOfItsForms(t *testing.T) {
	t.Parallel()
	scope, err := access.NewScope([]string{"a", "b"}, false)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		forms []string
		want  bool
	}{
		"one of its forms":        {[]string{"a"}, true},
		"all of its forms":        {[]string{"b", "a"}, true},
		"every form (none named)": {nil, false},
		"one form outside":        {[]string{"a", "c"}, false},
		"only forms outside":      {[]string{"c"}, false},
		"the empty form":          {[]string{""}, false},
	}
	for name, tc := range cases {
		if got := scope.AllowsEndpoint(storage.Endpoint{FormIDs: tc.forms}); got != tc.want {
			t.Errorf("%s: AllowsEndpoint(%v) = %v, want %v", name, tc.forms, got, tc.want)
		}
	}
	if scope.AllowsForm("") || !scope.AllowsForm("a") || scope.AllowsForm("c") {
		t.Error("AllowsForm: want a in the scope, c and the empty form out")
	}
}

func TestMintedSecretsCarryTheirPrefixAnd32RandomBytes(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{access.TokenPrefix, access.PortalLinkPrefix, access.PortalSessionPrefix} {
		a, b := access.Mint(prefix), access.Mint(prefix)
		if a == b {
			t.Fatalf("two secrets minted alike: %s", a)
		}
		rest, ok := strings.CutPrefix(a, prefix)
		raw, err := base64.RawURLEncoding.DecodeString(rest)
		if !ok || err != nil || len(raw) != 32 {
			t.Fatalf("secret %q: want %s then 32 bytes of base64url (%v)", a, prefix, err)
		}
	}
}

func TestAuthenticateRefusesWhatOpensNothingAlike(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := sqlitetest.New(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	scope, _ := access.NewScope([]string{"form_a"}, true)
	live, tok, err := access.NewToken(ctx, store, "customer a", scope, now.Add(time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	expired, _, err := access.NewToken(ctx, store, "old", scope, now.Add(time.Minute), now)
	if err != nil {
		t.Fatal(err)
	}
	revoked, rtok, err := access.NewToken(ctx, store, "gone", scope, now.Add(time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.TokenRevoke(ctx, rtok.ID, now); err != nil {
		t.Fatal(err)
	}
	link, _, err := access.NewPortalLink(ctx, store, scope, time.Hour, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		secret string
		at     time.Time
		ok     bool
	}{
		"a live token":                {live, now, true},
		"a token at its expiry":       {expired, now.Add(time.Minute), false},
		"a token before its expiry":   {expired, now.Add(time.Minute - time.Millisecond), true},
		"a revoked token":             {revoked, now, false},
		"an unknown token":            {access.Mint(access.TokenPrefix), now, false},
		"a portal link as a token":    {link, now, false},
		"a token without its prefix":  {strings.TrimPrefix(live, access.TokenPrefix), now, false},
		"a token with a changed byte": {live[:len(live)-1] + flip(live[len(live)-1]), now, false},
		"nothing":                     {"", now, false},
	}
	for name, tc := range cases {
		got, err := access.Authenticate(ctx, store, tc.secret, tc.at)
		switch {
		case tc.ok && (err != nil || got.ID == ""):
			t.Errorf("%s: %v, want the token", name, err)
		case !tc.ok && !errors.Is(err, access.ErrUnauthenticated):
			t.Errorf("%s: %v, want ErrUnauthenticated", name, err)
		}
	}
	got, _ := access.Authenticate(ctx, store, live, now)
	if got.ID != tok.ID || !slices.Equal(access.ScopeOf(got).Forms, []string{"form_a"}) || !access.ScopeOf(got).ReadOnly {
		t.Fatalf("authenticated %+v, want token %s with its read-only scope", got, tok.ID)
	}
	if _, _, err := access.NewToken(ctx, store, "past", scope, now, now); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("a token expiring now: %v, want ErrInvalid", err)
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func TestAPortalLinkOpensOneSessionUntilItsExpiry(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := sqlitetest.New(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	scope, _ := access.NewScope([]string{"form_b", "form_a"}, false)
	link, stored, err := access.NewPortalLink(ctx, store, scope, 5*time.Minute, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link, access.PortalLinkPrefix) || stored.ID == "" || stored.Hash != access.Hash(link) {
		t.Fatalf("link %q (stored %s) lacks its prefix, or was stored under another hash", link[:7], stored.ID)
	}
	opened := now.Add(time.Minute)
	cookie, sess, err := access.RedeemPortalLink(ctx, store, link, opened)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cookie, access.PortalSessionPrefix) || !sess.ExpiresAt.Equal(opened.Add(time.Hour)) ||
		!slices.Equal(sess.Forms, []string{"form_a", "form_b"}) || sess.LinkID != stored.ID {
		t.Fatalf("session %+v (cookie %q): want the link's scope, an hour from %s, made from link %s", sess, cookie[:6], opened, stored.ID)
	}
	if _, _, err := access.RedeemPortalLink(ctx, store, link, opened); !errors.Is(err, access.ErrUnauthenticated) {
		t.Fatalf("the link used twice: %v, want ErrUnauthenticated", err)
	}
	late, _, err := access.NewPortalLink(ctx, store, scope, 5*time.Minute, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	ended, endedLink, err := access.NewPortalLink(ctx, store, scope, 5*time.Minute, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	endedCookie, _, err := access.RedeemPortalLink(ctx, store, ended, opened)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.PortalLinkRevoke(ctx, endedLink.ID, opened); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		secret string
		at     time.Time
		ok     bool
	}{
		"the session":               {cookie, opened, true},
		"the session before expiry": {cookie, opened.Add(time.Hour - time.Millisecond), true},
		"the session at its expiry": {cookie, opened.Add(time.Hour), false},
		"the link as a session":     {link, opened, false},
		"a revoked link's session":  {endedCookie, opened, false},
		"an unknown session":        {access.Mint(access.PortalSessionPrefix), opened, false},
		"an API token as a session": {access.Mint(access.TokenPrefix), opened, false},
	}
	for name, tc := range cases {
		got, err := access.PortalSession(ctx, store, tc.secret, tc.at)
		switch {
		case tc.ok && (err != nil || got.ID != sess.ID):
			t.Errorf("%s: %v, want the session", name, err)
		case !tc.ok && !errors.Is(err, access.ErrUnauthenticated):
			t.Errorf("%s: %v, want ErrUnauthenticated", name, err)
		}
	}
	if _, _, err := access.RedeemPortalLink(ctx, store, late, now.Add(5*time.Minute)); !errors.Is(err, access.ErrUnauthenticated) {
		t.Fatalf("a link at its expiry: %v, want ErrUnauthenticated", err)
	}
	if _, _, err := access.NewPortalLink(ctx, store, scope, 0, time.Hour, now); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("a link without a ttl: %v, want ErrInvalid", err)
	}
}
