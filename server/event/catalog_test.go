package event

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// shape maps every path of a JSON value to its kind, so two bodies with
// the same fields of the same kinds have the same shape whatever their
// values.
func shape(t *testing.T, raw []byte) map[string]string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s does not decode: %v", raw, err)
	}
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			out[path] = "object"
			for k, c := range x {
				walk(path+"."+k, c)
			}
		case []any:
			out[path] = "array"
		case string:
			out[path] = "string"
		case float64:
			out[path] = "number"
		case bool:
			out[path] = "bool"
		case nil:
			out[path] = "null"
		default:
			out[path] = fmt.Sprintf("%T", v)
		}
	}
	walk("$", v)
	return out
}

// TestCatalogExamplesMatchTheBuilders builds each built-in event through
// the code that makes it for real and holds the catalog's example to the
// same fields, of the same kinds, and the same type.
func TestCatalogExamplesMatchTheBuilders(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC)
	failing := now.Add(-24 * time.Hour)
	build := map[string]func() (storage.Event, error){
		TypeSubmissionReceived: func() (storage.Event, error) {
			return Submission("contact", []byte(`{"email":"ada@example.com","message":"Hello"}`), now)
		},
		TypeEndpointDisabled: func() (storage.Event, error) {
			return EndpointDisabled(storage.Endpoint{ID: storage.NewID("ep"), URL: "https://hooks.example.com/forms",
				DisabledReason: storage.DisabledGone, DisabledAt: &now, FailingSince: &failing}, "ep_operator")
		},
		TypeTest: func() (storage.Event, error) { return Test(storage.NewID("ep"), now) },
	}
	var listed []string
	for _, k := range Catalog() {
		listed = append(listed, k.Type)
		t.Run(k.Type, func(t *testing.T) {
			b, ok := build[k.Type]
			if !ok {
				t.Fatalf("the catalog lists %s, which this test cannot build: add its builder here", k.Type)
			}
			if k.Description == "" {
				t.Error("no description")
			}
			ev, err := b()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type != k.Type {
				t.Errorf("the builder makes type %q", ev.Type)
			}
			got, want := shape(t, k.Example), shape(t, ev.Payload)
			if !maps.Equal(got, want) {
				t.Errorf("the example's fields differ from what the server sends:\nexample %v\nsent    %v\n(sent: %s)", got, want, ev.Payload)
			}
		})
	}
	for typ := range build {
		if !slices.Contains(listed, typ) {
			t.Errorf("the server makes %s, which the catalog does not list", typ)
		}
	}
}

func TestTestEvent(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ev, err := Test("ep_1", now)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"hymical.test","event":{"id":"` + ev.ID + `","endpoint_id":"ep_1","test":true,"created_at":"2026-12-02T10:00:00Z"}}`
	if string(ev.Payload) != want || ev.EndpointID != "ep_1" || ev.Type != TypeTest {
		t.Fatalf("Test = %+v\npayload %s\nwant    %s", ev, ev.Payload, want)
	}
	if _, err := Test("", now); err == nil {
		t.Error("a test event for no endpoint was built")
	}
}
