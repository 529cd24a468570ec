package storagetest

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func testEndpoints(t *testing.T, b Backend) {
	t.Run("an endpoint round-trips every field, secrets included", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		exp := time.Now().UTC().Add(24 * time.Hour).Truncate(time.Millisecond)
		created := f.endpoint(func(e *storage.Endpoint) {
			e.URL = "https://example.com/a?b=c"
			e.Config = map[string]string{"header.x-team": "forms"}
			e.EventTypes = []string{"submission.received"}
			e.FormIDs = []string{"form_1", "form_2"}
			e.Description = "CRM sync"
			e.Secrets = []storage.Secret{storage.NewSecret("whsec_bmV3", nil), storage.NewSecret("whsec_b2xk", &exp)}
		})
		if created.ID == "" || created.CreatedAt.IsZero() || created.UpdatedAt.IsZero() {
			t.Fatalf("create did not fill id and timestamps: %+v", created)
		}
		got, err := f.store.EndpointGet(f.ctx, created.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.URL != created.URL || got.Transport != "http" || got.Config["header.x-team"] != "forms" ||
			len(got.EventTypes) != 1 || len(got.FormIDs) != 2 || got.FormIDs[1] != "form_2" || got.Description != "CRM sync" ||
			got.DisabledAt != nil || !got.CreatedAt.Equal(created.CreatedAt) {
			t.Fatalf("endpoint round trip:\ngot  %+v\nwant %+v", got, created)
		}
		if len(got.Secrets) != 2 || got.Secrets[0].Reveal() != "whsec_bmV3" || got.Secrets[0].ExpiresAt != nil ||
			got.Secrets[1].Reveal() != "whsec_b2xk" || got.Secrets[1].ExpiresAt == nil || !got.Secrets[1].ExpiresAt.Equal(exp) {
			t.Fatal("secrets did not round-trip")
		}
	})

	t.Run("update replaces the mutable fields, list sees it, unknown ids are not found", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		a := f.endpoint()
		bEp := f.endpoint()
		disabled := time.Now().UTC().Truncate(time.Millisecond)
		a.URL = "https://example.com/new"
		a.DisabledAt = &disabled
		a.EventTypes = nil
		a.Secrets = []storage.Secret{storage.NewSecret("whsec_cm90YXRlZA==", nil)}
		up, err := f.store.EndpointUpdate(f.ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if up.URL != a.URL || up.DisabledAt == nil || !up.DisabledAt.Equal(disabled) || up.Secrets[0].Reveal() != "whsec_cm90YXRlZA==" {
			t.Fatalf("update: %+v", up)
		}
		list, err := f.store.EndpointList(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{a.ID, bEp.ID}
		sort.Strings(ids)
		if len(list) != 2 || list[0].ID != ids[0] || list[1].ID != ids[1] {
			t.Fatalf("list = %d endpoints, want %v in id order", len(list), ids)
		}
		_, err = f.store.EndpointGet(f.ctx, "ep_missing")
		wantErr(t, err, storage.ErrNotFound, "get unknown endpoint")
		missing := a
		missing.ID = "ep_missing"
		_, err = f.store.EndpointUpdate(f.ctx, missing)
		wantErr(t, err, storage.ErrNotFound, "update unknown endpoint")
	})

	t.Run("an update based on a stale read is refused and changes nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		read := f.endpoint()
		other := f.db.Open(t)
		// Two writers, on two connections, both start from the same read.
		first, second := read, read
		first.Description = "first"
		second.Secrets = append(second.Secrets, storage.NewSecret("whsec_c2Vjb25k", nil))
		won, err := other.EndpointUpdate(f.ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		if !won.UpdatedAt.After(read.UpdatedAt) {
			t.Fatalf("updated_at did not move forward: %s then %s", read.UpdatedAt, won.UpdatedAt)
		}
		_, err = f.store.EndpointUpdate(f.ctx, second)
		wantErr(t, err, storage.ErrConflict, "update from a stale read")
		got, err := f.store.EndpointGet(f.ctx, read.ID)
		if err != nil || got.Description != "first" || len(got.Secrets) != 1 || !got.UpdatedAt.Equal(won.UpdatedAt) {
			t.Fatalf("after the refused update: %+v, %v", got, err)
		}
		// Reapplied on a fresh read it goes through; back to back, each
		// update is a new version.
		got.Secrets = second.Secrets
		again, err := f.store.EndpointUpdate(f.ctx, got)
		if err != nil || len(again.Secrets) != 2 {
			t.Fatalf("reapplied update: %+v, %v", again, err)
		}
		again.Description = "third"
		third, err := f.store.EndpointUpdate(f.ctx, again)
		if err != nil || !third.UpdatedAt.After(again.UpdatedAt) {
			t.Fatalf("back-to-back update: %+v, %v", third, err)
		}
		// A zero UpdatedAt overwrites unconditionally.
		blind := third
		blind.UpdatedAt = time.Time{}
		blind.Description = "blind"
		if _, err := f.store.EndpointUpdate(f.ctx, blind); err != nil {
			t.Fatalf("unconditional update: %v", err)
		}
	})

	t.Run("an endpoint without a transport or a secret is refused", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		_, err := f.store.EndpointCreate(f.ctx, storage.Endpoint{Transport: "http"})
		wantErr(t, err, storage.ErrInvalid, "endpoint without secret")
		_, err = f.store.EndpointCreate(f.ctx, storage.Endpoint{Secrets: []storage.Secret{storage.NewSecret("whsec_eA==", nil)}})
		wantErr(t, err, storage.ErrInvalid, "endpoint without transport")
		if list, _ := f.store.EndpointList(f.ctx); len(list) != 0 {
			t.Fatalf("refused endpoints were written: %d", len(list))
		}
	})
}

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
