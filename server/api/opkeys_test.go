package api_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/storage"
)

// keyed sends an admin POST with an Idempotency-Key.
func (f *fixture) keyed(path, key string, body any) response {
	f.t.Helper()
	return f.send(req{method: "POST", path: path, token: adminToken, body: body, header: map[string]string{api.HeaderIdempotencyKey: key}})
}

// wantRepeat checks that r is a repeat's answer: 200, marked replayed.
func wantRepeat(t *testing.T, r response, repeat bool) {
	t.Helper()
	if got := r.header.Get(api.HeaderIdempotentReplayed) == "true"; got != repeat {
		t.Fatalf("%s: %s is %v, want %v", r.raw, api.HeaderIdempotentReplayed, got, repeat)
	}
}

// failedDeliveries submits n times to one endpoint and fails every delivery.
func (f *fixture) failedDeliveries(n int) []string {
	f.t.Helper()
	var ids []string
	for range n {
		ids = append(ids, f.submit("contact", map[string]any{"a": 1}).must(f.t, http.StatusAccepted).list("deliveries")[0].(string))
	}
	f.failAll(ids)
	return ids
}

// failAll claims and fails the deliveries ids, which must be all that is due.
func (f *fixture) failAll(ids []string) {
	f.t.Helper()
	out := map[string]storage.OutcomeKind{}
	for _, id := range ids {
		out[id] = storage.OutcomePermanent
	}
	settle(f.t, f.store, out)
}

func TestRotateSecretIdempotencyKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		id, _ := f.createEndpoint(map[string]any{"url": "https://hooks.example.com/in"})
		path := "/v1/endpoints/" + id + "/rotate-secret"
		secrets := func() int {
			e, err := f.store.EndpointGet(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			return len(e.Secrets)
		}

		first := f.keyed(path, "rot-1", nil).must(t, http.StatusOK)
		wantRepeat(t, first, false)
		again := f.keyed(path, "rot-1", `{}`).must(t, http.StatusOK)
		wantRepeat(t, again, true)
		if again.str("secret") != first.str("secret") || again.str("previous_secrets_expire_at") != first.str("previous_secrets_expire_at") || again.str("id") != id {
			t.Fatalf("the repeat answered %s, want the first rotation's secret and expiry: %s", again.raw, first.raw)
		}
		if n := secrets(); n != 2 {
			t.Fatalf("%d secrets after a rotation and its repeat, want 2", n)
		}

		other, _ := f.createEndpoint(map[string]any{"url": "https://hooks.example.com/other"})
		if code, _ := f.keyed("/v1/endpoints/"+other+"/rotate-secret", "rot-1", nil).must(t, http.StatusUnprocessableEntity).errorCode(t); code != "idempotency_key_reused" {
			t.Fatalf("the key on another endpoint answered %s", code)
		}
		if code, _ := f.keyed(path, "a b", nil).must(t, http.StatusBadRequest).errorCode(t); code != "invalid_idempotency_key" {
			t.Fatalf("a malformed key answered %s", code)
		}

		// Rotated again without the key: the first key's secret no longer
		// signs alone, and is not handed out again.
		f.admin("POST", path, nil).must(t, http.StatusOK)
		replaced := f.keyed(path, "rot-1", nil).must(t, http.StatusConflict)
		if code, msg := replaced.errorCode(t); code != "secret_rotated" || !strings.Contains(msg, "new key") {
			t.Fatalf("a repeat after a later rotation answered %s: %s", code, msg)
		}
		if strings.Contains(string(replaced.raw), first.str("secret")) {
			t.Fatal("the refusal shows the replaced secret")
		}
		if n := secrets(); n != 3 {
			t.Fatalf("%d secrets, want 3: the refused repeat must not rotate", n)
		}

		// Racing rotations with one key rotate once.
		const n = 8
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			shown    = map[string]bool{}
			repeats  int
			statuses []int
		)
		for range n {
			wg.Go(func() {
				r := f.keyed("/v1/endpoints/"+other+"/rotate-secret", "rot-2", nil)
				mu.Lock()
				defer mu.Unlock()
				statuses = append(statuses, r.status)
				shown[r.str("secret")] = true
				if r.header.Get(api.HeaderIdempotentReplayed) == "true" {
					repeats++
				}
			})
		}
		wg.Wait()
		for _, s := range statuses {
			if s != http.StatusOK {
				t.Fatalf("racing rotations answered %v, want all 200", statuses)
			}
		}
		if len(shown) != 1 || repeats != n-1 {
			t.Fatalf("%d racing rotations with one key showed %d secrets with %d repeats, want 1 secret and %d repeats", n, len(shown), repeats, n-1)
		}

		f.admin("DELETE", "/v1/endpoints/"+other, nil).must(t, http.StatusOK)
		if code, _ := f.keyed("/v1/endpoints/"+other+"/rotate-secret", "rot-2", nil).must(t, http.StatusGone).errorCode(t); code != "endpoint_deleted" {
			t.Fatalf("a repeat after the endpoint was deleted answered %s", code)
		}
	})
}

func TestReplayIdempotencyKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		f.createEndpoint(map[string]any{"url": "https://hooks.example.com/in"})
		ids := f.failedDeliveries(2)
		path := "/v1/deliveries/" + ids[0] + "/replay"

		first := f.keyed(path, "replay-1", nil).must(t, http.StatusOK)
		wantRepeat(t, first, false)
		if first.str("state") != "pending" {
			t.Fatalf("the replay answered %s", first.raw)
		}
		// The replayed delivery fails again before the client retries.
		f.failAll(ids[:1])
		again := f.keyed(path, "replay-1", nil).must(t, http.StatusOK)
		wantRepeat(t, again, true)
		if again.str("id") != ids[0] || again.str("state") != "failed" {
			t.Fatalf("the repeat answered %s, want the delivery as it is now, failed and not replayed", again.raw)
		}
		if rs := f.admin("GET", "/v1/deliveries/"+ids[0]+"/replays", nil).must(t, http.StatusOK).list("replays"); len(rs) != 1 {
			t.Fatalf("%d replay records after a replay and its repeat, want 1", len(rs))
		}

		if code, _ := f.keyed("/v1/deliveries/"+ids[1]+"/replay", "replay-1", nil).must(t, http.StatusUnprocessableEntity).errorCode(t); code != "idempotency_key_reused" {
			t.Fatalf("the key on another delivery answered %s", code)
		}
		if code, _ := f.send(req{method: "POST", path: path, token: adminToken,
			header: map[string]string{api.HeaderIdempotencyKey: strings.Repeat("k", 256)}}).must(t, http.StatusBadRequest).errorCode(t); code != "invalid_idempotency_key" {
			t.Fatalf("an overlong key answered %s", code)
		}
		if f.count("webhook_delivery_replays") != 1 {
			t.Fatal("a refused keyed replay replayed")
		}
	})
}

func TestBulkReplayIdempotencyKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		f.createEndpoint(map[string]any{"url": "https://hooks.example.com/in"})
		ids := f.failedDeliveries(2)

		first := f.keyed("/v1/deliveries/replay", "bulk-1", map[string]any{"state": "failed"}).must(t, http.StatusOK)
		wantRepeat(t, first, false)
		f.failAll(ids)
		// The same request with the default left out.
		again := f.keyed("/v1/deliveries/replay", "bulk-1", `{}`).must(t, http.StatusOK)
		wantRepeat(t, again, true)
		if string(again.raw) != string(first.raw) || first.body["count"] != float64(2) {
			t.Fatalf("the repeat answered %s, want the first answer %s counting 2", again.raw, first.raw)
		}
		if n := f.count("webhook_delivery_replays"); n != 2 {
			t.Fatalf("%d replay records after a bulk replay and its repeat, want 2", n)
		}
		if code, _ := f.keyed("/v1/deliveries/replay", "bulk-1", map[string]any{"state": "delivered"}).must(t, http.StatusUnprocessableEntity).errorCode(t); code != "idempotency_key_reused" {
			t.Fatalf("the key with another body answered %s", code)
		}
		if code, _ := f.send(req{method: "POST", path: "/v1/deliveries/replay", token: adminToken, body: `{}`,
			header: map[string]string{api.HeaderIdempotencyKey: "a b"}}).must(t, http.StatusBadRequest).errorCode(t); code != "invalid_idempotency_key" {
			t.Fatalf("a malformed key answered %s", code)
		}
	})
}

// Disabling and enabling are idempotent by nature, so their keys are
// checked for form but need no record.
func TestDisableEnableTakeAKeyWithoutARecord(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		id, _ := f.createEndpoint(map[string]any{"url": "https://hooks.example.com/in"})
		for _, action := range []string{"disable", "enable"} {
			path := "/v1/endpoints/" + id + "/" + action
			if code, _ := f.keyed(path, "a b", nil).must(t, http.StatusBadRequest).errorCode(t); code != "invalid_idempotency_key" {
				t.Fatalf("%s with a malformed key answered %s", action, code)
			}
			one := f.keyed(path, "switch-1", nil).must(t, http.StatusOK)
			two := f.keyed(path, "switch-1", nil).must(t, http.StatusOK)
			if string(one.raw) != string(two.raw) {
				t.Fatalf("%s twice answered %s, then %s", action, one.raw, two.raw)
			}
		}
		if n := f.count("webhook_idempotency_keys"); n != 0 {
			t.Fatalf("%d keys recorded for disable and enable, want none", n)
		}
	})
}
