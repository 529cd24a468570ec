package storagetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/secretbox"
)

// The secrets the suite writes. Their base64 bodies are what must never be
// found in a raw row, an error or a log.
const (
	secretV1  = "whsec_c2VjcmV0LWF0LXJlc3Qtb25lLW9uZS1vbmU="
	secretV1a = "whsk_6Xb/dCcHpPea21PS1N9VY/NZW723CEc77N4rJCubMbfVKIDij2HKpMKkioLlX0dRqSKJp4AJ6p9lMicMFs6Kvg=="
)

// secretBodies are fragments of the suite's secrets, any of which in a
// stored row or an error means a secret leaked.
var secretBodies = []string{"c2VjcmV0LWF0LXJlc3Qtb25l", "6Xb/dCcHpPea21PS1N9VY"}

func newSecretBox(t *testing.T) *secretbox.Box {
	t.Helper()
	k, err := secretbox.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.New(k)
	if err != nil {
		t.Fatal(err)
	}
	return box
}

// keeper is s as a SecretsAtRest, which every backend must be.
func keeper(t *testing.T, s storage.Store) storage.SecretsAtRest {
	t.Helper()
	k, ok := s.(storage.SecretsAtRest)
	if !ok {
		t.Fatalf("%T does not implement storage.SecretsAtRest", s)
	}
	return k
}

// rawSecrets is endpoint id's secrets column as stored.
func rawSecrets(t *testing.T, db Database, id string) string {
	t.Helper()
	raw, err := db.QueryString(t.Context(), fmt.Sprintf("SELECT CAST(secrets AS TEXT) FROM webhook_endpoints WHERE id = '%s'", id))
	if err != nil {
		t.Fatalf("read the raw secrets of %s: %v", id, err)
	}
	return raw
}

func wantSealedUnder(t *testing.T, db Database, id string, box *secretbox.Box) {
	t.Helper()
	raw := rawSecrets(t, db, id)
	for _, b := range slices.Concat(secretBodies, []string{"whsec_", "whsk_"}) {
		if strings.Contains(raw, b) {
			t.Fatalf("the raw secrets of %s hold %q in plaintext: %s", id, b, raw)
		}
	}
	if !strings.Contains(raw, secretbox.Header(box.KeyID())) {
		t.Fatalf("the raw secrets of %s are not sealed under key %s: %s", id, box.KeyID(), raw)
	}
}

// wantSecretsKeyErr fails unless err is ErrSecretsKey, mentions each of
// mentions (the endpoint, the key ids) and holds no secret.
func wantSecretsKeyErr(t *testing.T, err error, what string, mentions ...string) {
	t.Helper()
	if !errors.Is(err, storage.ErrSecretsKey) {
		t.Fatalf("%s: err = %v, want ErrSecretsKey", what, err)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: error %q does not mention %q", what, err, m)
		}
	}
	wantNoSecretIn(t, err, what)
}

// wantNoSecretIn fails when err is nil or its text holds a secret.
func wantNoSecretIn(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	for _, b := range secretBodies {
		if strings.Contains(err.Error(), b) {
			t.Errorf("%s: error %q holds a secret", what, err)
		}
	}
}

func wantPlainSecrets(t *testing.T, e storage.Endpoint, want ...string) {
	t.Helper()
	if len(e.Secrets) != len(want) {
		t.Fatalf("endpoint %s has %d secrets, want %d", e.ID, len(e.Secrets), len(want))
	}
	for i, w := range want {
		if got := e.Secrets[i].Reveal(); got != w {
			t.Fatalf("endpoint %s secret %d reads %q, want %q", e.ID, i, got, w)
		}
	}
}

func secretEndpoint(id string, secrets ...string) storage.Endpoint {
	e := storage.Endpoint{ID: id, Transport: "http", URL: "https://receiver.example/" + id}
	for _, s := range secrets {
		e.Secrets = append(e.Secrets, storage.NewSecret(s, nil))
	}
	return e
}

// encryptedStore is a migrated database whose secrets are recorded as
// sealed under box, as hymical serve leaves it, and a store with that key.
func encryptedStore(t *testing.T, b Backend, box *secretbox.Box) (storage.Store, Database) {
	t.Helper()
	db := b.NewDatabase(t)
	s := db.Open(t, storage.WithSecretBox(box))
	if _, err := s.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := keeper(t, s).SecretsEncrypt(t.Context(), box); err != nil {
		t.Fatal(err)
	}
	return s, db
}

