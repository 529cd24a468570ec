package storagetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// newHash is the SHA-256 of a fresh random secret.
func newHash() [32]byte { return sha256.Sum256([]byte(storage.NewID("secret"))) }

func (f *fixture) token(mutate ...func(*storage.AccessToken)) storage.AccessToken {
	f.t.Helper()
	t := storage.AccessToken{Name: "customer a", Hash: newHash(), Forms: []string{"form_a"}, ExpiresAt: f.at(time.Hour)}
	for _, m := range mutate {
		m(&t)
	}
	out, err := f.store.TokenCreate(f.ctx, t)
	if err != nil {
		f.t.Fatalf("TokenCreate: %v", err)
	}
	return out
}

func (f *fixture) link(ttl time.Duration, mutate ...func(*storage.AccessToken)) storage.AccessToken {
	f.t.Helper()
	l := storage.AccessToken{Hash: newHash(), Forms: []string{"form_a", "form_b"},
		ReadOnly: true, ExpiresAt: f.at(ttl), SessionTTL: time.Hour, CreatedAt: f.now}
	for _, m := range mutate {
		m(&l)
	}
	out, err := f.store.PortalLinkCreate(f.ctx, l)
	if err != nil {
		f.t.Fatalf("PortalLinkCreate: %v", err)
	}
	return out
}

