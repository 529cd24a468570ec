package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// settle claims every due delivery through the store, as a worker would,
// and completes the ones named in outcomes with that outcome (HTTP status
// 400 for permanent, 200 for delivered); the rest are given back.
func settle(t *testing.T, s storage.Store, outcomes map[string]storage.OutcomeKind) {
	t.Helper()
	claims, err := s.DeliveryClaim(t.Context(), storage.DeliveryClaimParams{Limit: 1000, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, c := range claims {
		kind, ok := outcomes[c.Delivery.ID]
		if !ok {
			if _, err := s.DeliveryRelease(t.Context(), storage.DeliveryReleaseParams{DeliveryID: c.Delivery.ID, Token: c.Token}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		status := 200
		if kind != storage.OutcomeDelivered {
			status = 400
		}
		now := time.Now()
		if _, _, err := s.DeliveryComplete(t.Context(), storage.DeliveryCompleteParams{
			DeliveryID: c.Delivery.ID, Token: c.Token, Outcome: kind, HTTPStatus: status, Error: "receiver said " + fmt.Sprint(status),
			StartedAt: now.Add(-time.Millisecond), FinishedAt: now, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
		}); err != nil {
			t.Fatal(err)
		}
		done++
	}
	if done != len(outcomes) {
		t.Fatalf("settled %d of %d deliveries: some were not due", done, len(outcomes))
	}
}

// page walks GET /v1/deliveries from the first page to the last with the
// given query, checking each page's size and returning every id in order.
func (f *fixture) pages(q url.Values, limit int) (all []string, pageSizes []int) {
	f.t.Helper()
	q.Set("limit", fmt.Sprint(limit))
	cursor := ""
	for range 100 {
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := f.admin("GET", "/v1/deliveries?"+q.Encode(), nil).must(f.t, http.StatusOK)
		ds := r.list("deliveries")
		pageSizes = append(pageSizes, len(ds))
		for _, d := range ds {
			all = append(all, d.(map[string]any)["id"].(string))
		}
		next, _ := r.body["next_cursor"].(string)
		if r.body["next_cursor"] == nil {
			return all, pageSizes
		}
		if len(ds) != limit {
			f.t.Fatalf("a page of %d with a next cursor, want %d", len(ds), limit)
		}
		cursor = next
	}
	f.t.Fatal("pagination never ended")
	return nil, nil
}

func TestDeliveryListing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		a, _ := f.createEndpoint(map[string]any{"url": "https://a.example.com/in"})
		bID, _ := f.createEndpoint(map[string]any{"url": "https://b.example.com/in", "form_ids": []string{"f2"}})
		var events []string
		for i := range 5 {
			events = append(events, f.submit("f1", map[string]any{"i": i}).must(t, http.StatusAccepted).str("event_id"))
		}
		var f2Deliveries []string
		for i := range 2 {
			r := f.submit("f2", map[string]any{"i": i}).must(t, http.StatusAccepted)
			f2Deliveries = append(f2Deliveries, ids(r, "deliveries")...)
		}
		stored, err := f.store.DeliveryList(t.Context(), storage.DeliveryListParams{})
		if err != nil || len(stored) != 9 {
			t.Fatalf("store lists %d deliveries, %v; want 9", len(stored), err)
		}
		var want []string
		for _, d := range stored {
			want = append(want, d.ID)
		}

		t.Run("pages of 4 walk every delivery newest first, once", func(t *testing.T) {
			got, sizes := f.pages(url.Values{}, 4)
			if !slices.Equal(got, want) || fmt.Sprint(sizes) != "[4 4 1]" {
				t.Fatalf("pages %v gave %v, want %v", sizes, got, want)
			}
			if !slices.IsSortedFunc(got, func(x, y string) int { return strings.Compare(y, x) }) {
				t.Fatal("not newest first")
			}
		})
		t.Run("a page exactly at the end has no next cursor", func(t *testing.T) {
			_, sizes := f.pages(url.Values{}, 9)
			if fmt.Sprint(sizes) != "[9]" {
				t.Fatalf("sizes %v, want one page", sizes)
			}
		})
		t.Run("filters select and page together", func(t *testing.T) {
			for _, tc := range []struct {
				q    url.Values
				want int
			}{
				{url.Values{"endpoint_id": {bID}}, 2},
				{url.Values{"endpoint_id": {a}}, 7},
				{url.Values{"form_id": {"f2"}}, 4},
				{url.Values{"form_id": {"f2"}, "endpoint_id": {a}}, 2},
				{url.Values{"form_id": {"nope"}}, 0},
				{url.Values{"event_id": {events[2]}}, 1},
				{url.Values{"state": {"pending"}}, 9},
				{url.Values{"state": {"failed"}}, 0},
				{url.Values{"created_after": {"2000-01-01T00:00:00Z"}}, 9},
				{url.Values{"created_before": {"2000-01-01T00:00:00Z"}}, 0},
				{url.Values{"created_after": {time.Now().Add(time.Hour).Format(time.RFC3339)}}, 0},
			} {
				got, _ := f.pages(tc.q, 3)
				if len(got) != tc.want {
					t.Errorf("%s: %d deliveries, want %d", tc.q.Encode(), len(got), tc.want)
				}
			}
			got, _ := f.pages(url.Values{"form_id": {"f2"}}, 3)
			if !slices.Equal(sorted(got...), sorted(f2Deliveries...)) {
				t.Fatalf("form f2 listed %v, want %v", got, f2Deliveries)
			}
		})
		t.Run("created_after and created_before cut at a delivery's own time", func(t *testing.T) {
			r := f.admin("GET", "/v1/deliveries?limit=100", nil).must(t, http.StatusOK)
			var times []time.Time
			for _, d := range r.list("deliveries") {
				ts, err := time.Parse(time.RFC3339Nano, d.(map[string]any)["created_at"].(string))
				if err != nil {
					t.Fatal(err)
				}
				times = append(times, ts)
			}
			cut := times[4]
			after, before := 0, 0
			for _, ts := range times {
				if ts.After(cut) {
					after++
				}
				if ts.Before(cut) {
					before++
				}
			}
			gotAfter, _ := f.pages(url.Values{"created_after": {cut.Format(time.RFC3339Nano)}}, 2)
			gotBefore, _ := f.pages(url.Values{"created_before": {cut.Format(time.RFC3339Nano)}}, 2)
			if len(gotAfter) != after || len(gotBefore) != before {
				t.Fatalf("around %s: %d after and %d before, want %d and %d", cut, len(gotAfter), len(gotBefore), after, before)
			}
		})
		t.Run("the state filter follows the state machine", func(t *testing.T) {
			settle(t, f.store, map[string]storage.OutcomeKind{want[0]: storage.OutcomePermanent, want[1]: storage.OutcomeDelivered})
			for state, wantIDs := range map[string][]string{"failed": {want[0]}, "delivered": {want[1]}} {
				got, _ := f.pages(url.Values{"state": {state}}, 10)
				if !slices.Equal(got, wantIDs) {
					t.Fatalf("state=%s listed %v, want %v", state, got, wantIDs)
				}
			}
		})
	})
}

func TestDeliveryDetailAndReplay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		epID, _ := f.createEndpoint(map[string]any{"url": "https://a.example.com/in"})
		sub := f.submit("contact", map[string]any{"email": "a@example.com"}).must(t, http.StatusAccepted)
		id := ids(sub, "deliveries")[0]

		d := f.admin("GET", "/v1/deliveries/"+id, nil).must(t, http.StatusOK)
		ev, _ := d.body["event"].(map[string]any)
		if d.str("state") != "pending" || d.body["attempts"] != 0.0 || d.body["cycle_attempts"] != 0.0 ||
			d.body["lease_expires_at"] != nil || d.str("next_attempt_at") == "" || d.str("endpoint_id") != epID ||
			ev["submission_id"] != sub.str("submission_id") || ev["form_id"] != "contact" || ev["type"] != "submission.received" ||
			len(d.list("attempt_history")) != 0 {
			t.Fatalf("pending delivery: %s", d.raw)
		}

		// A worker's claim shows as processing with its lease, and cannot
		// be replayed.
		claims, err := f.store.DeliveryClaim(t.Context(), storage.DeliveryClaimParams{Limit: 1, Lease: time.Minute})
		if err != nil || len(claims) != 1 {
			t.Fatal(claims, err)
		}
		d = f.admin("GET", "/v1/deliveries/"+id, nil).must(t, http.StatusOK)
		lease, err := time.Parse(time.RFC3339Nano, d.str("lease_expires_at"))
		if d.str("state") != "processing" || err != nil || !lease.Equal(*claims[0].Delivery.ClaimExpiresAt) {
			t.Fatalf("claimed delivery: %s", d.raw)
		}
		r := f.admin("POST", "/v1/deliveries/"+id+"/replay", nil).must(t, http.StatusConflict)
		if code, msg := r.errorCode(t); code != "not_terminal" || !strings.Contains(msg, "is processing") {
			t.Fatalf("replay while processing: %s", r.raw)
		}
		now := time.Now()
		if _, _, err := f.store.DeliveryComplete(t.Context(), storage.DeliveryCompleteParams{
			DeliveryID: id, Token: claims[0].Token, Outcome: storage.OutcomePermanent, HTTPStatus: 410,
			Error: "receiver said 410 Gone", StartedAt: now.Add(-5 * time.Millisecond), FinishedAt: now, TraceID: "0af7651916cd43dd8448eb211c80319c",
		}); err != nil {
			t.Fatal(err)
		}

		as := f.admin("GET", "/v1/deliveries/"+id+"/attempts", nil).must(t, http.StatusOK).list("attempts")
		if len(as) != 1 {
			t.Fatalf("attempts: %v", as)
		}
		a := as[0].(map[string]any)
		started, _ := time.Parse(time.RFC3339Nano, a["started_at"].(string))
		finished, _ := time.Parse(time.RFC3339Nano, a["finished_at"].(string))
		if a["number"] != 1.0 || a["outcome"] != "permanent" || a["http_status"] != 410.0 || a["error"] != "receiver said 410 Gone" ||
			a["late"] != false || a["trace_id"] != "0af7651916cd43dd8448eb211c80319c" || !finished.After(started) {
			t.Fatalf("attempt: %v", a)
		}

		r = f.send(req{method: "POST", path: "/v1/deliveries/" + id + "/replay", token: adminToken,
			header: map[string]string{"Hymical-Operator": "alice@example.com"}}).must(t, http.StatusOK)
		if r.str("state") != "pending" || r.body["attempts"] != 1.0 || r.body["cycle_attempts"] != 0.0 || r.body["completed_at"] != nil {
			t.Fatalf("after replay: %s", r.raw)
		}
		r = f.admin("POST", "/v1/deliveries/"+id+"/replay", "{}").must(t, http.StatusConflict)
		if _, msg := r.errorCode(t); !strings.Contains(msg, "is pending") {
			t.Fatalf("second replay: %s", r.raw)
		}
		rs := f.admin("GET", "/v1/deliveries/"+id+"/replays", nil).must(t, http.StatusOK).list("replays")
		if len(rs) != 1 {
			t.Fatalf("replays: %v", rs)
		}
		rp := rs[0].(map[string]any)
		if rp["actor"] != "api:alice@example.com" || rp["previous_state"] != "failed" || rp["replayed_at"] == "" {
			t.Fatalf("replay audit: %v", rp)
		}
	})
}