func testSecrets(t *testing.T, b Backend) {
	testSecretsRotateDeleted(t, b)
	t.Run("secrets are sealed in the row and read back in plaintext", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		box := newSecretBox(t)
		s, db := encryptedStore(t, b, box)
		if id, err := keeper(t, s).SecretsKeyID(ctx); err != nil || id != box.KeyID() {
			t.Fatalf("SecretsKeyID = %q, %v; want %q", id, err, box.KeyID())
		}
		created, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: secretEndpoint("ep_sealed", secretV1)})
		if err != nil {
			t.Fatal(err)
		}
		wantPlainSecrets(t, created.Endpoint, secretV1)
		wantSealedUnder(t, db, "ep_sealed", box)

		expires := time.Now().UTC().Add(time.Hour).Truncate(time.Second)
		created.Secrets = []storage.Secret{storage.NewSecret(secretV1a, nil), storage.NewSecret(secretV1, &expires)}
		updated, err := s.EndpointUpdate(ctx, created.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		wantPlainSecrets(t, updated, secretV1a, secretV1)
		if got := updated.Secrets[1].ExpiresAt; got == nil || !got.Equal(expires) {
			t.Fatalf("expiry of the rotated-out secret reads %v, want %v", got, expires)
		}
		wantSealedUnder(t, db, "ep_sealed", box)

		got, err := s.EndpointGet(ctx, "ep_sealed")
		if err != nil {
			t.Fatal(err)
		}
		wantPlainSecrets(t, got, secretV1a, secretV1)
		list, err := s.EndpointList(ctx)
		if err != nil || len(list) != 1 {
			t.Fatalf("EndpointList = %d endpoints, %v", len(list), err)
		}
		wantPlainSecrets(t, list[0], secretV1a, secretV1)

		// The worker's read: a claim carries the endpoint, secrets opened.
		sub := storage.NewID("sub")
		if _, err := s.EventCreate(ctx, storage.Event{Type: "submission.received", FormID: "form_1", SubmissionID: sub, Payload: submissionPayload(sub, "form_1")}); err != nil {
			t.Fatal(err)
		}
		claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 5, Lease: lease, Now: time.Now().Add(time.Minute)})
		if err != nil || len(claims) != 1 {
			t.Fatalf("DeliveryClaim = %d claims, %v", len(claims), err)
		}
		wantPlainSecrets(t, claims[0].Endpoint, secretV1a, secretV1)
	})

	t.Run("a sealed row moved to another endpoint does not open", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		box := newSecretBox(t)
		s, db := encryptedStore(t, b, box)
		for _, e := range []storage.Endpoint{secretEndpoint("ep_victim", secretV1), secretEndpoint("ep_attacker", secretV1a)} {
			if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: e}); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Exec(ctx, `UPDATE webhook_endpoints SET secrets = (SELECT secrets FROM webhook_endpoints WHERE id = 'ep_victim') WHERE id = 'ep_attacker'`); err != nil {
			t.Fatal(err)
		}
		_, err := s.EndpointGet(ctx, "ep_attacker")
		wantSecretsKeyErr(t, err, "read the moved row", "ep_attacker")
		got, err := s.EndpointGet(ctx, "ep_victim")
		if err != nil {
			t.Fatal(err)
		}
		wantPlainSecrets(t, got, secretV1)
	})

	t.Run("plaintext rows of the old format are encrypted in one go", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		all, err := migrations.Postgres()
		if err != nil {
			t.Fatal(err)
		}
		db := b.NewDatabase(t)
		plain := db.Open(t)
		// The schema before secrets could be sealed, with rows written as
		// every earlier build wrote them.
		if _, err := plain.Migrate(ctx, storage.MigrateParams{To: len(all) - 1}); err != nil {
			t.Fatal(err)
		}
		ts := db.TimeLiteral(time.Now())
		var seed strings.Builder
		for i, sec := range []string{secretV1, secretV1a} {
			col, err := storage.EncodeSecrets([]storage.Secret{storage.NewSecret(sec, nil)})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&seed, "INSERT INTO webhook_endpoints (id, transport, url, secrets, created_at, updated_at) VALUES ('ep_old%d', 'http', 'https://old.example/hook', '%s', %s, %s);\n", i, col, ts, ts)
		}
		if err := db.Exec(ctx, seed.String()); err != nil {
			t.Fatal(err)
		}
		if _, err := plain.Migrate(ctx, storage.MigrateParams{}); err != nil {
			t.Fatal(err)
		}
		if id, err := keeper(t, plain).SecretsKeyID(ctx); err != nil || id != "" {
			t.Fatalf("SecretsKeyID of a plaintext database = %q, %v; want none", id, err)
		}
		if _, err := plain.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: secretEndpoint("ep_new", secretV1)}); err != nil {
			t.Fatal(err)
		}
		if raw := rawSecrets(t, db, "ep_new"); !strings.Contains(raw, secretV1) {
			t.Fatalf("without a key the row is %s, want the plaintext format", raw)
		}

		box := newSecretBox(t)
		s := db.Open(t, storage.WithSecretBox(box))
		_, err = s.EndpointGet(ctx, "ep_old0")
		wantSecretsKeyErr(t, err, "read a plaintext row with a key before encrypting", "ep_old0", "plaintext")

		res, err := keeper(t, s).SecretsEncrypt(ctx, box)
		if err != nil {
			t.Fatal(err)
		}
		if res != (storage.SecretsEncryptResult{From: "", To: box.KeyID(), Endpoints: 3}) {
			t.Fatalf("SecretsEncrypt = %+v, want 3 endpoints from plaintext to %s", res, box.KeyID())
		}
		want := map[string]string{"ep_old0": secretV1, "ep_old1": secretV1a, "ep_new": secretV1}
		for id, sec := range want {
			wantSealedUnder(t, db, id, box)
			e, err := s.EndpointGet(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			wantPlainSecrets(t, e, sec)
		}
		// Again, or by a second process starting at the same time: nothing to do.
		res, err = keeper(t, db.Open(t, storage.WithSecretBox(box))).SecretsEncrypt(ctx, box)
		if err != nil || res.Endpoints != 0 || res.From != box.KeyID() {
			t.Fatalf("second SecretsEncrypt = %+v, %v; want nothing done", res, err)
		}
	})

	t.Run("processes starting together encrypt once", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		db := b.NewDatabase(t)
		plain := db.Open(t)
		if _, err := plain.Migrate(ctx, storage.MigrateParams{}); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if _, err := plain.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: secretEndpoint(fmt.Sprintf("ep_%d", i), secretV1)}); err != nil {
				t.Fatal(err)
			}
		}
		box := newSecretBox(t)
		const n = 4
		stores := make([]storage.Store, n)
		for i := range stores {
			stores[i] = db.Open(t, storage.WithSecretBox(box))
		}
		var wg sync.WaitGroup
		results := make([]storage.SecretsEncryptResult, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { results[i], errs[i] = keeper(t, stores[i]).SecretsEncrypt(ctx, box) })
		}
		wg.Wait()
		sealed := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("process %d: %v", i, errs[i])
			}
			sealed += results[i].Endpoints
		}
		if sealed != 5 {
			t.Fatalf("the processes sealed %d rows between them, want each of the 5 once: %+v", sealed, results)
		}
		for i := range 5 {
			e, err := stores[0].EndpointGet(ctx, fmt.Sprintf("ep_%d", i))
			if err != nil {
				t.Fatal(err)
			}
			wantPlainSecrets(t, e, secretV1)
		}
	})

	t.Run("once encrypted, a store without the key or with another can neither read nor write secrets", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		box := newSecretBox(t)
		s, db := encryptedStore(t, b, box)
		if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: secretEndpoint("ep_1", secretV1)}); err != nil {
			t.Fatal(err)
		}
		other := newSecretBox(t)
		for _, tc := range []struct {
			name     string
			opts     []storage.OpenOption
			mentions []string
		}{
			{"no key", nil, []string{"ep_1", box.KeyID(), "no key"}},
			{"another key", []storage.OpenOption{storage.WithSecretBox(other)}, []string{"ep_1", box.KeyID(), other.KeyID()}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wrong := db.Open(t, tc.opts...)
				_, err := wrong.EndpointGet(ctx, "ep_1")
				wantSecretsKeyErr(t, err, "EndpointGet", tc.mentions...)
				_, err = wrong.EndpointList(ctx)
				wantSecretsKeyErr(t, err, "EndpointList", tc.mentions...)
				// The database refuses what this process would write.
				_, err = wrong.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: secretEndpoint("ep_2", secretV1a)})
				wantNoSecretIn(t, err, "EndpointCreate")
				if !strings.Contains(err.Error(), "hymical_secrets_key") {
					t.Errorf("EndpointCreate: error %q does not say the database records a key", err)
				}
				if n, err := db.QueryInt(ctx, "SELECT count(*) FROM webhook_endpoints WHERE id = 'ep_2'"); err != nil || n != 0 {
					t.Fatalf("ep_2 was written: %d, %v", n, err)
				}
				// Nor can it re-encrypt what it cannot read.
				_, err = keeper(t, wrong).SecretsEncrypt(ctx, newSecretBox(t))
				wantSecretsKeyErr(t, err, "SecretsEncrypt", box.KeyID())
			})
		}
		wantSealedUnder(t, db, "ep_1", box)
	})

	t.Run("rotation seals every row under the new key in one transaction", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		oldBox, newBox := newSecretBox(t), newSecretBox(t)
		s, db := encryptedStore(t, b, oldBox)
		for i, sec := range []string{secretV1, secretV1a, secretV1} {
			if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: secretEndpoint(fmt.Sprintf("ep_%d", i), sec)}); err != nil {
				t.Fatal(err)
			}
		}

		// One row that does not open stops the rotation, and nothing of
		// it is kept: every row is still under the old key.
		before := rawSecrets(t, db, "ep_2")
		if err := db.Exec(ctx, `UPDATE webhook_endpoints SET secrets = (SELECT secrets FROM webhook_endpoints WHERE id = 'ep_0') WHERE id = 'ep_2'`); err != nil {
			t.Fatal(err)
		}
		_, err := keeper(t, s).SecretsEncrypt(ctx, newBox)
		wantSecretsKeyErr(t, err, "rotate with a damaged row", "ep_2")
		for _, id := range []string{"ep_0", "ep_1"} {
			wantSealedUnder(t, db, id, oldBox)
		}
		if id, err := keeper(t, s).SecretsKeyID(ctx); err != nil || id != oldBox.KeyID() {
			t.Fatalf("after a failed rotation the key id is %q, %v; want the old %s", id, err, oldBox.KeyID())
		}
		if err := db.Exec(ctx, fmt.Sprintf(`UPDATE webhook_endpoints SET secrets = '%s' WHERE id = 'ep_2'`, before)); err != nil {
			t.Fatal(err)
		}

		res, err := keeper(t, s).SecretsEncrypt(ctx, newBox)
		if err != nil {
			t.Fatal(err)
		}
		if res != (storage.SecretsEncryptResult{From: oldBox.KeyID(), To: newBox.KeyID(), Endpoints: 3}) {
			t.Fatalf("rotation = %+v, want 3 endpoints from %s to %s", res, oldBox.KeyID(), newBox.KeyID())
		}
		rotated := db.Open(t, storage.WithSecretBox(newBox))
		for i, sec := range []string{secretV1, secretV1a, secretV1} {
			id := fmt.Sprintf("ep_%d", i)
			wantSealedUnder(t, db, id, newBox)
			e, err := rotated.EndpointGet(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			wantPlainSecrets(t, e, sec)
		}
		// The store still holding the old key is told which key to use.
		_, err = s.EndpointGet(ctx, "ep_0")
		wantSecretsKeyErr(t, err, "read with the old key after rotation", oldBox.KeyID(), newBox.KeyID())
	})
}