// testAccess holds the rules of scoped credentials: API tokens, portal
// links and portal sessions.
func testAccess(t *testing.T, b Backend) {
	t.Run("a token reads back by its hash, whole, and by no other", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		made := f.token(func(a *storage.AccessToken) { a.Forms = []string{"form_a", "form_b"}; a.ReadOnly = true })
		got, err := f.store.TokenGetByHash(f.ctx, made.Hash)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID == "" || got.Kind != storage.AccessAPIToken || got.Hash != made.Hash || !slices.Equal(got.Forms, []string{"form_a", "form_b"}) ||
			!got.ReadOnly || !got.ExpiresAt.Equal(f.at(time.Hour)) || got.RevokedAt != nil || got.Name != "customer a" {
			t.Fatalf("read back %+v, want %+v", got, made)
		}
		if _, err := f.store.TokenGetByHash(f.ctx, newHash()); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("unknown hash: %v, want ErrNotFound", err)
		}
	})

	t.Run("a token without a scope or an expiry is refused, and a hash is stored once", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		cases := map[string]storage.AccessToken{
			"no forms":       {Hash: newHash(), ExpiresAt: f.at(time.Hour)},
			"empty forms":    {Hash: newHash(), Forms: []string{}, ExpiresAt: f.at(time.Hour)},
			"an empty id":    {Hash: newHash(), Forms: []string{""}, ExpiresAt: f.at(time.Hour)},
			"a form twice":   {Hash: newHash(), Forms: []string{"a", "a"}, ExpiresAt: f.at(time.Hour)},
			"without expiry": {Hash: newHash(), Forms: []string{"a"}},
		}
		for name, tok := range cases {
			if _, err := f.store.TokenCreate(f.ctx, tok); !errors.Is(err, storage.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		made := f.token()
		if _, err := f.store.TokenCreate(f.ctx, storage.AccessToken{Hash: made.Hash, Forms: []string{"b"}, ExpiresAt: f.at(time.Hour)}); !errors.Is(err, storage.ErrConflict) {
			t.Fatalf("second token with one hash: %v, want ErrConflict", err)
		}
		if n := f.count(`SELECT count(*) FROM hymical_access`); n != 1 {
			t.Fatalf("%d credentials stored, want 1", n)
		}
	})

	t.Run("list shows expired tokens, not revoked ones, newest first; revoke is idempotent", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		old := f.token(func(a *storage.AccessToken) { a.CreatedAt = f.at(-2 * time.Hour); a.ExpiresAt = f.at(-time.Hour) })
		gone := f.token(func(a *storage.AccessToken) { a.CreatedAt = f.at(-time.Hour) })
		fresh := f.token(func(a *storage.AccessToken) { a.CreatedAt = f.now })
		f.link(time.Minute) // a portal link is no token
		first, err := f.store.TokenRevoke(f.ctx, gone.ID, f.now)
		if err != nil || first.RevokedAt == nil || !first.RevokedAt.Equal(f.now) {
			t.Fatalf("revoke: %+v, %v; want revoked at %s", first.RevokedAt, err, f.now)
		}
		again, err := f.store.TokenRevoke(f.ctx, gone.ID, f.at(time.Minute))
		if err != nil || again.RevokedAt == nil || !again.RevokedAt.Equal(f.now) {
			t.Fatalf("second revoke: %+v, %v; want the first revocation time %s kept", again.RevokedAt, err, f.now)
		}
		if _, err := f.store.TokenRevoke(f.ctx, "acc_unknown", f.now); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("revoke unknown: %v, want ErrNotFound", err)
		}
		// The revoked token still reads back by hash, revoked: the caller refuses it.
		if got, err := f.store.TokenGetByHash(f.ctx, gone.Hash); err != nil || got.RevokedAt == nil || got.ActiveAt(f.now) {
			t.Fatalf("revoked token by hash: %+v, %v; want it, revoked, not active", got, err)
		}
		list, err := f.store.TokenList(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tok := range list {
			ids = append(ids, tok.ID)
		}
		if want := []string{fresh.ID, old.ID}; !slices.Equal(ids, want) {
			t.Fatalf("listed %v, want %v (newest first, expired shown, revoked and links left out)", ids, want)
		}
	})

	t.Run("a portal link becomes a session once, with its scope and the session's ttl", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		link := f.link(5 * time.Minute)
		session := newHash()
		at := f.at(time.Minute)
		got, err := f.store.PortalLinkRedeem(f.ctx, storage.PortalLinkRedeemParams{LinkHash: link.Hash, SessionHash: session, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		if got.Kind != storage.AccessPortalSession || got.Hash != session || !slices.Equal(got.Forms, link.Forms) ||
			!got.ReadOnly || !got.ExpiresAt.Equal(at.Add(time.Hour)) || got.LinkID != link.ID {
			t.Fatalf("session %+v, want the link's scope, read-only, expiring an hour after %s, made from link %s", got, at, link.ID)
		}
		again, err := f.store.PortalSessionGetByHash(f.ctx, session, at.Add(59*time.Minute))
		if err != nil || again.ID != got.ID {
			t.Fatalf("session by hash before expiry: %+v, %v", again, err)
		}
		if _, err := f.store.PortalSessionGetByHash(f.ctx, session, at.Add(time.Hour)); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("session at its expiry: %v, want ErrNotFound", err)
		}
		// Neither the link nor the session opens as another kind.
		if _, err := f.store.PortalSessionGetByHash(f.ctx, link.Hash, at); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("link's hash as a session: %v, want ErrNotFound", err)
		}
		if _, err := f.store.TokenGetByHash(f.ctx, session); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("session's hash as a token: %v, want ErrNotFound", err)
		}
		if _, err := f.store.PortalLinkRedeem(f.ctx, storage.PortalLinkRedeemParams{LinkHash: link.Hash, SessionHash: newHash(), Now: at}); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("second redeem: %v, want ErrNotFound", err)
		}
		if n := f.count(`SELECT count(*) FROM hymical_access WHERE kind = 'portal_session'`); n != 1 {
			t.Fatalf("%d sessions, want 1: a refused redeem writes nothing", n)
		}
	})

	t.Run("an expired or unknown portal link is refused and writes nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		link := f.link(5 * time.Minute)
		cases := map[string]storage.PortalLinkRedeemParams{
			"at its expiry": {LinkHash: link.Hash, SessionHash: newHash(), Now: f.at(5 * time.Minute)},
			"unknown":       {LinkHash: newHash(), SessionHash: newHash(), Now: f.now},
		}
		for name, p := range cases {
			if _, err := f.store.PortalLinkRedeem(f.ctx, p); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("%s: %v, want ErrNotFound", name, err)
			}
		}
		if n := f.count(`SELECT count(*) FROM hymical_access WHERE kind = 'portal_session' OR used_at IS NOT NULL`); n != 0 {
			t.Fatalf("%d rows written by refused redeems, want 0", n)
		}
	})

	t.Run("of many redeems of one link on independent stores exactly one wins", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		link := f.link(5 * time.Minute)
		stores := []storage.Store{f.db.Open(t), f.db.Open(t), f.db.Open(t), f.db.Open(t)}
		const perStore = 4
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			won  int
			errs []error
		)
		begin := make(chan struct{})
		for _, s := range stores {
			for range perStore {
				wg.Go(func() {
					<-begin
					_, err := s.PortalLinkRedeem(f.ctx, storage.PortalLinkRedeemParams{LinkHash: link.Hash, SessionHash: newHash(), Now: f.now})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						won++
					case !errors.Is(err, storage.ErrNotFound):
						errs = append(errs, err)
					}
				})
			}
		}
		close(begin)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("redeems failed otherwise than ErrNotFound: %v", errs)
		}
		if won != 1 {
			t.Fatalf("%d redeems of one link succeeded, want exactly 1", won)
		}
		if n := f.count(`SELECT count(*) FROM hymical_access WHERE kind = 'portal_session'`); n != 1 {
			t.Fatalf("%d sessions, want 1", n)
		}
	})

	t.Run("portal links are listed newest first, with their use and their session's end", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		unused := f.link(5*time.Minute, func(l *storage.AccessToken) { l.CreatedAt = f.at(-3 * time.Minute) })
		used := f.link(5*time.Minute, func(l *storage.AccessToken) { l.CreatedAt = f.at(-2 * time.Minute) })
		expired := f.link(-time.Minute, func(l *storage.AccessToken) { l.CreatedAt = f.at(-time.Hour) })
		revoked := f.link(5*time.Minute, func(l *storage.AccessToken) { l.CreatedAt = f.at(-time.Minute) })
		f.token() // a token is no portal link
		if _, err := f.store.PortalLinkRedeem(f.ctx, storage.PortalLinkRedeemParams{LinkHash: used.Hash, SessionHash: newHash(), Now: f.now}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.PortalLinkRevoke(f.ctx, revoked.ID, f.now); err != nil {
			t.Fatal(err)
		}
		list, err := f.store.PortalLinkList(f.ctx, storage.PortalLinkListParams{})
		if err != nil {
			t.Fatal(err)
		}
		// A page at a time, each page going on after the last link of the
		// one before, gives the same links in the same order.
		var paged []string
		for cursor := ""; ; {
			page, err := f.store.PortalLinkList(f.ctx, storage.PortalLinkListParams{Before: cursor, Limit: 3})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range page {
				paged = append(paged, l.ID)
			}
			if len(page) < 3 {
				break
			}
			cursor = page[len(page)-1].ID
		}
		var ids []string
		for _, l := range list {
			ids = append(ids, l.ID)
			if l.Kind != storage.AccessPortalLink {
				t.Errorf("listed %s of kind %s", l.ID, l.Kind)
			}
		}
		// The session made from used is not a link, so not listed.
		if want := []string{revoked.ID, used.ID, unused.ID, expired.ID}; !slices.Equal(ids, want) {
			t.Fatalf("listed %v, want %v (newest first, expired and revoked shown, tokens and sessions left out)", ids, want)
		}
		if !slices.Equal(paged, ids) {
			t.Fatalf("three at a time, listed %v; whole, %v", paged, ids)
		}
		byID := map[string]storage.PortalLink{}
		for _, l := range list {
			byID[l.ID] = l
		}
		if l := byID[used.ID]; l.UsedAt == nil || !l.UsedAt.Equal(f.now) || l.SessionExpiresAt == nil ||
			!l.SessionExpiresAt.Equal(f.at(time.Hour)) || l.RevokedAt != nil {
			t.Errorf("used link %+v: want used at %s, its session ending an hour later, not revoked", l, f.now)
		}
		if l := byID[unused.ID]; l.UsedAt != nil || l.SessionExpiresAt != nil || l.RevokedAt != nil || !l.ExpiresAt.Equal(f.at(5*time.Minute)) {
			t.Errorf("unused link %+v: want no use, no session, no revocation, expiring in 5 minutes", l)
		}
		if l := byID[revoked.ID]; l.RevokedAt == nil || !l.RevokedAt.Equal(f.now) {
			t.Errorf("revoked link %+v: want revoked at %s", l, f.now)
		}
	})

	t.Run("revoking a portal link ends its session and refuses the link, on every store on the database", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		admin, portal := f.db.Open(t), f.db.Open(t)
		used := f.link(5 * time.Minute)
		other := f.link(5 * time.Minute)
		unused := f.link(5 * time.Minute)
		session, otherSession := newHash(), newHash()
		for link, hash := range map[[32]byte][32]byte{used.Hash: session, other.Hash: otherSession} {
			if _, err := portal.PortalLinkRedeem(f.ctx, storage.PortalLinkRedeemParams{LinkHash: link, SessionHash: hash, Now: f.now}); err != nil {
				t.Fatal(err)
			}
		}
		// A session read once before the revocation is refused after it:
		// nothing is cached.
		if _, err := portal.PortalSessionGetByHash(f.ctx, session, f.at(time.Minute)); err != nil {
			t.Fatalf("session before revocation: %v", err)
		}
		for _, id := range []string{used.ID, unused.ID} {
			got, err := admin.PortalLinkRevoke(f.ctx, id, f.at(time.Minute))
			if err != nil || got.ID != id || got.RevokedAt == nil || !got.RevokedAt.Equal(f.at(time.Minute)) {
				t.Fatalf("revoke %s: %+v, %v; want it revoked at %s", id, got, err, f.at(time.Minute))
			}
		}
		if _, err := portal.PortalSessionGetByHash(f.ctx, session, f.at(2*time.Minute)); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("session of a revoked link: %v, want ErrNotFound", err)
		}
		if _, err := portal.PortalLinkRedeem(f.ctx, storage.PortalLinkRedeemParams{LinkHash: unused.Hash, SessionHash: newHash(), Now: f.at(2 * time.Minute)}); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("redeem a revoked link: %v, want ErrNotFound", err)
		}
		if n := f.count(`SELECT count(*) FROM hymical_access WHERE kind = 'portal_session'`); n != 2 {
			t.Fatalf("%d sessions, want 2: a refused redeem writes nothing", n)
		}
		// Another link's session lives on.
		if _, err := portal.PortalSessionGetByHash(f.ctx, otherSession, f.at(2*time.Minute)); err != nil {
			t.Fatalf("session of a link not revoked: %v", err)
		}
		again, err := admin.PortalLinkRevoke(f.ctx, used.ID, f.at(time.Hour))
		if err != nil || again.RevokedAt == nil || !again.RevokedAt.Equal(f.at(time.Minute)) {
			t.Fatalf("second revoke: %+v, %v; want the first revocation time %s kept", again.RevokedAt, err, f.at(time.Minute))
		}
		if again.SessionExpiresAt == nil || !again.SessionExpiresAt.Equal(f.at(time.Hour)) {
			t.Fatalf("revoked link's session end %v, want %s", again.SessionExpiresAt, f.at(time.Hour))
		}
		if n := f.count(fmt.Sprintf(`SELECT count(*) FROM hymical_access WHERE kind = 'portal_session' AND revoked_at = %s`,
			f.db.TimeLiteral(f.at(time.Minute)))); n != 1 {
			t.Fatalf("%d sessions revoked at the first revocation, want 1", n)
		}
		tok := f.token()
		sess, err := portal.PortalSessionGetByHash(f.ctx, otherSession, f.now)
		if err != nil {
			t.Fatal(err)
		}
		for name, id := range map[string]string{"unknown": "acc_unknown", "an API token": tok.ID, "a session": sess.ID} {
			if _, err := admin.PortalLinkRevoke(f.ctx, id, f.now); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("revoke %s: %v, want ErrNotFound", name, err)
			}
		}
		if got, err := f.store.TokenGetByHash(f.ctx, tok.Hash); err != nil || got.RevokedAt != nil {
			t.Fatalf("token after a portal revoke of its id: %+v, %v; want it untouched", got, err)
		}
	})

	t.Run("prune keeps a portal link while its session lives", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		link := f.link(time.Minute)
		if _, err := f.store.PortalLinkRedeem(f.ctx, storage.PortalLinkRedeemParams{LinkHash: link.Hash, SessionHash: newHash(), Now: f.now}); err != nil {
			t.Fatal(err)
		}
		// The link expired, its session (an hour) has not.
		if n, err := f.store.AccessPrune(f.ctx, storage.AccessPruneParams{ExpiredBefore: f.at(30 * time.Minute)}); err != nil || n != 0 {
			t.Fatalf("prune while the session lives: %d, %v; want 0", n, err)
		}
		if _, err := f.store.PortalLinkRevoke(f.ctx, link.ID, f.now); err != nil {
			t.Fatalf("revoke the expired link of a live session: %v", err)
		}
		if n, err := f.store.AccessPrune(f.ctx, storage.AccessPruneParams{ExpiredBefore: f.at(2 * time.Hour)}); err != nil || n != 2 {
			t.Fatalf("prune after the session ended: %d, %v; want the link and the session", n, err)
		}
	})

	t.Run("prune removes what expired before the cutoff, a batch at a time", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		for range 3 {
			f.token(func(a *storage.AccessToken) { a.ExpiresAt = f.at(-time.Hour) })
		}
		keep := f.token()
		n, err := f.store.AccessPrune(f.ctx, storage.AccessPruneParams{ExpiredBefore: f.now, Limit: 2})
		if err != nil || n != 2 {
			t.Fatalf("first prune: %d, %v; want 2", n, err)
		}
		n, err = f.store.AccessPrune(f.ctx, storage.AccessPruneParams{ExpiredBefore: f.now, Limit: 2})
		if err != nil || n != 1 {
			t.Fatalf("second prune: %d, %v; want 1", n, err)
		}
		if _, err := f.store.TokenGetByHash(f.ctx, keep.Hash); err != nil {
			t.Fatalf("the live token: %v", err)
		}
		if _, err := f.store.AccessPrune(f.ctx, storage.AccessPruneParams{}); !errors.Is(err, storage.ErrInvalid) {
			t.Fatalf("prune without a cutoff: %v, want ErrInvalid", err)
		}
	})
}

