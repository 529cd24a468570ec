package storagetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// testFanOut holds fan-out to what a store indexes it by (form id, every
// form, an addressed endpoint) to the rule of Endpoint.Matches, through
// every write of an endpoint and across Stores: a fan-out reads only the
// endpoints that can match, and must still find every one that does.
func testFanOut(t *testing.T, b Backend) {
	t.Run("an endpoint created on one store is matched by a fan-out on another at once", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		other := f.db.Open(t)
		for i := range 5 {
			form := fmt.Sprintf("form_%d", i)
			plain := f.endpoint(withForms(form))
			keyed, err := f.store.EndpointCreateOnce(f.ctx, storage.EndpointCreateParams{
				Endpoint: newEndpoint(withForms("form_x", form)),
				Once:     storage.Once{IdempotencyKey: "fanout:" + form, RequestHash: "h"},
			})
			if err != nil {
				t.Fatalf("EndpointCreateOnce: %v", err)
			}
			f.wantFanOut(other, form, plain.ID, keyed.Endpoint.ID)
		}
		every := f.endpoint()
		f.wantFanOut(other, "form_never_named", every.ID)
		f.wantFanOut(other, "form_3", append(f.named(other, "form_3"), every.ID)...)
	})

	t.Run("an endpoint whose forms change is matched under its new forms and not its old ones", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		other := f.db.Open(t)
		e := f.endpoint(withForms("form_old", "form_kept"))
		bystander := f.endpoint(withForms("form_old"))
		f.wantFanOut(other, "form_old", e.ID, bystander.ID)

		e = f.update(e, withForms("form_kept", "form_new"))
		f.wantIndexed(e.ID, "form_kept", "form_new")
		f.wantFanOut(other, "form_old", bystander.ID)
		f.wantFanOut(other, "form_kept", e.ID)
		f.wantFanOut(other, "form_new", e.ID)

		// Every form, then one again.
		e = f.update(e, withForms())
		f.wantIndexed(e.ID)
		f.wantFanOut(other, "form_old", e.ID, bystander.ID)
		f.wantFanOut(other, "form_anything", e.ID)
		e = f.update(e, withForms("form_last"))
		f.wantFanOut(other, "form_anything")
		f.wantFanOut(other, "form_new")
		f.wantFanOut(other, "form_last", e.ID)

		// A write that leaves the forms alone (a disable, a rotation)
		// leaves the endpoint where it was; disabled, it is matched held.
		off := f.now.Add(-time.Minute)
		e = f.update(e, func(e *storage.Endpoint) { e.DisabledAt = &off; e.Description = "paused" })
		res := f.wantFanOut(other, "form_last", e.ID)
		if !res.Deliveries[0].Held {
			t.Fatalf("delivery to the disabled endpoint %s is not held", e.ID)
		}
		e = f.update(e, func(e *storage.Endpoint) { e.DisabledAt = nil })
		next, fresh, until := rotated(e, f.now)
		next.FormIDs = []string{"form_last", "form_rotated"}
		rot, err := f.store.EndpointRotateOnce(f.ctx, storage.EndpointRotateParams{
			Endpoint: next, SecretSHA256: storage.SecretFingerprint(fresh), PreviousSecretsExpireAt: until,
			Once: storage.Once{IdempotencyKey: "fanout:rotate", RequestHash: "h"}, Now: f.now,
		})
		if err != nil {
			t.Fatalf("EndpointRotateOnce: %v", err)
		}
		f.wantFanOut(other, "form_last", rot.Endpoint.ID)
		f.wantFanOut(other, "form_rotated", rot.Endpoint.ID)
		f.wantIndexed(rot.Endpoint.ID, "form_last", "form_rotated")
	})

	t.Run("a deleted endpoint is not matched, by form, for every form or by address", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		other := f.db.Open(t)
		gone := f.endpoint(withForms("form_d"))
		goneEvery := f.endpoint()
		kept := f.endpoint(withForms("form_d"))
		f.wantFanOut(other, "form_d", gone.ID, goneEvery.ID, kept.ID)
		for _, e := range []storage.Endpoint{gone, goneEvery} {
			if _, err := f.store.EndpointDelete(f.ctx, storage.EndpointDeleteParams{ID: e.ID, Force: true}); err != nil {
				t.Fatalf("EndpointDelete(%s): %v", e.ID, err)
			}
		}
		f.wantIndexed(gone.ID)
		f.wantFanOut(other, "form_d", kept.ID)
		f.wantFanOut(other, "form_elsewhere")
		_, err := other.EventCreate(f.ctx, storage.Event{Type: "endpoint.disabled", Payload: []byte(`{}`), EndpointID: gone.ID})
		wantErr(t, err, storage.ErrInvalid, "an event addressed to a deleted endpoint")
	})

	t.Run("endpoints of every form match every form; an event with no form only them", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		every := f.endpoint()
		everyTyped := f.endpoint(func(e *storage.Endpoint) { e.EventTypes = []string{"submission.received"} })
		f.endpoint(func(e *storage.Endpoint) { e.EventTypes = []string{"form.deleted"} })
		formA := f.endpoint(withForms("form_a"))
		formATyped := f.endpoint(withForms("form_a"), func(e *storage.Endpoint) { e.EventTypes = []string{"submission.received"} })
		f.endpoint(withForms("form_a"), func(e *storage.Endpoint) { e.EventTypes = []string{"form.deleted"} })
		f.wantFanOut(f.store, "form_a", every.ID, everyTyped.ID, formA.ID, formATyped.ID)
		f.wantFanOut(f.store, "form_b", every.ID, everyTyped.ID)
		f.wantFanOut(f.store, "", every.ID, everyTyped.ID)
	})

	t.Run("an addressed event goes to its endpoint alone, whatever its forms and types", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		f.endpoint(withForms("form_a"))
		target := f.endpoint(withForms("form_z"), func(e *storage.Endpoint) { e.EventTypes = []string{"form.deleted"} })
		res, err := f.store.EventCreate(f.ctx, storage.Event{Type: "endpoint.disabled", FormID: "form_a",
			Payload: []byte(`{}`), EndpointID: target.ID})
		if err != nil {
			t.Fatalf("EventCreate addressed to %s: %v", target.ID, err)
		}
		if got := fannedOutTo(res.Deliveries); !slices.Equal(got, []string{target.ID}) {
			t.Fatalf("an event addressed to %s went to %v", target.ID, got)
		}
	})

	t.Run("creates of many forms batched together each reach only their own form's endpoints", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		every := f.endpoint()
		const forms = 16
		own := map[string]string{}
		for i := range forms {
			form := fmt.Sprintf("form_%02d", i)
			own[form] = f.endpoint(withForms(form)).ID
		}
		type got struct {
			form string
			res  storage.EventCreateResult
			err  error
		}
		out := make(chan got, 4*forms)
		var wg sync.WaitGroup
		for i := range 4 * forms {
			form := fmt.Sprintf("form_%02d", i%forms)
			if i%5 == 4 {
				form = "" // some of no form, in the same batches
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sub := storage.NewID("sub")
				res, err := f.store.EventCreate(context.Background(), storage.Event{Type: "submission.received",
					FormID: form, SubmissionID: sub, Payload: submissionPayload(sub, form)})
				out <- got{form, res, err}
			}()
		}
		wg.Wait()
		close(out)
		for g := range out {
			if g.err != nil {
				t.Fatalf("EventCreate(%q): %v", g.form, g.err)
			}
			want := []string{every.ID}
			if g.form != "" {
				want = append(want, own[g.form])
			}
			slices.Sort(want)
			if got := fannedOutTo(g.res.Deliveries); !slices.Equal(got, want) {
				t.Fatalf("an event of form %q went to %v, want %v", g.form, got, want)
			}
		}
	})
}

