package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/storage"
)

func ids(r response, key string) []string {
	var out []string
	for _, v := range r.list(key) {
		out = append(out, v.(string))
	}
	return out
}

// endpointOf returns the endpoint each delivery id goes to.
func endpointsOf(t *testing.T, s storage.Store, deliveryIDs []string) []string {
	t.Helper()
	var out []string
	for _, id := range deliveryIDs {
		d, err := s.DeliveryGet(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.EndpointID)
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestSubmissions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		all, _ := f.createEndpoint(map[string]any{"url": "https://a.example.com/in"})
		other, _ := f.createEndpoint(map[string]any{"url": "https://b.example.com/in", "form_ids": []string{"other"}})
		f.createEndpoint(map[string]any{"url": "https://c.example.com/in", "event_types": []string{"form.published"}})

		const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		data := map[string]any{"email": "a@example.com", "note": "<b>hi</b> & bye", "n": 1.5}
		r := f.send(req{method: "POST", path: "/v1/forms/contact/submissions", token: ingestKey, body: data,
			header: map[string]string{"traceparent": traceparent}}).must(t, http.StatusAccepted)
		if !regexp.MustCompile(`^sub_[0-9a-f]{32}$`).MatchString(r.str("submission_id")) || r.header.Get(api.HeaderIdempotentReplayed) != "" {
			t.Fatalf("submission answer: %s", r.raw)
		}
		if got := endpointsOf(t, f.store, ids(r, "deliveries")); !slices.Equal(got, []string{all}) {
			t.Fatalf("deliveries went to %v, want only the endpoint for every form", got)
		}
		ev, err := f.store.EventGet(t.Context(), r.str("event_id"))
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Type       string `json:"type"`
			Submission struct {
				ID     string         `json:"id"`
				FormID string         `json:"form_id"`
				Data   map[string]any `json:"data"`
			} `json:"submission"`
		}
		if err := json.Unmarshal(ev.Payload, &body); err != nil {
			t.Fatal(err)
		}
		if ev.Type != "submission.received" || ev.FormID != "contact" || ev.SubmissionID != r.str("submission_id") ||
			body.Type != "submission.received" || body.Submission.ID != ev.SubmissionID || body.Submission.FormID != "contact" ||
			fmt.Sprint(body.Submission.Data) != fmt.Sprint(data) || ev.TraceParent != traceparent {
			t.Fatalf("stored event %+v with body %s", ev, ev.Payload)
		}

		t.Run("a repeated idempotency key returns the first result and writes nothing", func(t *testing.T) {
			key := map[string]string{"Idempotency-Key": "order-42"}
			first := f.send(req{method: "POST", path: "/v1/forms/contact/submissions", token: ingestKey, body: data, header: key}).must(t, http.StatusAccepted)
			events := f.count("webhook_events")
			// Same values, other spacing and key order: still the same request.
			again := f.send(req{method: "POST", path: "/v1/forms/contact/submissions", token: ingestKey2,
				body: `{ "n": 1.5, "note": "<b>hi</b> & bye", "email": "a@example.com" }`, header: key}).must(t, http.StatusOK)
			if again.header.Get(api.HeaderIdempotentReplayed) != "true" || string(again.raw) != string(first.raw) {
				t.Fatalf("replay of the key answered %s (replayed=%q), want the first answer %s",
					again.raw, again.header.Get(api.HeaderIdempotentReplayed), first.raw)
			}
			if n := f.count("webhook_events"); n != events {
				t.Fatalf("a repeated key wrote %d more events", n-events)
			}
			changed := f.send(req{method: "POST", path: "/v1/forms/contact/submissions", token: ingestKey, body: map[string]any{"email": "b@example.com"}, header: key}).must(t, http.StatusUnprocessableEntity)
			if code, _ := changed.errorCode(t); code != "idempotency_key_reused" {
				t.Fatalf("a key reused with another body: %s", changed.raw)
			}
			// The same key for another form is another request.
			otherForm := f.send(req{method: "POST", path: "/v1/forms/other/submissions", token: ingestKey, body: data, header: key}).must(t, http.StatusAccepted)
			if otherForm.str("event_id") == first.str("event_id") || otherForm.str("submission_id") == first.str("submission_id") {
				t.Fatal("two forms collided on one idempotency key")
			}
			if got := endpointsOf(t, f.store, ids(otherForm, "deliveries")); !slices.Equal(got, sorted(all, other)) {
				t.Fatalf("form other fanned out to %v", got)
			}
			// And for the events route too.
			f.send(req{method: "POST", path: "/v1/events", token: ingestKey, header: key,
				body: map[string]any{"type": "form.published", "payload": data}}).must(t, http.StatusAccepted)
			if n := f.count("webhook_events"); n != events+2 {
				t.Fatalf("%d events, want %d", n, events+2)
			}
		})

		t.Run("without a key every submission is a new event with a new submission id", func(t *testing.T) {
			a := f.submit("contact", data).must(t, http.StatusAccepted)
			b := f.submit("contact", data).must(t, http.StatusAccepted)
			if a.str("event_id") == b.str("event_id") || a.str("submission_id") == b.str("submission_id") {
				t.Fatal("two submissions share an id")
			}
		})

		t.Run("the admin token may submit too", func(t *testing.T) {
			f.send(req{method: "POST", path: "/v1/forms/contact/submissions", token: adminToken, body: data}).must(t, http.StatusAccepted)
		})
	})
}

