package endpoint_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hymical/hymical/sdk/redact"

	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/storage"
)

func TestCheckFieldsNamesTheFieldAndTheFix(t *testing.T) {
	t.Parallel()
	ok := func() storage.Endpoint {
		return storage.Endpoint{URL: "https://hooks.example.com/in?token=x", FormIDs: []string{"contact", "contact"}, EventTypes: []string{"submission.received"}}
	}
	tests := []struct {
		name  string
		edit  func(*storage.Endpoint)
		field string
		want  string
	}{
		{"no URL", func(e *storage.Endpoint) { e.URL = "" }, "url", "url is required"},
		{"not http", func(e *storage.Endpoint) { e.URL = "ftp://hooks.example.com/" }, "url", "http:// or https://"},
		{"credentials", func(e *storage.Endpoint) { e.URL = "https://u:p@hooks.example.com/" }, "url", "user name or password"},
		{"no host", func(e *storage.Endpoint) { e.URL = "https:///in" }, "url", "no host"},
		{"the masked URL as shown", func(e *storage.Endpoint) { e.URL = redact.URL("https://hooks.example.com/in?token=s3cret") }, "url", "secrets hidden"},
		{"spaces", func(e *storage.Endpoint) { e.URL = " https://hooks.example.com/" }, "url", "white space"},
		{"a bad form id", func(e *storage.Endpoint) { e.FormIDs = []string{"a b"} }, "form_ids", "form_ids[0]"},
		{"a bad event type", func(e *storage.Endpoint) { e.EventTypes = []string{"-x"} }, "event_types", "not an event type"},
		{"too long a description", func(e *storage.Endpoint) { e.Description = strings.Repeat("d", endpoint.MaxDescriptionBytes+1) }, "description", "limit is 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := ok()
			tt.edit(&e)
			err := endpoint.CheckFields(&e)
			var fe *endpoint.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, endpoint.ErrField) {
				t.Fatalf("err = %v, want a FieldError", err)
			}
			if fe.Field != tt.field || !strings.Contains(fe.Message, tt.want) {
				t.Errorf("%s: %q, want field %s saying %q", fe.Field, fe.Message, tt.field, tt.want)
			}
		})
	}
	// A masked URL is told apart, so each face can say how to keep the
	// stored one in its own words; no other refusal is.
	if err := endpoint.CheckURL(redact.URL("https://hooks.example.com/in?token=s3cret")); !errors.Is(err, endpoint.ErrMaskedURL) {
		t.Errorf("a masked URL: %v, want ErrMaskedURL", err)
	}
	if err := endpoint.CheckURL("ftp://hooks.example.com/"); errors.Is(err, endpoint.ErrMaskedURL) {
		t.Errorf("an ftp URL matched ErrMaskedURL: %v", err)
	}
	e := ok()
	if err := endpoint.CheckFields(&e); err != nil || !slices.Equal(e.FormIDs, []string{"contact"}) {
		t.Errorf("a good endpoint: %v, form ids %v (repeats should go)", err, e.FormIDs)
	}
}
