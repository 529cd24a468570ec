package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/storage"
)

func TestEndpointDelete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		gone, _ := f.createEndpoint(map[string]any{"url": "https://hooks.example.com/gone"})
		kept, _ := f.createEndpoint(map[string]any{"url": "https://hooks.example.com/kept"})
		f.submit("contact", map[string]any{"a": 1}).must(t, http.StatusAccepted)

		busy := f.admin("DELETE", "/v1/endpoints/"+gone, nil).must(t, http.StatusConflict)
		if code, msg := busy.errorCode(t); code != "endpoint_busy" || !strings.Contains(msg, "1 pending and 0 processing") ||
			!strings.Contains(msg, "DELETE /v1/endpoints/"+gone+"?force=true") {
			t.Fatalf("delete with a pending delivery: %s %s", code, msg)
		}
		f.admin("GET", "/v1/endpoints/"+gone, nil).must(t, http.StatusOK)
		if code, msg := f.admin("DELETE", "/v1/endpoints/"+gone+"?force=yes", nil).must(t, http.StatusBadRequest).errorCode(t); code != "invalid_parameter" || !strings.Contains(msg, `force "yes"`) {
			t.Fatalf("a force that is not a boolean: %s %s", code, msg)
		}

		del := f.admin("DELETE", "/v1/endpoints/"+gone+"?force=true", nil).must(t, http.StatusOK)
		if del.str("id") != gone || del.str("deleted_at") == "" || del.body["failed_pending"] != 1.0 || del.body["failed_processing"] != 0.0 {
			t.Fatalf("forced delete answered %s", del.raw)
		}

		got := f.admin("GET", "/v1/endpoints/"+gone, nil).must(t, http.StatusGone)
		if code, msg := got.errorCode(t); code != "endpoint_deleted" || !strings.Contains(msg, "GET /v1/deliveries?endpoint_id="+gone) {
			t.Fatalf("GET a deleted endpoint: %s %s", code, msg)
		}
		for _, r := range []struct{ method, path string }{
			{"PATCH", "/v1/endpoints/" + gone}, {"POST", "/v1/endpoints/" + gone + "/disable"},
			{"POST", "/v1/endpoints/" + gone + "/enable"}, {"POST", "/v1/endpoints/" + gone + "/rotate-secret"},
			{"DELETE", "/v1/endpoints/" + gone},
		} {
			var body any
			if r.method == "PATCH" {
				body = map[string]any{"description": "back"}
			}
			if code, _ := f.admin(r.method, r.path, body).must(t, http.StatusGone).errorCode(t); code != "endpoint_deleted" {
				t.Fatalf("%s %s on a deleted endpoint: %s", r.method, r.path, code)
			}
		}

		list := f.admin("GET", "/v1/endpoints", nil).must(t, http.StatusOK)
		if ids := endpointIDs(list); !slices.Equal(ids, []string{kept}) {
			t.Fatalf("the list after the delete: %v, want only %s", ids, kept)
		}
		ds := f.admin("GET", "/v1/deliveries?endpoint_id="+gone, nil).must(t, http.StatusOK).list("deliveries")
		if len(ds) != 1 {
			t.Fatalf("the deleted endpoint's deliveries: %v", ds)
		}
		d := ds[0].(map[string]any)
		if d["state"] != "failed" || !strings.HasPrefix(fmt.Sprint(d["unsent_reason"]), "endpoint deleted") {
			t.Fatalf("the deleted endpoint's delivery: %v", d)
		}
		replay := f.admin("POST", fmt.Sprintf("/v1/deliveries/%s/replay", d["id"]), nil).must(t, http.StatusGone)
		if code, _ := replay.errorCode(t); code != "endpoint_deleted" {
			t.Fatalf("replay of the deleted endpoint's delivery: %s", replay.raw)
		}
		if r := f.submit("contact", map[string]any{"a": 2}).must(t, http.StatusAccepted); len(r.list("deliveries")) != 1 {
			t.Fatalf("a submission after the delete fanned out to %v, want only %s", r.list("deliveries"), kept)
		}
		f.admin("DELETE", "/v1/endpoints/ep_00000000000000000000000000000000", nil).must(t, http.StatusNotFound)
	})
}

func TestOperatorEndpointIsNotDeleted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		store, count := b.open(t)
		e, err := store.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: "https://ops.example.com/in",
			Secrets: []storage.Secret{storage.NewSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", nil)}}})
		if err != nil {
			t.Fatal(err)
		}
		f := newFixtureOn(t, store, count, func(o *api.Options) { o.OperatorEndpoint = e.ID })
		r := f.admin("DELETE", "/v1/endpoints/"+e.ID+"?force=true", nil).must(t, http.StatusConflict)
		if code, msg := r.errorCode(t); code != "operator_endpoint" || !strings.Contains(msg, "endpoints.operator_endpoint") {
			t.Fatalf("delete of the operator endpoint: %s %s", code, msg)
		}
		f.admin("GET", "/v1/endpoints/"+e.ID, nil).must(t, http.StatusOK)
	})
}

