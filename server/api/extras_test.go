package api_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/storage"
)

// payload reads GET /v1/deliveries/{id}/payload raw: it is the signed
// body, not one of the API's JSON answers.
func (f *fixture) payload(id string) []byte {
	f.t.Helper()
	hr, err := http.NewRequestWithContext(f.t.Context(), "GET", f.srv.URL+"/v1/deliveries/"+id+"/payload", nil)
	if err != nil {
		f.t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := f.srv.Client().Do(hr)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		f.t.Fatalf("GET payload of %s: %d %q: %s", id, resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	}
	return raw
}

// TestEndpointTestEvent sends a test event through the whole path: one
// delivery to the named endpoint only, though another takes every event,
// claimed, signed and sent by a real worker to a real receiver, its
// attempt recorded, and GET …/payload returns the bytes that were signed.
// A disabled endpoint's test waits held; a deleted one's is refused.
func TestEndpointTestEvent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		target, bystander := newReceiver(t, http.StatusOK), newReceiver(t, http.StatusOK)
		epID, secret := f.createEndpoint(map[string]any{"url": target.URL + "/hook", "form_ids": []string{"contact"}, "event_types": []string{"submission.received"}})
		otherID, _ := f.createEndpoint(map[string]any{"url": bystander.URL + "/hook"})
		f.runPool()

		r := f.admin("POST", "/v1/endpoints/"+epID+"/test", nil).must(t, http.StatusAccepted)
		id := r.str("id")
		if r.str("endpoint_id") != epID || r.body["held"] != false {
			t.Fatalf("the test event's delivery: %s, want one to %s, not held", r.raw, epID)
		}
		done := f.waitState(id, "delivered")
		if n := len(done.list("attempt_history")); n != 1 {
			t.Errorf("the delivered test event has %d attempts recorded, want 1", n)
		}
		reqs := target.requests()
		if len(reqs) != 1 {
			t.Fatalf("the endpoint's receiver got %d requests, want 1", len(reqs))
		}
		if err := webhook.Verify(reqs[0].header, reqs[0].body, secret); err != nil {
			t.Errorf("the test event does not verify with the endpoint's secret: %v", err)
		}
		if got := reqs[0].header.Get("webhook-id"); got != id {
			t.Errorf("webhook-id %q, want the delivery %s", got, id)
		}
		body := string(reqs[0].body)
		for _, want := range []string{`"type":"hymical.test"`, `"endpoint_id":"` + epID + `"`, `"test":true`} {
			if !strings.Contains(body, want) {
				t.Errorf("the test event's body %s lacks %s", body, want)
			}
		}
		if got := f.payload(id); !bytes.Equal(got, reqs[0].body) {
			t.Errorf("GET payload answered\n%s\nthe receiver got\n%s", got, reqs[0].body)
		}
		others, err := f.store.DeliveryList(t.Context(), storage.DeliveryListParams{Filter: storage.DeliveryFilter{EndpointID: otherID}, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(others) != 0 || len(bystander.requests()) != 0 {
			t.Errorf("the test event also went to %s, which takes every event: %d deliveries, %d requests", otherID, len(others), len(bystander.requests()))
		}

		f.admin("POST", "/v1/endpoints/"+otherID+"/disable", nil).must(t, http.StatusOK)
		held := f.admin("POST", "/v1/endpoints/"+otherID+"/test", nil).must(t, http.StatusAccepted)
		if held.body["held"] != true || held.str("state") != "pending" {
			t.Errorf("a disabled endpoint's test delivery: %s, want pending and held", held.raw)
		}

		f.admin("DELETE", "/v1/endpoints/"+otherID+"?force=true", nil).must(t, http.StatusOK)
		before := f.count("webhook_deliveries")
		gone := f.admin("POST", "/v1/endpoints/"+otherID+"/test", nil).must(t, http.StatusGone)
		if code, _ := gone.errorCode(t); code != "endpoint_deleted" {
			t.Errorf("a deleted endpoint's test: code %s, want endpoint_deleted", code)
		}
		if after := f.count("webhook_deliveries"); after != before {
			t.Errorf("a refused test wrote %d deliveries", after-before)
		}
	})
}

// TestEventTypesCatalog lists the built-in types, each with an example
// of its own type.
func TestEventTypesCatalog(t *testing.T) {
	f := newFixture(t, backends["sqlite"], nil)
	r := f.admin("GET", "/v1/event-types", nil).must(t, http.StatusOK)
	var types []string
	for _, v := range r.list("event_types") {
		e := v.(map[string]any)
		typ, _ := e["type"].(string)
		types = append(types, typ)
		ex, _ := e["example"].(map[string]any)
		if ex["type"] != typ || e["description"] == "" {
			t.Errorf("%s: example %v, description %q; want an example of its own type and a description", typ, ex, e["description"])
		}
	}
	if got := strings.Join(types, " "); got != "submission.received hymical.endpoint.disabled hymical.test" {
		t.Errorf("the catalog lists %q", got)
	}
}