func TestBulkReplay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		a, _ := f.createEndpoint(map[string]any{"url": "https://a.example.com/in"})
		bID, _ := f.createEndpoint(map[string]any{"url": "https://b.example.com/in", "form_ids": []string{"f2"}})
		var onA, onB []string
		for _, form := range []string{"f1", "f1", "f2", "f2"} {
			for _, id := range ids(f.submit(form, map[string]any{}).must(t, http.StatusAccepted), "deliveries") {
				d, err := f.store.DeliveryGet(t.Context(), id)
				if err != nil {
					t.Fatal(err)
				}
				if d.EndpointID == a {
					onA = append(onA, id)
				} else {
					onB = append(onB, id)
				}
			}
		}
		// a: 4 deliveries, 3 failed and 1 delivered; b: 2 failed.
		settle(t, f.store, map[string]storage.OutcomeKind{
			onA[0]: storage.OutcomePermanent, onA[1]: storage.OutcomePermanent, onA[2]: storage.OutcomePermanent, onA[3]: storage.OutcomeDelivered,
			onB[0]: storage.OutcomePermanent, onB[1]: storage.OutcomePermanent,
		})
		count := func(body any, header map[string]string) int {
			t.Helper()
			r := f.send(req{method: "POST", path: "/v1/deliveries/replay", token: adminToken, body: body, header: header}).must(t, http.StatusOK)
			return int(r.body["count"].(float64))
		}
		if n := count(map[string]any{"endpoint_id": bID}, map[string]string{"Hymical-Operator": "ops"}); n != 2 {
			t.Fatalf("failed on b: replayed %d, want 2", n)
		}
		if n := count(map[string]any{"limit": 2, "form_id": "f1"}, nil); n != 2 {
			t.Fatalf("limit 2: replayed %d", n)
		}
		if n := count(nil, nil); n != 1 {
			t.Fatalf("the rest of the failed (the default state): replayed %d, want 1", n)
		}
		if n := count(map[string]any{}, nil); n != 0 {
			t.Fatalf("nothing failed is left, but %d were replayed", n)
		}
		if n := count(map[string]any{"state": "delivered", "created_before": time.Now().Add(time.Hour).Format(time.RFC3339)}, nil); n != 1 {
			t.Fatalf("delivered: replayed %d, want 1", n)
		}
		got, _ := f.pages(url.Values{"state": {"pending"}}, 50)
		if len(got) != 6 {
			t.Fatalf("%d pending after replaying all 6, want 6", len(got))
		}
		rs := f.admin("GET", "/v1/deliveries/"+onB[0]+"/replays", nil).must(t, http.StatusOK).list("replays")
		if len(rs) != 1 || rs[0].(map[string]any)["actor"] != "api:ops" {
			t.Fatalf("b's replay audit: %v", rs)
		}
		rs = f.admin("GET", "/v1/deliveries/"+onA[3]+"/replays", nil).must(t, http.StatusOK).list("replays")
		if len(rs) != 1 || rs[0].(map[string]any)["actor"] != "api" || rs[0].(map[string]any)["previous_state"] != "delivered" {
			t.Fatalf("a delivered delivery's replay audit: %v", rs)
		}
	})
}