func TestEndpointListPages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		var ids []string
		for i := range 5 {
			id, _ := f.createEndpoint(map[string]any{"url": fmt.Sprintf("https://hooks.example.com/%d", i)})
			ids = append(ids, id)
		}
		slices.Sort(ids)
		slices.Reverse(ids)
		var got []string
		path := "/v1/endpoints?limit=2"
		for pages := 1; ; pages++ {
			r := f.admin("GET", path, nil).must(t, http.StatusOK)
			page := endpointIDs(r)
			got = append(got, page...)
			next, _ := r.body["next_cursor"].(string)
			if next == "" {
				if r.body["next_cursor"] != nil || pages != 3 || len(page) != 1 {
					t.Fatalf("the last page (%d) has %d endpoints and next_cursor %v: %s", pages, len(page), r.body["next_cursor"], r.raw)
				}
				break
			}
			if len(page) != 2 || next != page[1] {
				t.Fatalf("page %d: %v, next_cursor %q", pages, page, next)
			}
			path = "/v1/endpoints?limit=2&cursor=" + next
		}
		if !slices.Equal(got, ids) {
			t.Fatalf("paged endpoints %v, want newest first %v", got, ids)
		}
		if all := endpointIDs(f.admin("GET", "/v1/endpoints", nil).must(t, http.StatusOK)); len(all) != 5 {
			t.Fatalf("the default page has %d endpoints, want all 5", len(all))
		}

		for _, tc := range []struct{ query, says string }{
			{"limit=0", `limit "0" is not a whole number from 1 to 500`},
			{"limit=501", `limit "501" is not a whole number from 1 to 500`},
			{"limit=two", `limit "two" is not a whole number from 1 to 500`},
			{"cursor=dlv_0123", `cursor "dlv_0123" is not a cursor this API gave out`},
			{"page=2", `unknown query parameter "page"; this route takes only limit, cursor`},
			{"limit=1&limit=2", `query parameter "limit" is given 2 times`},
		} {
			code, msg := f.admin("GET", "/v1/endpoints?"+tc.query, nil).must(t, http.StatusBadRequest).errorCode(t)
			if code != "invalid_parameter" || !strings.Contains(msg, tc.says) {
				t.Errorf("GET /v1/endpoints?%s: %s %q, want it to say %q", tc.query, code, msg, tc.says)
			}
		}
	})
}

func TestEndpointCreateIdempotencyKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		withKey := func(key string, body any) response {
			t.Helper()
			return f.send(req{method: "POST", path: "/v1/endpoints", token: adminToken, body: body, header: map[string]string{api.HeaderIdempotencyKey: key}})
		}
		first := withKey("create-1", `{"url":"https://hooks.example.com/in","description":"CRM"}`).must(t, http.StatusCreated)
		id, secret := first.str("id"), first.str("secret")
		if first.header.Get(api.HeaderIdempotentReplayed) != "" {
			t.Fatal("the first create is marked as a replay")
		}
		// The same request, spelled differently.
		again := withKey("create-1", `{ "description": "CRM", "url": "https://hooks.example.com/in" }`).must(t, http.StatusOK)
		if again.header.Get(api.HeaderIdempotentReplayed) != "true" || again.str("id") != id || again.str("secret") != secret ||
			again.header.Get("Location") != "/v1/endpoints/"+id {
			t.Fatalf("the repeat answered %s with %v", again.raw, again.header)
		}
		if n := f.count("webhook_endpoints"); n != 1 {
			t.Fatalf("%d endpoints after a repeat, want 1", n)
		}
		reused := withKey("create-1", map[string]any{"url": "https://hooks.example.com/other"}).must(t, http.StatusUnprocessableEntity)
		if code, _ := reused.errorCode(t); code != "idempotency_key_reused" || f.count("webhook_endpoints") != 1 {
			t.Fatalf("the key with another body: %s, %d endpoints", reused.raw, f.count("webhook_endpoints"))
		}
		// Keys are scoped by route: the same key on an ingest is its own.
		ingest := f.send(req{method: "POST", path: "/v1/forms/contact/submissions", token: ingestKey, body: map[string]any{"a": 1},
			header: map[string]string{api.HeaderIdempotencyKey: "create-1"}}).must(t, http.StatusAccepted)
		if len(ingest.list("deliveries")) != 1 {
			t.Fatalf("the ingest with an endpoint's key: %s", ingest.raw)
		}

		// After a rotation, a repeat answers with the secret that signs now.
		rotated := f.admin("POST", "/v1/endpoints/"+id+"/rotate-secret", nil).must(t, http.StatusOK).str("secret")
		if r := withKey("create-1", `{"url":"https://hooks.example.com/in","description":"CRM"}`).must(t, http.StatusOK); r.str("secret") != rotated {
			t.Fatal("a repeat after a rotation did not answer with the current secret")
		}
		f.admin("DELETE", "/v1/endpoints/"+id, nil).must(t, http.StatusConflict) // the ingest's delivery is pending
		f.admin("DELETE", "/v1/endpoints/"+id+"?force=true", nil).must(t, http.StatusOK)
		if code, _ := withKey("create-1", `{"url":"https://hooks.example.com/in","description":"CRM"}`).must(t, http.StatusGone).errorCode(t); code != "endpoint_deleted" {
			t.Fatal("a repeat of a key whose endpoint was deleted")
		}

		// Racing creates with one key make one endpoint.
		const n = 8
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			status  = map[int]int{}
			created = map[string]bool{}
		)
		for range n {
			wg.Go(func() {
				r := withKey("create-2", map[string]any{"url": "https://hooks.example.com/race"})
				mu.Lock()
				defer mu.Unlock()
				status[r.status]++
				created[r.str("id")] = true
			})
		}
		wg.Wait()
		if status[http.StatusCreated] != 1 || status[http.StatusOK] != n-1 || len(created) != 1 {
			t.Fatalf("racing creates with one key: statuses %v, ids %v; want one 201, the rest 200, one id", status, created)
		}
		for _, s := range []string{secret, rotated} {
			if strings.Contains(f.logs.String(), s) {
				t.Fatal("a secret reached the log")
			}
		}
	})
}

func endpointIDs(r response) []string {
	var ids []string
	for _, e := range r.list("endpoints") {
		ids = append(ids, fmt.Sprint(e.(map[string]any)["id"]))
	}
	return ids
}
