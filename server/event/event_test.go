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