// testSecretsRotateDeleted is the rule that a rotation seals a deleted
// endpoint's secrets again too: EndpointGet still returns a deleted
// endpoint, secrets opened, so a row left under the old key would stop
// reading the day that key is retired.
func testSecretsRotateDeleted(t *testing.T, b Backend) {
	t.Run("rotation seals a deleted endpoint's row too, which still reads with only the new key", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		oldBox, newBox := newSecretBox(t), newSecretBox(t)
		s, db := encryptedStore(t, b, oldBox)
		for _, e := range []storage.Endpoint{secretEndpoint("ep_live", secretV1), secretEndpoint("ep_gone", secretV1a)} {
			if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: e}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.EndpointDelete(ctx, storage.EndpointDeleteParams{ID: "ep_gone"}); err != nil {
			t.Fatal(err)
		}

		res, err := keeper(t, s).SecretsEncrypt(ctx, newBox)
		if err != nil {
			t.Fatal(err)
		}
		// Only the new key from here on: the old one is retired.
		rotated := db.Open(t, storage.WithSecretBox(newBox))
		for _, w := range []struct{ id, secret string }{{"ep_gone", secretV1a}, {"ep_live", secretV1}} {
			e, err := rotated.EndpointGet(ctx, w.id)
			if err != nil {
				t.Fatalf("read %s with only the new key after the rotation: %v", w.id, err)
			}
			wantPlainSecrets(t, e, w.secret)
			wantSealedUnder(t, db, w.id, newBox)
		}
		if res != (storage.SecretsEncryptResult{From: oldBox.KeyID(), To: newBox.KeyID(), Endpoints: 2}) {
			t.Fatalf("rotation = %+v, want both endpoints, the deleted one too, from %s to %s", res, oldBox.KeyID(), newBox.KeyID())
		}
		gone, err := rotated.EndpointGet(ctx, "ep_gone")
		if err != nil || gone.DeletedAt == nil {
			t.Fatalf("EndpointGet(ep_gone) = deleted at %v, %v; want the deleted endpoint", gone.DeletedAt, err)
		}
	})
}