func TestGenericEvents(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		all, _ := f.createEndpoint(map[string]any{"url": "https://a.example.com/in"})
		f.createEndpoint(map[string]any{"url": "https://b.example.com/in", "form_ids": []string{"other"}})
		published, _ := f.createEndpoint(map[string]any{"url": "https://c.example.com/in", "event_types": []string{"form.published"}})
		contactOnly, _ := f.createEndpoint(map[string]any{"url": "https://d.example.com/in", "form_ids": []string{"contact"}})

		before := time.Now().UTC().Add(-time.Second)
		r := f.send(req{method: "POST", path: "/v1/events", token: ingestKey, body: map[string]any{
			"type": "form.published", "form_id": "contact", "payload": map[string]any{"title": "Contact us"},
		}}).must(t, http.StatusAccepted)
		if _, ok := r.body["submission_id"]; ok {
			t.Fatalf("a generic event answered a submission id: %s", r.raw)
		}
		if got := endpointsOf(t, f.store, ids(r, "deliveries")); !slices.Equal(got, sorted(all, published, contactOnly)) {
			t.Fatalf("form.published for contact went to %v", got)
		}
		ev, err := f.store.EventGet(t.Context(), r.str("event_id"))
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Type  string `json:"type"`
			Event struct {
				ID        string         `json:"id"`
				FormID    string         `json:"form_id"`
				Data      map[string]any `json:"data"`
				CreatedAt time.Time      `json:"created_at"`
			} `json:"event"`
		}
		if err := json.Unmarshal(ev.Payload, &body); err != nil {
			t.Fatal(err)
		}
		if ev.Type != "form.published" || ev.FormID != "contact" || ev.SubmissionID != "" || body.Type != "form.published" ||
			body.Event.ID != ev.ID || body.Event.FormID != "contact" || body.Event.Data["title"] != "Contact us" || body.Event.CreatedAt.Before(before) {
			t.Fatalf("stored event %+v, body %s", ev, ev.Payload)
		}

		// No form: only endpoints that name no forms match.
		nf := f.send(req{method: "POST", path: "/v1/events", token: ingestKey, body: map[string]any{"type": "account.closed", "payload": map[string]any{}}}).must(t, http.StatusAccepted)
		if got := endpointsOf(t, f.store, ids(nf, "deliveries")); !slices.Equal(got, []string{all}) {
			t.Fatalf("a formless event went to %v", got)
		}
		formless, err := f.store.EventGet(t.Context(), nf.str("event_id"))
		if err != nil {
			t.Fatal(err)
		}
		if formless.FormID != "" || strings.Contains(string(formless.Payload), `"form_id"`) {
			t.Fatalf("a formless event was stored with a form id: %s", formless.Payload)
		}

		key := map[string]string{"Idempotency-Key": "evt-1"}
		e1 := f.send(req{method: "POST", path: "/v1/events", token: ingestKey, header: key, body: map[string]any{"type": "a.b", "payload": map[string]any{"x": 1}}}).must(t, http.StatusAccepted)
		e2 := f.send(req{method: "POST", path: "/v1/events", token: ingestKey, header: key, body: map[string]any{"type": "a.b", "payload": map[string]any{"x": 1}}}).must(t, http.StatusOK)
		if e2.header.Get(api.HeaderIdempotentReplayed) != "true" || string(e1.raw) != string(e2.raw) {
			t.Fatalf("replayed key answered %s, want %s", e2.raw, e1.raw)
		}
		for _, changed := range []map[string]any{
			{"type": "a.c", "payload": map[string]any{"x": 1}},
			{"type": "a.b", "form_id": "contact", "payload": map[string]any{"x": 1}},
			{"type": "a.b", "payload": map[string]any{"x": 2}},
		} {
			r := f.send(req{method: "POST", path: "/v1/events", token: ingestKey, header: key, body: changed}).must(t, http.StatusUnprocessableEntity)
			if code, _ := r.errorCode(t); code != "idempotency_key_reused" {
				t.Fatalf("%v: %s", changed, r.raw)
			}
		}
	})
}
