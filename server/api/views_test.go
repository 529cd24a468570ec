package api

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/storage"
)

// goldenEncode is what writeJSON sends for v.
func goldenEncode(v any) string {
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusOK, v)
	return rec.Body.String()
}

// goldenFixtures are the answers of every route, built by the view
// functions from storage values that exercise every field: null and set
// pointers, empty and filled lists, a v1a key with its public key, a
// redacted config value, a URL with credentials and a token and an error
// quoting it, text that HTML escaping would change.
func goldenFixtures(t *testing.T) map[string]any {
	t.Helper()
	now := time.Date(2026, 12, 3, 14, 0, 0, 123456789, time.FixedZone("X", 3600))
	later := now.Add(time.Hour)
	bare := storage.Endpoint{ID: "ep_1", Transport: "http", URL: "https://x.example/<a>&b", CreatedAt: now, UpdatedAt: now,
		Secrets: []storage.Secret{storage.NewSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", nil)}}
	full := storage.Endpoint{ID: "ep_2", Transport: "nats", Config: map[string]string{"subject": "a", "password": "p"},
		EventTypes: []string{"t"}, FormIDs: []string{"f"}, Description: "d", DisabledAt: &now, DisabledReason: "gone",
		FailingSince: &later, RateLimit: 2.5, RateBurst: 3, MaxInFlight: 4, Ordered: true, RetrySchedule: []time.Duration{time.Second, time.Hour},
		CreatedAt: now, UpdatedAt: later, Headers: []storage.Header{storage.NewHeader("Authorization", "Bearer golden-value")},
		Secrets: []storage.Secret{ // A v1a signing key made for this test, so its public key is fixed.
			storage.NewSecret("whsk_kSu/I30dLoCPBi3RJF+uTVo+NczK0/hGwCVjED2R6PYu7rWC5/c4sd3meepa8ZXptVZ/vKQt6QHkFyXV+q1c+g==", nil), storage.NewSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &later)}}
	// Credentials and a token in the URL, and a plugin's error quoting it.
	masked := storage.Endpoint{ID: "ep_3", Transport: "http", URL: "https://user:pw@x.example/in?token=t&x=1#access_token=a", CreatedAt: now, UpdatedAt: now}
	leaky := []storage.Attempt{{Number: 1, Outcome: storage.OutcomeRetryable, Error: `Post "https://user:pw@x.example/in?token=t&x=1": EOF`, StartedAt: now, FinishedAt: later}}
	d1 := storage.Delivery{ID: "dlv_1", EndpointID: "ep_1", EventID: "evt_1", State: storage.StatePending, NextAttemptAt: now, CreatedAt: now}
	d2 := storage.Delivery{ID: "dlv_2", EndpointID: "ep_1", EventID: "evt_1", State: storage.StateProcessing, Attempts: 3, CycleAttempts: 2,
		NextAttemptAt: now, ClaimExpiresAt: &later, Held: true, CreatedAt: now, CompletedAt: &later,
		UnsentReason: `transport plugin "http" is not running: <binary> & pin`}
	ev1 := storage.Event{ID: "evt_1", Type: "submission.received", FormID: "f", SubmissionID: "sub_1", CreatedAt: now}
	ev2 := storage.Event{ID: "evt_2", Type: "x", CreatedAt: now}
	as := []storage.Attempt{{Number: 1, Outcome: storage.OutcomeRetryable, HTTPStatus: 500, Error: "boom <x>", StartedAt: now, FinishedAt: later, TraceID: "abc"},
		{Number: 2, Outcome: storage.OutcomeDelivered, Late: true, StartedAt: now, FinishedAt: later}}
	rs := []storage.Replay{{Actor: "api:alice", PreviousState: storage.StateFailed, ReplayedAt: now}}
	next := "dlv_9"
	nextEndpoint := "ep_9"
	return map[string]any{
		"endpoint_bare":         viewEndpoint(bare, now),
		"endpoint_full":         viewEndpoint(full, now),
		"endpoint_masked":       viewEndpoint(masked, now),
		"attempts_masked":       apiwire.AttemptList{Attempts: viewAttempts(leaky)},
		"endpoint_created":      apiwire.EndpointCreated{Endpoint: viewEndpoint(bare, now), Secret: "whsec_s"},
		"endpoint_rotated":      apiwire.EndpointCreated{Endpoint: viewEndpoint(full, now), Secret: "whsec_s", PreviousSecretsExpireAt: &later},
		"endpoint_list":         apiwire.EndpointList{Endpoints: []apiwire.Endpoint{viewEndpoint(bare, now)}, NextCursor: &nextEndpoint},
		"endpoint_list_empty":   apiwire.EndpointList{Endpoints: []apiwire.Endpoint{}},
		"endpoint_deleted":      apiwire.EndpointDeleted{ID: "ep_1", DeletedAt: now.UTC(), FailedPending: 2, FailedProcessing: 1},
		"delivery_1":            viewDelivery(d1),
		"delivery_2":            viewDelivery(d2),
		"delivery_detail":       apiwire.DeliveryDetail{Delivery: viewDelivery(d2), Event: viewEvent(ev1), AttemptHistory: viewAttempts(as)},
		"delivery_detail_empty": apiwire.DeliveryDetail{Delivery: viewDelivery(d1), Event: viewEvent(ev2), AttemptHistory: viewAttempts(nil)},
		"page":                  apiwire.DeliveryPage{Deliveries: []apiwire.Delivery{viewDelivery(d1)}, NextCursor: &next},
		"page_last":             apiwire.DeliveryPage{Deliveries: []apiwire.Delivery{}},
		"attempts":              apiwire.AttemptList{Attempts: viewAttempts(as)},
		"replays":               apiwire.ReplayList{Replays: viewReplays(rs)},
		"replays_empty":         apiwire.ReplayList{Replays: viewReplays(nil)},
		"count":                 apiwire.ReplayCount{Count: 7},
		"ingest_sub":            apiwire.IngestResult{SubmissionID: "sub_1", EventID: "evt_1", Deliveries: []string{"dlv_1"}},
		"ingest_event":          apiwire.IngestResult{EventID: "evt_1", Deliveries: []string{}},
		"error":                 apiwire.ErrorResponse{Error: apiwire.Error{Status: 404, Code: "not_found", Message: "x <y> & z"}},
		"status":                apiwire.Status{Status: "ok"},
	}
}

var updateGolden = flag.Bool("update", false, "rewrite testdata/views.golden from the current encoding")

// TestViewsEncodeAsBefore pins the JSON the API answers with, byte for
// byte: field order, null against [], omitted fields, UTC times, no HTML
// escaping. testdata/views.golden was written by the handlers' own view
// types before they moved to apiwire; a change to it is a change to the
// wire, to be made on purpose (go test -run TestViewsEncodeAsBefore -update).
func TestViewsEncodeAsBefore(t *testing.T) {
	t.Parallel()
	const path = "testdata/views.golden"
	var lines []string
	for name, v := range goldenFixtures(t) {
		lines = append(lines, name+"\t"+goldenEncode(v))
	}
	slices.Sort(lines)
	got := strings.Join(lines, "")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	gotLines, wantLines := strings.SplitAfter(got, "\n"), strings.SplitAfter(string(want), "\n")
	if len(gotLines) != len(wantLines) {
		t.Fatalf("%d encodings, the golden file has %d", len(gotLines), len(wantLines))
	}
	for i := range gotLines {
		if gotLines[i] != wantLines[i] {
			t.Errorf("encoding changed:\n got %s\nwant %s", gotLines[i], wantLines[i])
		}
	}
}

// TestWireStatesAreTheStoresStates holds apiwire's own state and outcome
// constants to the store's: the views convert by value.
func TestWireStatesAreTheStoresStates(t *testing.T) {
	t.Parallel()
	states := map[storage.DeliveryState]apiwire.DeliveryState{
		storage.StatePending: apiwire.StatePending, storage.StateProcessing: apiwire.StateProcessing,
		storage.StateDelivered: apiwire.StateDelivered, storage.StateFailed: apiwire.StateFailed,
	}
	for s, w := range states {
		if string(s) != string(w) || !s.Valid() {
			t.Errorf("storage state %q is apiwire %q", s, w)
		}
	}
	outcomes := map[storage.OutcomeKind]apiwire.Outcome{
		storage.OutcomeDelivered: apiwire.OutcomeDelivered, storage.OutcomeRetryable: apiwire.OutcomeRetryable,
		storage.OutcomePermanent: apiwire.OutcomePermanent,
	}
	for o, w := range outcomes {
		if string(o) != string(w) || !o.Valid() {
			t.Errorf("storage outcome %q is apiwire %q", o, w)
		}
	}
}
