package server_test

import (
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOneAuthLimiterForTheAPIAndTheConsole guesses on one face and checks
// the other refuses the address too, with the limit from the config: the
// server builds one limiter and gives it to both.
func TestOneAuthLimiterForTheAPIAndTheConsole(t *testing.T) {
	t.Parallel()
	type call func(t *testing.T, base string, token string) *http.Response
	api := func(t *testing.T, base, token string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/endpoints", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		return do(t, req)
	}
	login := func(t *testing.T, base, token string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/console/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return do(t, req)
	}
	tests := []struct {
		name          string
		guess, answer call
	}{
		{"guesses on the API refuse the console's login", api, login},
		{"wrong console logins refuse the API", login, api},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig("sqlite:" + filepath.Join(t.TempDir(), "hymical.db"))
			cfg.Server.AuthFailures, cfg.Server.AuthFailureWindow = 3, time.Minute
			base := "http://" + start(t, cfg).srv.Addr().String()
			for i := range 3 {
				if resp := tt.guess(t, base, "guess-0123456789abcdef"); resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("guess %d: %d, want 401", i+1, resp.StatusCode)
				}
			}
			resp := tt.answer(t, base, adminToken)
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("the right token on the other face: %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
		})
	}
}

func do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}
