package apiwire_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/hymical/hymical/server/api/apiwire"
)

func TestError(t *testing.T) {
	t.Parallel()
	var body apiwire.ErrorResponse
	if err := json.Unmarshal([]byte(`{"error":{"code":"not_found","message":"delivery \"x\" does not exist; check the id"}}`), &body); err != nil {
		t.Fatal(err)
	}
	if got, want := body.Error.Error(), `not_found: delivery "x" does not exist; check the id`; got != want {
		t.Errorf("without a status: %q, want %q", got, want)
	}
	body.Error.Status = 404
	err := fmt.Errorf("server answered %w", &body.Error)
	if got, want := err.Error(), `server answered 404 not_found: delivery "x" does not exist; check the id`; got != want {
		t.Errorf("with a status: %q, want %q", got, want)
	}
	var e *apiwire.Error
	if !errors.As(err, &e) || e.Code != "not_found" {
		t.Errorf("errors.As did not find the API's error in %v", err)
	}
	// The status is the response's, never a field of the body.
	enc, _ := json.Marshal(body)
	if string(enc) != `{"error":{"code":"not_found","message":"delivery \"x\" does not exist; check the id"}}` {
		t.Errorf("encoded as %s", enc)
	}
}
