package api_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/api"
)

// TestDevModeAnswersOnlyThisMachine sends what a hostile web page can make
// a developer's browser send to an API in insecure dev mode, next to what
// the CLI and the developer send. A write needs Content-Type: application/json
// (a page cannot send that across sites without a preflight the server
// never answers), a browser's mark of another site is refused, and so is a
// Host that is not loopback with the server's port (DNS rebinding).
func TestDevModeAnswersOnlyThisMachine(t *testing.T) {
	t.Parallel()
	f := newFixture(t, backends["sqlite"], func(o *api.Options) {
		o.Insecure, o.AdminToken, o.IngestKeys = true, "", nil
	})
	_, port, err := net.SplitHostPort(f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	self := "127.0.0.1:" + port
	const create = `{"url":"https://hooks.example.com/attacker"}`
	jsonType := map[string]string{"Content-Type": "application/json"}
	with := func(extra map[string]string) map[string]string {
		h := map[string]string{"Content-Type": "application/json"}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	tests := []struct {
		name         string
		method, path string
		host         string
		header       map[string]string
		body         string
		want         int
		code, says   string
	}{
		// The attack as found: a simple cross-site POST.
		{name: "a cross-site POST without a Content-Type", method: "POST", path: "/v1/endpoints", body: create,
			header: map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
			want:   http.StatusForbidden, code: "cross_site_request", says: "another site"},
		{name: "a POST without a Content-Type", method: "POST", path: "/v1/endpoints", body: create,
			want: http.StatusUnsupportedMediaType, code: "unsupported_media_type", says: "Content-Type: application/json\", even without a body (this one has none)"},
		{name: "a form's text/plain POST", method: "POST", path: "/v1/endpoints", body: create, header: map[string]string{"Content-Type": "text/plain"},
			want: http.StatusUnsupportedMediaType, code: "unsupported_media_type", says: `"text/plain"`},
		{name: "a bodiless replay without a Content-Type", method: "POST", path: "/v1/deliveries/replay",
			want: http.StatusUnsupportedMediaType, code: "unsupported_media_type", says: "even without a body"},
		{name: "a DELETE without a Content-Type", method: "DELETE", path: "/v1/endpoints/ep_x",
			want: http.StatusUnsupportedMediaType, code: "unsupported_media_type"},
		{name: "a JSON POST marked cross-site", method: "POST", path: "/v1/endpoints", body: create, header: with(map[string]string{"Sec-Fetch-Site": "cross-site"}),
			want: http.StatusForbidden, code: "cross_site_request", says: "Sec-Fetch-Site: cross-site"},
		{name: "a JSON POST from another port of localhost", method: "POST", path: "/v1/endpoints", body: create, header: with(map[string]string{"Sec-Fetch-Site": "same-site"}),
			want: http.StatusForbidden, code: "cross_site_request"},
		{name: "a JSON POST from another origin", method: "POST", path: "/v1/endpoints", body: create, header: with(map[string]string{"Origin": "https://evil.example"}),
			want: http.StatusForbidden, code: "cross_origin_request", says: "https://evil.example"},
		{name: "a read marked cross-site", method: "GET", path: "/v1/endpoints", header: map[string]string{"Sec-Fetch-Site": "cross-site"},
			want: http.StatusForbidden, code: "cross_site_request"},
		{name: "a read for a rebound DNS name", method: "GET", path: "/v1/deliveries", host: "rebind.evil.example:" + port,
			want: http.StatusMisdirectedRequest, code: "misdirected_request", says: "rebind.evil.example:" + port},
		{name: "a read for localhost on another port", method: "GET", path: "/v1/deliveries", host: "localhost:1",
			want: http.StatusMisdirectedRequest, code: "misdirected_request", says: "http://" + self},
		{name: "a read for localhost without a port", method: "GET", path: "/v1/deliveries", host: "localhost",
			want: http.StatusMisdirectedRequest, code: "misdirected_request"},
		{name: "a probe for a rebound name", method: "GET", path: "/healthz", host: "rebind.evil.example:" + port,
			want: http.StatusMisdirectedRequest, code: "misdirected_request"},

		{name: "the CLI's JSON POST", method: "POST", path: "/v1/endpoints", body: create, header: jsonType, want: http.StatusCreated},
		{name: "a JSON POST from the server's own page", method: "POST", path: "/v1/endpoints", body: create,
			header: with(map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + self}), want: http.StatusCreated},
		{name: "a bodiless JSON write", method: "POST", path: "/v1/endpoints/ep_x/disable", header: jsonType, want: http.StatusNotFound},
		{name: "a read typed into the address bar", method: "GET", path: "/v1/endpoints", header: map[string]string{"Sec-Fetch-Site": "none"}, want: http.StatusOK},
		{name: "a read for localhost", method: "GET", path: "/v1/endpoints", host: "localhost:" + port, want: http.StatusOK},
		{name: "a read for [::1]", method: "GET", path: "/v1/endpoints", host: "[::1]:" + port, want: http.StatusOK},
		{name: "a read for the listen address", method: "GET", path: "/v1/endpoints", host: self, want: http.StatusOK},
	}
	created := 0
	for _, tt := range tests {
		var body io.Reader
		if tt.body != "" {
			body = strings.NewReader(tt.body)
		}
		req, err := http.NewRequestWithContext(t.Context(), tt.method, f.srv.URL+tt.path, body)
		if err != nil {
			t.Fatal(err)
		}
		if tt.host != "" {
			req.Host = tt.host
		}
		for k, v := range tt.header {
			req.Header.Set(k, v)
		}
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: %d, want %d: %.300s", tt.name, resp.StatusCode, tt.want, raw)
			continue
		}
		if resp.StatusCode == http.StatusCreated {
			created++
		}
		if tt.code == "" {
			continue
		}
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Code != tt.code || !strings.Contains(e.Error.Message, tt.says) {
			t.Errorf("%s: error %s, want code %q saying %q", tt.name, raw, tt.code, tt.says)
		}
	}
	if n := f.count("webhook_endpoints"); n != created {
		t.Errorf("%d endpoints in the database, want %d: a refused request wrote one", n, created)
	}
}

// TestGuardedModeKeepsItsRules: with a token, the dev-mode guard does not
// apply: the token is what a page cannot send, and a bare curl without a
// Content-Type keeps working.
func TestGuardedModeKeepsItsRules(t *testing.T) {
	t.Parallel()
	f := newFixture(t, backends["sqlite"], nil)
	f.send(req{method: "POST", path: "/v1/endpoints", token: adminToken, body: `{"url":"https://hooks.example.com/in"}`,
		header: map[string]string{"Content-Type": ""}}).must(t, http.StatusCreated)
}
