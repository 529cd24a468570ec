package event

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func TestSubmission(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ev, err := Submission("form_1", []byte(`{"email":"a@example.com"}`), now)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"submission.received","submission":{"id":"` + ev.SubmissionID + `","form_id":"form_1","data":{"email":"a@example.com"},"created_at":"2026-12-02T10:00:00Z"}}`
	if string(ev.Payload) != want {
		t.Fatalf("payload = %s\nwant      %s", ev.Payload, want)
	}
	if !strings.HasPrefix(ev.SubmissionID, "sub_") || len(ev.SubmissionID) != 36 {
		t.Fatalf("submission id %q is not sub_<32 hex>", ev.SubmissionID)
	}
	for _, bad := range []string{`[]`, `"x"`, `null`, `{`} {
		if _, err := Submission("form_1", []byte(bad), now); !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("data %s: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := Submission("", []byte(`{}`), now); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("empty form id: %v", err)
	}
}

// TestDataKeptByteForByte: whatever form a JSON object was submitted in,
// the delivered body carries those bytes, not a re-encoding of them.
func TestDataKeptByteForByte(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for name, data := range map[string]string{
		"html":            `{"comment":"<b>Tom & Jerry</b>"}`,
		"white space":     "{ \"a\" : [1, 2,\n  3],\t\"b\":{} }",
		"escapes":         `{"e":"\u00e9\n\"\/","emoji":"😀","raw":"é"}`,
		"numbers":         `{"n":1.0E+2,"m":-0.000,"big":123456789012345678901234567890}`,
		"key order":       `{"z":1,"a":2,"m":3}`,
		"duplicate keys":  `{"a":1,"a":2}`,
		"surrounding ws":  "\n  {\"x\":1}  \n",
		"line separators": "{\"ls\":\"\u2028\u2029\"}",
	} {
		t.Run(name, func(t *testing.T) {
			want := strings.TrimSpace(data)
			ev, err := Submission("form_1", []byte(data), now)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(ev.Payload), `"data":`+want+`,"created_at"`) {
				t.Errorf("submission payload %s does not carry the data as sent: %s", ev.Payload, want)
			}
			if !json.Valid(ev.Payload) {
				t.Errorf("submission payload is not JSON: %s", ev.Payload)
			}
			gen, err := Generic("form.published", "", []byte(data), now)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(gen.Payload), `"data":`+want+`,"created_at"`) || !json.Valid(gen.Payload) {
				t.Errorf("event payload %s does not carry the data as sent: %s", gen.Payload, want)
			}
		})
	}
}

func TestGeneric(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ev, err := Generic("form.<published>", "contact", []byte(`{"title":"Hi"}`), now)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"form.<published>","event":{"id":"` + ev.ID + `","form_id":"contact","data":{"title":"Hi"},"created_at":"2026-12-02T10:00:00Z"}}`
	if string(ev.Payload) != want {
		t.Fatalf("payload = %s\nwant      %s", ev.Payload, want)
	}
	if ev.Type != "form.<published>" || ev.FormID != "contact" || !strings.HasPrefix(ev.ID, "evt_") {
		t.Fatalf("event = %+v", ev)
	}
	noForm, err := Generic("form.published", "", []byte(`{}`), now)
	if err != nil || strings.Contains(string(noForm.Payload), "form_id") {
		t.Fatalf("an event without a form names one: %s (%v)", noForm.Payload, err)
	}
	for _, bad := range []string{`[]`, `"x"`, `null`, `{`, ``} {
		if _, err := Generic("t", "", []byte(bad), now); !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("data %q: %v, want ErrInvalid", bad, err)
		}
	}
}

// The operator's hymical.endpoint.disabled event names the endpoint's URL
// with its credentials, user name included (a bare token often stands
// there), and its secret-named parameters hidden.
func TestEndpointDisabledHidesURLSecrets(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]string{
		"https://carol:pw@127.0.0.1:9/hook?token=SECRET123&x=1": "https://[redacted]@127.0.0.1:9/hook?token=[redacted]&x=1",
		"https://SECRET123@hooks.example/in?x=1":                "https://[redacted]@hooks.example/in?x=1",
	} {
		ev, err := EndpointDisabled(storage.Endpoint{ID: "ep_1", URL: in, DisabledAt: &at, DisabledReason: storage.DisabledGone}, "ep_ops")
		if err != nil {
			t.Fatal(err)
		}
		body := string(ev.Payload)
		var got struct {
			Endpoint struct{ URL string } `json:"endpoint"`
		}
		if err := json.Unmarshal(ev.Payload, &got); err != nil || got.Endpoint.URL != want {
			t.Errorf("payload %s (%v), want the url %s", body, err, want)
		}
		for _, leak := range []string{"SECRET123", "carol", ":pw"} {
			if strings.Contains(body, leak) {
				t.Errorf("payload shows %q: %s", leak, body)
			}
		}
	}
}