// headerValue is the credential the suite's custom headers carry: found in
// a raw row, it means the headers were not sealed.
const headerValue = "Bearer hdr-credential-7f3a9c"

func headerEndpoint(id string) storage.Endpoint {
	e := secretEndpoint(id, secretV1)
	e.Headers = []storage.Header{
		storage.NewHeader("Authorization", headerValue),
		storage.NewHeader("X-Tenant", "acme"),
		storage.NewHeader("x-a", "first-by-order"),
	}
	return e
}

func rawHeaders(t *testing.T, db Database, id string) string {
	t.Helper()
	raw, err := db.QueryString(t.Context(), fmt.Sprintf("SELECT CAST(headers AS TEXT) FROM webhook_endpoints WHERE id = '%s'", id))
	if err != nil {
		t.Fatalf("read the raw headers of %s: %v", id, err)
	}
	return raw
}

// wantHeaders fails unless e's headers are want, as "Name: value", in order.
func wantHeaders(t *testing.T, what string, e storage.Endpoint, want ...string) {
	t.Helper()
	got := make([]string, len(e.Headers))
	for i, h := range e.Headers {
		got[i] = h.Name + ": " + h.Reveal()
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || e.Headers == nil {
		t.Fatalf("%s: endpoint %s headers = %q, want %q", what, e.ID, got, want)
	}
}

func testHeaders(t *testing.T, b Backend) {
	all := []string{"Authorization: " + headerValue, "X-Tenant: acme", "x-a: first-by-order"}
	for _, tc := range []struct {
		name string
		box  bool
	}{{"in plaintext", false}, {"sealed", true}} {
		t.Run("custom headers round-trip in order, "+tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var (
				s   storage.Store
				db  Database
				box *secretbox.Box
			)
			if tc.box {
				box = newSecretBox(t)
				s, db = encryptedStore(t, b, box)
			} else {
				db = b.NewDatabase(t)
				s = db.Open(t)
				if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
					t.Fatal(err)
				}
			}
			created, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: headerEndpoint("ep_hdr")})
			if err != nil {
				t.Fatal(err)
			}
			wantHeaders(t, "create", created.Endpoint, all...)
			bare, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: secretEndpoint("ep_bare", secretV1)})
			if err != nil {
				t.Fatal(err)
			}
			wantHeaders(t, "create without headers", bare.Endpoint)
			if raw := rawHeaders(t, db, "ep_hdr"); tc.box {
				if strings.Contains(raw, headerValue) || strings.Contains(raw, "acme") || strings.Contains(raw, "Authorization") {
					t.Fatalf("the raw headers hold a name or value in plaintext: %s", raw)
				}
				if !strings.Contains(raw, secretbox.Header(box.KeyID())) {
					t.Fatalf("the raw headers are not sealed under key %s: %s", box.KeyID(), raw)
				}
				wantSealedUnder(t, db, "ep_hdr", box)
			} else if !strings.Contains(raw, headerValue) {
				t.Fatalf("the raw headers without a key should be plaintext JSON: %s", raw)
			}

			got, err := s.EndpointGet(ctx, "ep_hdr")
			if err != nil {
				t.Fatal(err)
			}
			wantHeaders(t, "get", got, all...)
			got.Headers = []storage.Header{storage.NewHeader("X-Tenant", "globex"), storage.NewHeader("Authorization", "Basic other")}
			updated, err := s.EndpointUpdate(ctx, got)
			if err != nil {
				t.Fatal(err)
			}
			wantHeaders(t, "update", updated, "X-Tenant: globex", "Authorization: Basic other")
			list, err := s.EndpointList(ctx)
			if err != nil || len(list) != 2 {
				t.Fatalf("EndpointList = %d endpoints, %v", len(list), err)
			}
			wantHeaders(t, "list", list[1], "X-Tenant: globex", "Authorization: Basic other")
			page, err := s.EndpointListPage(ctx, storage.EndpointListParams{})
			if err != nil || len(page) != 2 {
				t.Fatalf("EndpointListPage = %d endpoints, %v", len(page), err)
			}
			wantHeaders(t, "list page", page[0], "X-Tenant: globex", "Authorization: Basic other")

			// The worker's read: a claim carries the endpoint, headers opened.
			sub := storage.NewID("sub")
			if _, err := s.EventCreate(ctx, storage.Event{Type: "submission.received", FormID: "form_1", SubmissionID: sub, Payload: submissionPayload(sub, "form_1")}); err != nil {
				t.Fatal(err)
			}
			claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 5, Lease: lease, Now: time.Now().Add(time.Minute)})
			if err != nil || len(claims) != 2 {
				t.Fatalf("DeliveryClaim = %d claims, %v", len(claims), err)
			}
			for _, c := range claims {
				if c.Endpoint.ID == "ep_hdr" {
					wantHeaders(t, "claim", c.Endpoint, "X-Tenant: globex", "Authorization: Basic other")
				}
			}

			updated.Headers = nil
			cleared, err := s.EndpointUpdate(ctx, updated)
			if err != nil {
				t.Fatal(err)
			}
			wantHeaders(t, "update to none", cleared)
			if raw := rawHeaders(t, db, "ep_hdr"); raw != "[]" {
				t.Fatalf("the raw headers of an endpoint without any are %s, want []", raw)
			}
		})
	}

	t.Run("header names are unique ignoring case", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, b)
		e := secretEndpoint("ep_dup", secretV1)
		e.Headers = []storage.Header{storage.NewHeader("X-Key", headerValue), storage.NewHeader("x-key", "two")}
		_, err := s.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: e})
		if !errors.Is(err, storage.ErrInvalid) || !strings.Contains(err.Error(), "x-key") {
			t.Fatalf("create with a name given twice: err = %v, want ErrInvalid naming it", err)
		}
		if strings.Contains(err.Error(), headerValue) {
			t.Fatalf("the error holds the header's value: %v", err)
		}
	})

	t.Run("encrypting the secrets seals the headers, and the database refuses them in plaintext", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		db := b.NewDatabase(t)
		plain := db.Open(t)
		if _, err := plain.Migrate(ctx, storage.MigrateParams{}); err != nil {
			t.Fatal(err)
		}
		if _, err := plain.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: headerEndpoint("ep_old")}); err != nil {
			t.Fatal(err)
		}
		box := newSecretBox(t)
		sealed := db.Open(t, storage.WithSecretBox(box))
		if _, err := keeper(t, sealed).SecretsEncrypt(ctx, box); err != nil {
			t.Fatal(err)
		}
		if raw := rawHeaders(t, db, "ep_old"); strings.Contains(raw, headerValue) || !strings.Contains(raw, secretbox.Header(box.KeyID())) {
			t.Fatalf("after SecretsEncrypt the raw headers are %s, want them sealed under %s", raw, box.KeyID())
		}
		got, err := sealed.EndpointGet(ctx, "ep_old")
		if err != nil {
			t.Fatal(err)
		}
		wantHeaders(t, "get after encrypt", got, all...)
		if err := db.Exec(ctx, `UPDATE webhook_endpoints SET headers = '[{"name":"X-Leak","value":"plain"}]' WHERE id = 'ep_old'`); err == nil {
			t.Fatal("the database took plaintext headers while a secrets key is recorded")
		}
		// A row sealed for another endpoint does not open here.
		if _, err := sealed.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: secretEndpoint("ep_other", secretV1)}); err != nil {
			t.Fatal(err)
		}
		if err := db.Exec(ctx, `UPDATE webhook_endpoints SET headers = (SELECT headers FROM webhook_endpoints WHERE id = 'ep_old') WHERE id = 'ep_other'`); err != nil {
			t.Fatal(err)
		}
		_, err = sealed.EndpointGet(ctx, "ep_other")
		if !errors.Is(err, storage.ErrSecretsKey) || strings.Contains(err.Error(), headerValue) {
			t.Fatalf("moved headers: err = %v, want ErrSecretsKey without the value", err)
		}
	})
}
