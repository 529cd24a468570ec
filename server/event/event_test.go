package event

import (
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