// testFanOutAfterUpgrade upgrades a database whose endpoints were written
// before migration 13 indexed them by form, and fans out on it.
func testFanOutAfterUpgrade(t *testing.T, b Backend) {
	const indexed = 13 // 0013_endpoint_forms
	ctx := t.Context()
	db := b.NewDatabase(t)
	s := db.Open(t)
	if _, err := s.Migrate(ctx, storage.MigrateParams{To: indexed - 1}); err != nil {
		t.Fatal(err)
	}
	secrets, err := storage.EncodeSecrets([]storage.Secret{storage.NewSecret("whsec_b2xkc2VjcmV0", nil)})
	if err != nil {
		t.Fatal(err)
	}
	ts := db.TimeLiteral(time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond))
	var seed strings.Builder
	for _, r := range []struct{ id, forms, types, deleted string }{
		{"ep_a", `["form_a"]`, `[]`, "NULL"},
		{"ep_ab", `["form_b","form_a"]`, `[]`, "NULL"},
		{"ep_every", `[]`, `[]`, "NULL"},
		{"ep_typed", `["form_a"]`, `["form.deleted"]`, "NULL"},
		{"ep_gone", `["form_a"]`, `[]`, ts},
		{"ep_gone_every", `[]`, `[]`, ts},
	} {
		fmt.Fprintf(&seed, "INSERT INTO webhook_endpoints (id, transport, url, secrets, created_at, updated_at, form_ids, event_types, deleted_at) VALUES ('%s', 'http', 'https://old.example/hook', '%s', %s, %s, '%s', '%s', %s);\n",
			r.id, secrets, ts, ts, r.forms, r.types, r.deleted)
	}
	if err := db.Exec(ctx, seed.String()); err != nil {
		t.Fatalf("seed endpoints at version %d: %v", indexed-1, err)
	}
	if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	f := &fixture{t: t, ctx: ctx, store: s, db: db, now: time.Now().UTC().Add(time.Minute).Truncate(time.Millisecond)}
	f.wantFanOut(s, "form_a", "ep_a", "ep_ab", "ep_every")
	f.wantFanOut(s, "form_b", "ep_ab", "ep_every")
	f.wantFanOut(s, "form_c", "ep_every")
	f.wantFanOut(s, "", "ep_every")
	// And the old rows are kept as new ones are.
	e, err := s.EndpointGet(ctx, "ep_a")
	if err != nil {
		t.Fatal(err)
	}
	f.update(e, withForms("form_c"))
	f.wantFanOut(s, "form_a", "ep_ab", "ep_every")
	f.wantFanOut(s, "form_c", "ep_a", "ep_every")
	f.wantIndexed("ep_ab", "form_a", "form_b")
	f.wantIndexed("ep_gone")
}

