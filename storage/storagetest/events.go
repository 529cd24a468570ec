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

func testEvents(t *testing.T, b Backend) {
	t.Run("an event fans out to every endpoint that matches its type and form, held for a disabled one", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		all := f.endpoint()
		formA := f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{"form_a"} })
		f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{"form_b"} })
		typed := f.endpoint(func(e *storage.Endpoint) { e.EventTypes = []string{"submission.received"} })
		f.endpoint(func(e *storage.Endpoint) { e.EventTypes = []string{"form.deleted"} })
		off := time.Now().UTC()
		paused := f.endpoint(func(e *storage.Endpoint) { e.DisabledAt = &off })

		res := f.event("form_a")
		if res.Duplicate {
			t.Fatal("a first event reported as duplicate")
		}
		got := map[string]bool{}
		for _, d := range res.Deliveries {
			got[d.EndpointID] = true
			wantState(t, d, storage.StatePending, 0, 0)
			if d.Held != (d.EndpointID == paused.ID) {
				t.Fatalf("delivery to %s held = %v, want held only for the disabled endpoint %s", d.EndpointID, d.Held, paused.ID)
			}
			if d.EventID != res.Event.ID || d.ClaimExpiresAt != nil || d.CompletedAt != nil || d.ID == "" {
				t.Fatalf("new delivery = %+v", d)
			}
			stored := f.get(d.ID)
			if !sameDelivery(stored, d) {
				t.Fatalf("stored delivery differs from returned:\nstored %+v\nreturned %+v", stored, d)
			}
		}
		want := []string{all.ID, formA.ID, typed.ID, paused.ID}
		if len(got) != len(want) || len(res.Deliveries) != len(want) {
			t.Fatalf("fanned out to %v, want exactly %v", got, want)
		}
		for _, id := range want {
			if !got[id] {
				t.Fatalf("no delivery for matching endpoint %s", id)
			}
		}
		ev, err := f.store.EventGet(f.ctx, res.Event.ID)
		if err != nil || ev.SubmissionID != res.Event.SubmissionID || ev.FormID != "form_a" || string(ev.Payload) != string(res.Event.Payload) {
			t.Fatalf("EventGet = %+v, %v", ev, err)
		}
	})

	t.Run("an idempotency key seen before returns the first event and writes nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		f.endpoint()
		ev := storage.Event{Type: "submission.received", FormID: "f", Payload: []byte(`{"n":1}`), IdempotencyKey: "key-1", TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
		first, err := f.store.EventCreate(f.ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		ev.Payload = []byte(`{"n":2}`)
		again, err := f.store.EventCreate(f.ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		if !again.Duplicate || again.Event.ID != first.Event.ID || string(again.Event.Payload) != `{"n":1}` || again.Event.TraceParent != ev.TraceParent {
			t.Fatalf("second create = %+v, want the first event marked duplicate", again.Event)
		}
		if len(again.Deliveries) != 2 {
			t.Fatalf("duplicate returned %d deliveries, want the 2 first made", len(again.Deliveries))
		}
		if n := f.count("SELECT count(*) FROM webhook_deliveries"); n != 2 {
			t.Fatalf("deliveries after a duplicate = %d, want 2", n)
		}
		if n := f.count("SELECT count(*) FROM webhook_events"); n != 1 {
			t.Fatalf("events after a duplicate = %d, want 1", n)
		}
	})

	t.Run("concurrent creates with one idempotency key make one event", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		others := []storage.Store{f.store, f.db.Open(t), f.db.Open(t)}
		const n = 12
		var wg sync.WaitGroup
		results := make([]storage.EventCreateResult, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				results[i], errs[i] = others[i%len(others)].EventCreate(f.ctx, storage.Event{Type: "t", Payload: []byte(`{}`), IdempotencyKey: "same"})
			})
		}
		wg.Wait()
		fresh := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("create %d: %v", i, errs[i])
			}
			if !results[i].Duplicate {
				fresh++
			}
			if results[i].Event.ID != results[0].Event.ID {
				t.Fatal("concurrent creates with one key returned different events")
			}
		}
		if fresh != 1 {
			t.Fatalf("%d creates reported a new event, want exactly 1", fresh)
		}
		if got := f.count("SELECT count(*) FROM webhook_deliveries"); got != 1 {
			t.Fatalf("deliveries = %d, want 1", got)
		}
	})

	t.Run("concurrent creates succeed or fail each alone", func(t *testing.T) {
		// SQLite writes creates that arrive together in one transaction;
		// whatever a store does, a create that fails must take no other
		// create with it, and each caller must get its own answer.
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		f.endpoint()
		stores := []storage.Store{f.store, f.store, f.store, f.db.Open(t)}
		const n = 48
		kinds := []string{"plain", "addressed to nothing", "one id", "one key"}
		start := make(chan struct{})
		var wg sync.WaitGroup
		results := make([]storage.EventCreateResult, n)
		errs := make([]error, n)
		for i := range n {
			ev := storage.Event{Type: "submission.received", FormID: "f", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
			switch kinds[i%len(kinds)] {
			case "addressed to nothing":
				ev.EndpointID = "ep_missing"
			case "one id":
				ev.ID = "evt_one_id"
			case "one key":
				ev.IdempotencyKey = "one-key"
			}
			wg.Go(func() {
				<-start
				results[i], errs[i] = stores[i%len(stores)].EventCreate(f.ctx, ev)
			})
		}
		close(start)
		wg.Wait()
		var stored []storage.EventCreateResult
		oneID, oneKey := 0, 0
		for i := range n {
			kind := kinds[i%len(kinds)]
			switch {
			case kind == "addressed to nothing":
				wantErr(t, errs[i], storage.ErrInvalid, "create addressed to a missing endpoint")
			case kind == "one id" && errs[i] != nil:
				wantErr(t, errs[i], storage.ErrConflict, "create reusing an event id")
			case errs[i] != nil:
				t.Fatalf("create %d (%s): %v", i, kind, errs[i])
			case kind == "one key" && results[i].Duplicate:
			default:
				if kind == "one id" {
					oneID++
				}
				if kind == "one key" {
					oneKey++
				}
				if want := fmt.Sprintf(`{"n":%d}`, i); string(results[i].Event.Payload) != want {
					t.Fatalf("create %d got the result of another create: payload %s, want %s", i, results[i].Event.Payload, want)
				}
				stored = append(stored, results[i])
			}
		}
		if oneID != 1 || oneKey != 1 {
			t.Fatalf("creates sharing an id stored %d events and sharing a key %d, want 1 each", oneID, oneKey)
		}
		for _, res := range stored {
			got, err := f.store.EventGet(f.ctx, res.Event.ID)
			if err != nil || string(got.Payload) != string(res.Event.Payload) {
				t.Fatalf("event %s reported stored: read back %s, %v", res.Event.ID, got.Payload, err)
			}
			if len(res.Deliveries) != 2 {
				t.Fatalf("event %s has %d deliveries, want 2", res.Event.ID, len(res.Deliveries))
			}
			for _, d := range res.Deliveries {
				if got, err := f.store.DeliveryGet(f.ctx, d.ID); err != nil || got.EventID != res.Event.ID {
					t.Fatalf("delivery %s of event %s: read back %+v, %v", d.ID, res.Event.ID, got, err)
				}
			}
		}
		if got, want := f.count("SELECT count(*) FROM webhook_events"), int64(len(stored)); got != want {
			t.Fatalf("events stored = %d, want the %d creates that succeeded", got, want)
		}
		if got, want := f.count("SELECT count(*) FROM webhook_deliveries"), int64(2*len(stored)); got != want {
			t.Fatalf("deliveries stored = %d, want %d", got, want)
		}
	})

	t.Run("creates sharing keys in any order across stores all succeed, one event per key", func(t *testing.T) {
		// Creates may share a transaction; two that write the same keys in
		// opposite orders must not deadlock each other (a retried request
		// reaching two processes at once).
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		stores := []storage.Store{f.store, f.db.Open(t)}
		const rounds, perStore, keys = 30, 8, 6
		for r := range rounds {
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, len(stores)*perStore)
			for si, st := range stores {
				for g := range perStore {
					// Store 0 walks the keys up, store 1 down.
					k := (g + r) % keys
					if si == 1 {
						k = keys - 1 - k
					}
					wg.Go(func() {
						<-start
						_, err := st.EventCreate(f.ctx, storage.Event{Type: "t", Payload: []byte(`{}`),
							IdempotencyKey: fmt.Sprintf("round-%d-key-%d", r, k)})
						errs <- err
					})
				}
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("round %d: %v", r, err)
				}
			}
		}
		if got, want := f.count("SELECT count(*) FROM webhook_events"), int64(rounds*keys); got != want {
			t.Fatalf("events = %d, want one per key: %d", got, want)
		}
	})

	t.Run("an event with no matching endpoint is stored with no deliveries", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		res := f.event("form_1")
		if len(res.Deliveries) != 0 || res.Event.ID == "" || res.Event.CreatedAt.IsZero() {
			t.Fatalf("result = %+v", res)
		}
	})

	t.Run("bad events are refused and unknown events are not found", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		f.endpoint()
		_, err := f.store.EventCreate(f.ctx, storage.Event{Type: "t", Payload: []byte(`{"a":`)})
		wantErr(t, err, storage.ErrInvalid, "event with malformed JSON")
		_, err = f.store.EventCreate(f.ctx, storage.Event{Payload: []byte(`{}`)})
		wantErr(t, err, storage.ErrInvalid, "event without type")
		if n := f.count("SELECT count(*) FROM webhook_events"); n != 0 {
			t.Fatalf("refused events were written: %d", n)
		}
		_, err = f.store.EventGet(f.ctx, "evt_missing")
		wantErr(t, err, storage.ErrNotFound, "get unknown event")
		_, err = f.store.DeliveryGet(f.ctx, "dlv_missing")
		wantErr(t, err, storage.ErrNotFound, "get unknown delivery")
		_, err = f.store.AttemptList(f.ctx, "dlv_missing")
		wantErr(t, err, storage.ErrNotFound, "attempts of unknown delivery")
		_, err = f.store.ReplayList(f.ctx, "dlv_missing")
		wantErr(t, err, storage.ErrNotFound, "replays of unknown delivery")
		d := f.event("form_1").Deliveries[0]
		if as, err := f.store.AttemptList(f.ctx, d.ID); err != nil || as == nil || len(as) != 0 {
			t.Fatalf("attempts of a fresh delivery = %v, %v; want an empty list", as, err)
		}
	})
}

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
			keyed, err := f.store.EndpointCreate(f.ctx, storage.EndpointCreateParams{
				Endpoint:    newEndpoint(withForms("form_x", form)),
				Idempotency: &storage.Idempotency{Key: "fanout:" + form, RequestHash: "h"},
			})
			if err != nil {
				t.Fatalf("keyed EndpointCreate: %v", err)
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
		rot, err := f.store.EndpointRotate(f.ctx, storage.EndpointRotateParams{
			Endpoint: next, SecretSHA256: storage.SecretFingerprint(fresh), PreviousSecretsExpireAt: until,
			Idempotency: &storage.Idempotency{Key: "fanout:rotate", RequestHash: "h"}, Now: f.now,
		})
		if err != nil {
			t.Fatalf("keyed EndpointRotate: %v", err)
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