// A claim that ended without a request leaves its reason on the delivery,
// and the API shows it: while the delivery waits, and once it has failed
// with no attempt, until a replay clears it.
func TestDeliveryShowsWhyNothingWasSent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		f.createEndpoint(map[string]any{"url": "https://a.example.com/in"})
		id := ids(f.submit("contact", map[string]any{"email": "a@example.com"}).must(t, http.StatusAccepted), "deliveries")[0]
		claim := func() storage.Claim {
			t.Helper()
			claims, err := f.store.DeliveryClaim(t.Context(), storage.DeliveryClaimParams{Limit: 1, Lease: time.Minute})
			if err != nil || len(claims) != 1 {
				t.Fatal(claims, err)
			}
			return claims[0]
		}

		const down = `transport plugin "http" is not running: fork/exec: no such file or directory`
		c := claim()
		if _, err := f.store.DeliveryRelease(t.Context(), storage.DeliveryReleaseParams{DeliveryID: id, Token: c.Token, Reason: down}); err != nil {
			t.Fatal(err)
		}
		d := f.admin("GET", "/v1/deliveries/"+id, nil).must(t, http.StatusOK)
		if d.str("state") != "pending" || d.str("unsent_reason") != down || d.body["attempts"] != 0.0 || len(d.list("attempt_history")) != 0 {
			t.Fatalf("delivery given back unsent: %s", d.raw)
		}
		listed := f.admin("GET", "/v1/deliveries?state=pending", nil).must(t, http.StatusOK).list("deliveries")
		if len(listed) != 1 || listed[0].(map[string]any)["unsent_reason"] != down {
			t.Fatalf("the list does not show the reason: %v", listed)
		}

		const refused = `no such transport plugin "smtp" (loaded: http)`
		c = claim()
		if _, err := f.store.DeliveryFail(t.Context(), storage.DeliveryFailParams{DeliveryID: id, Token: c.Token, Reason: refused}); err != nil {
			t.Fatal(err)
		}
		d = f.admin("GET", "/v1/deliveries/"+id, nil).must(t, http.StatusOK)
		if d.str("state") != "failed" || d.str("unsent_reason") != refused || d.body["attempts"] != 0.0 || len(d.list("attempt_history")) != 0 {
			t.Fatalf("delivery failed unsent: %s", d.raw)
		}
		r := f.admin("POST", "/v1/deliveries/"+id+"/replay", nil).must(t, http.StatusOK)
		if r.str("state") != "pending" || r.str("unsent_reason") != "" {
			t.Fatalf("after replay: %s", r.raw)
		}
	})
}
