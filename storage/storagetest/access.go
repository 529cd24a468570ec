package storagetest

import (
	"crypto/sha256"
	"errors"
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

func (f *fixture) link(ttl time.Duration) storage.AccessToken {
	f.t.Helper()
	out, err := f.store.PortalLinkCreate(f.ctx, storage.AccessToken{Hash: newHash(), Forms: []string{"form_a", "form_b"},
		ReadOnly: true, ExpiresAt: f.at(ttl), SessionTTL: time.Hour, CreatedAt: f.now})
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
			!got.ReadOnly || !got.ExpiresAt.Equal(at.Add(time.Hour)) {
			t.Fatalf("session %+v, want the link's scope, read-only, expiring an hour after %s", got, at)
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