// testScope holds the scope filters: a scope reaches only endpoints whose
// forms are a non-empty subset of it, and only the deliveries to those.
func testScope(t *testing.T, b Backend) {
	t.Run("endpoints in a scope name only its forms, and at least one", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		forms := func(ids ...string) func(*storage.Endpoint) { return func(e *storage.Endpoint) { e.FormIDs = ids } }
		a := f.endpoint(forms("a"))
		ab := f.endpoint(forms("a", "b"))
		c := f.endpoint(forms("c"))
		f.endpoint() // every form: in no scope
		gone := f.endpoint(forms("a"))
		if _, err := f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: gone.ID}); err != nil {
			t.Fatal(err)
		}
		cases := map[string]struct {
			scope []string
			want  []string
		}{
			"a":             {[]string{"a"}, []string{a.ID}},
			"a and b":       {[]string{"a", "b"}, []string{ab.ID, a.ID}},
			"b":             {[]string{"b"}, nil},
			"a, b, c and x": {[]string{"a", "b", "c", "x"}, []string{c.ID, ab.ID, a.ID}},
			"empty":         {[]string{}, nil},
			"no form":       {[]string{""}, nil},
		}
		for name, tc := range cases {
			got, err := f.store.EndpointListPage(f.ctx, storage.EndpointListParams{Forms: tc.scope})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var ids []string
			for _, e := range got {
				ids = append(ids, e.ID)
			}
			slices.Sort(tc.want)
			slices.Reverse(tc.want)
			if !slices.Equal(ids, tc.want) {
				t.Errorf("scope %s: listed %v, want %v", name, ids, tc.want)
			}
		}
		// Pages in a scope go on from the cursor.
		page, err := f.store.EndpointListPage(f.ctx, storage.EndpointListParams{Forms: []string{"a", "b", "c"}, Limit: 2})
		if err != nil || len(page) != 2 {
			t.Fatalf("first page: %d, %v", len(page), err)
		}
		rest, err := f.store.EndpointListPage(f.ctx, storage.EndpointListParams{Forms: []string{"a", "b", "c"}, Before: page[1].ID})
		if err != nil || len(rest) != 1 {
			t.Fatalf("second page: %d, %v; want 1", len(rest), err)
		}
	})

	t.Run("deliveries in a scope are its endpoints', and replay stays in it", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint() // every form: in no scope, though it receives every event
		onlyA := f.endpoint(withForms("form_a"))
		f.endpoint(withForms("form_b"))
		f.endpoint(withForms("form_a", "form_b"))
		f.endpoint(withForms("form_a", "form_x")) // names a form outside {a, b}
		f.event("form_a")                         // to every, a, ab, ax
		f.event("form_b")                         // to every, b, ab
		// A test event: no form, addressed to one endpoint, which is in
		// scope a.
		if _, err := f.store.EventCreate(f.ctx, storage.Event{Type: "hymical.test", EndpointID: onlyA.ID, Payload: []byte(`{"type":"hymical.test"}`)}); err != nil {
			t.Fatal(err)
		}
		cases := map[string]struct {
			filter storage.DeliveryFilter
			want   int
		}{
			"nil is no filter": {storage.DeliveryFilter{}, 8},
			// Endpoint a's two: form_a's event and the test event; not
			// form_a's event to the endpoints of every form, of a and b, or
			// of a and x.
			"a":                            {storage.DeliveryFilter{Forms: []string{"form_a"}}, 2},
			"a and b":                      {storage.DeliveryFilter{Forms: []string{"form_a", "form_b"}}, 5},
			"a, b and x":                   {storage.DeliveryFilter{Forms: []string{"form_a", "form_b", "form_x"}}, 6},
			"a, except a":                  {storage.DeliveryFilter{Forms: []string{"form_a"}, ExceptEndpointID: onlyA.ID}, 0},
			"a and b, with form b's event": {storage.DeliveryFilter{Forms: []string{"form_a", "form_b"}, FormID: "form_b"}, 2},
			"empty":                        {storage.DeliveryFilter{Forms: []string{}}, 0},
			"no form":                      {storage.DeliveryFilter{Forms: []string{""}}, 0},
			"unknown":                      {storage.DeliveryFilter{Forms: []string{"form_y"}}, 0},
		}
		for name, tc := range cases {
			got, err := f.store.DeliveryList(f.ctx, storage.DeliveryListParams{Filter: tc.filter})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(got) != tc.want {
				t.Errorf("scope %s: %d deliveries, want %d", name, len(got), tc.want)
			}
		}
		for _, c := range f.claim(f.store, f.now, 10) {
			f.complete(f.store, c, storage.OutcomePermanent, f.now, 0)
		}
		res, err := f.store.DeliveryReplayMany(f.ctx, storage.DeliveryReplayManyParams{
			Filter: storage.DeliveryFilter{State: storage.StateFailed, Forms: []string{"form_a"}}, Actor: "customer", Now: f.now})
		if err != nil || res.Count != 2 {
			t.Fatalf("scoped bulk replay: %+v, %v; want endpoint a's 2 replayed", res, err)
		}
		if n := f.count(`SELECT count(*) FROM webhook_deliveries WHERE state = 'failed'`); n != 6 {
			t.Fatalf("%d deliveries still failed, want the 6 to other endpoints", n)
		}
		res, err = f.store.DeliveryReplayMany(f.ctx, storage.DeliveryReplayManyParams{
			Filter: storage.DeliveryFilter{State: storage.StateFailed, Forms: []string{}}, Actor: "customer", Now: f.now})
		if err != nil || res.Count != 0 {
			t.Fatalf("bulk replay in an empty scope: %+v, %v; want 0", res, err)
		}
	})
}
