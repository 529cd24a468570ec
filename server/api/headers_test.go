package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// storedHeaders reads an endpoint's custom headers, values revealed,
// straight from the store, as "Name: value".
func (f *fixture) storedHeaders(id string) string {
	f.t.Helper()
	e, err := f.store.EndpointGet(f.t.Context(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, h := range e.Headers {
		out = append(out, h.Name+": "+h.Reveal())
	}
	return strings.Join(out, "\n")
}

// TestEndpointCustomHeaders: headers are taken on create and PATCH and
// kept in order; answers show their names and never their values; a PATCH
// replaces the set, and an entry without a value (or with the mask an
// answer shows) keeps the current one; what the server refuses is a 422
// invalid_header that names the header and not its value.
func TestEndpointCustomHeaders(t *testing.T) {
	const token, tenant = "Bearer api-hdr-6e2f90aa", "tenant-0b7d"
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		created := f.admin("POST", "/v1/endpoints", map[string]any{
			"url": "https://hooks.example.com/in",
			"headers": []map[string]any{
				{"name": "Authorization", "value": token},
				{"name": "X-Tenant", "value": tenant},
			},
		}).must(t, http.StatusCreated)
		id := created.str("id")
		if got := f.storedHeaders(id); got != "Authorization: "+token+"\nX-Tenant: "+tenant {
			t.Fatalf("stored headers = %q", got)
		}
		const shown = `"headers":[{"name":"Authorization","value":"[redacted]"},{"name":"X-Tenant","value":"[redacted]"}]`
		for what, r := range map[string]response{
			"the create": created,
			"a get":      f.admin("GET", "/v1/endpoints/"+id, nil).must(t, http.StatusOK),
			"the list":   f.admin("GET", "/v1/endpoints", nil).must(t, http.StatusOK),
		} {
			if !strings.Contains(string(r.raw), shown) {
				t.Errorf("%s does not show the headers masked: %s", what, r.raw)
			}
			if strings.Contains(string(r.raw), "api-hdr-6e2f90aa") || strings.Contains(string(r.raw), tenant) {
				t.Errorf("%s shows a header value: %s", what, r.raw)
			}
		}

		// The answer sent back whole keeps both values; a new value and a
		// value left out, reordered, keep what they say.
		patched := f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{
			"headers": []map[string]any{
				{"name": "x-tenant", "value": "[redacted]"},
				{"name": "authorization"},
				{"name": "X-Extra", "value": "v2"},
			},
		}).must(t, http.StatusOK)
		if got := f.storedHeaders(id); got != "x-tenant: "+tenant+"\nauthorization: "+token+"\nX-Extra: v2" {
			t.Fatalf("after a PATCH keeping values: stored headers = %q", got)
		}
		if strings.Contains(string(patched.raw), "v2") {
			t.Errorf("the PATCH answer shows a value: %s", patched.raw)
		}
		f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{"description": "renamed"}).must(t, http.StatusOK)
		if got := f.storedHeaders(id); !strings.Contains(got, token) {
			t.Fatalf("a PATCH without headers changed them: %q", got)
		}

		for _, tc := range []struct {
			name    string
			headers []map[string]any
			says    string
		}{
			{"a signature header", []map[string]any{{"name": "Webhook-Signature", "value": "v1,x"}}, "Webhook-Signature cannot be set"},
			{"a hop-by-hop header", []map[string]any{{"name": "Connection", "value": "close"}}, "hop-by-hop"},
			{"host", []map[string]any{{"name": "Host", "value": "evil.example"}}, "Host cannot be set"},
			{"a value with a line break", []map[string]any{{"name": "X-Key", "value": "abc-secret-9\r\nX-Injected: 1"}}, "X-Key holds a line break"},
			{"a name that is no token", []map[string]any{{"name": "X Key", "value": "abc-secret-9"}}, "not a valid HTTP header name"},
			{"a name twice", []map[string]any{{"name": "X-A", "value": "abc-secret-9"}, {"name": "x-a", "value": "2"}}, "x-a is given twice"},
			{"a value to keep that is not there", []map[string]any{{"name": "X-Missing"}}, `headers item 1 ("X-Missing") has no value`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{"headers": tc.headers}).must(t, http.StatusUnprocessableEntity)
				code, msg := r.errorCode(t)
				if code != "invalid_header" || !strings.Contains(msg, tc.says) {
					t.Errorf("code %q message %q, want invalid_header saying %q", code, msg, tc.says)
				}
				if strings.Contains(msg, "abc-secret-9") {
					t.Errorf("the message shows the value: %q", msg)
				}
			})
		}
		r := f.admin("POST", "/v1/endpoints", map[string]any{
			"url": "https://hooks.example.com/in", "headers": []map[string]any{{"name": "X-Key"}},
		}).must(t, http.StatusUnprocessableEntity)
		if code, msg := r.errorCode(t); code != "invalid_header" || !strings.Contains(msg, "give the value") {
			t.Errorf("create with a header without a value: %q %q", code, msg)
		}

		f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{"headers": []any{}}).must(t, http.StatusOK)
		if got := f.storedHeaders(id); got != "" {
			t.Fatalf("after headers [] the endpoint still has %q", got)
		}
		if strings.Contains(f.logs.String(), "api-hdr-6e2f90aa") || strings.Contains(f.logs.String(), tenant) {
			t.Errorf("the API's log shows a header value:\n%s", f.logs.String())
		}
	})
}