// wantIndexed requires the form index to list the endpoint id under
// exactly forms. A fan-out matches what it reads again, so a row left
// behind would cost reads but change no delivery: this is how it shows.
func (f *fixture) wantIndexed(id string, forms ...string) {
	f.t.Helper()
	for _, form := range forms {
		n, err := f.db.QueryInt(f.ctx, fmt.Sprintf("SELECT count(*) FROM webhook_endpoint_forms WHERE endpoint_id = '%s' AND form_id = '%s'",
			sqlQuote(id), sqlQuote(form)))
		if err != nil || n != 1 {
			f.t.Fatalf("endpoint %s indexed under %s %d times, %v; want once", id, form, n, err)
		}
	}
	n, err := f.db.QueryInt(f.ctx, fmt.Sprintf("SELECT count(*) FROM webhook_endpoint_forms WHERE endpoint_id = '%s'", sqlQuote(id)))
	if err != nil || n != int64(len(forms)) {
		f.t.Fatalf("endpoint %s indexed under %d forms, %v; want %d: %q", id, n, err, len(forms), forms)
	}
}

// newEndpoint is an endpoint as the fixture creates it, not written.
func newEndpoint(mutate ...func(*storage.Endpoint)) storage.Endpoint {
	e := storage.Endpoint{
		Transport: "http",
		URL:       "https://receiver.example/hook",
		Secrets:   []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)},
	}
	for _, m := range mutate {
		m(&e)
	}
	return e
}

// withForms sets an endpoint's form ids; none is every form.
func withForms(forms ...string) func(*storage.Endpoint) {
	return func(e *storage.Endpoint) { e.FormIDs = forms }
}

// update writes e changed by mutate through the fixture's store, on the
// version read.
func (f *fixture) update(e storage.Endpoint, mutate ...func(*storage.Endpoint)) storage.Endpoint {
	f.t.Helper()
	for _, m := range mutate {
		m(&e)
	}
	out, err := f.store.EndpointUpdate(f.ctx, e)
	if err != nil {
		f.t.Fatalf("EndpointUpdate(%s): %v", e.ID, err)
	}
	return out
}

// wantFanOut creates a submission event of form through s and requires it
// to go to exactly the endpoints want.
func (f *fixture) wantFanOut(s storage.Store, form string, want ...string) storage.EventCreateResult {
	f.t.Helper()
	sub := storage.NewID("sub")
	res, err := s.EventCreate(f.ctx, storage.Event{Type: "submission.received", FormID: form,
		SubmissionID: sub, Payload: submissionPayload(sub, form)})
	if err != nil {
		f.t.Fatalf("EventCreate(%q): %v", form, err)
	}
	want = slices.Sorted(slices.Values(want))
	if got := fannedOutTo(res.Deliveries); !slices.Equal(got, want) {
		f.t.Fatalf("an event of form %q went to %v, want %v", form, got, want)
	}
	return res
}

// named lists the endpoints, read through s, that name form.
func (f *fixture) named(s storage.Store, form string) []string {
	f.t.Helper()
	es, err := s.EndpointList(f.ctx)
	if err != nil {
		f.t.Fatalf("EndpointList: %v", err)
	}
	var out []string
	for _, e := range es {
		if slices.Contains(e.FormIDs, form) {
			out = append(out, e.ID)
		}
	}
	return out
}

// fannedOutTo lists the endpoints of ds in id order.
func fannedOutTo(ds []storage.Delivery) []string {
	return slices.Sorted(slices.Values(deliveryEndpoints(ds)))
}
