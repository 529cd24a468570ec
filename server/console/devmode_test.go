package console_test

import (
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/console"
	"github.com/hymical/hymical/storage"
)

// TestDevModeConsoleAnswersOnlyThisMachine: the console in insecure dev
// mode lets anyone log in, so a page that reached it under a rebound DNS
// name could log in, read a form's CSRF token and replay; and a page of
// another site could post to it. Both are refused before any page runs.
func TestDevModeConsoleAnswersOnlyThisMachine(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *console.Options) { o.Insecure, o.AdminTokenDigest = true, [sha256.Size]byte{} })
	f.endpoint("contact", "CRM")
	dlv := f.submit("contact", 1)[0]
	f.failAll(dlv)
	s := f.login("dev")
	_, port, err := net.SplitHostPort(f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	replay := "/console/deliveries/" + dlv + "/replay"
	tests := []struct {
		name         string
		method, path string
		host         string
		header       map[string]string
		want         int
		says         string
	}{
		{"the login form for a rebound name", "GET", "/console/login", "rebind.evil.example:" + port, nil, http.StatusMisdirectedRequest, "rebind.evil.example:" + port},
		{"a login for a rebound name", "POST", "/console/login", "rebind.evil.example:" + port, nil, http.StatusMisdirectedRequest, "DNS rebinding"},
		{"a replay for a rebound name", "POST", replay, "rebind.evil.example:" + port, nil, http.StatusMisdirectedRequest, "Nothing was changed"},
		{"a page for localhost on another port", "GET", "/console/", "localhost:1", nil, http.StatusMisdirectedRequest, "127.0.0.1:" + port},
		{"a page opened from another site", "GET", "/console/", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "another site"},
		{"a replay posted from another port of localhost", "POST", replay, "", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden, "another site"},
		{"a replay posted with another Origin", "POST", replay, "", map[string]string{"Origin": "http://localhost:3000"}, http.StatusForbidden, "http://localhost:3000"},
		{"the overview for localhost", "GET", "/console/", "localhost:" + port, nil, http.StatusOK, "Overview"},
		{"the overview opened by hand", "GET", "/console/", "", map[string]string{"Sec-Fetch-Site": "none"}, http.StatusOK, "Overview"},
	}
	for _, tt := range tests {
		var body io.Reader
		if tt.method == "POST" {
			body = strings.NewReader(url.Values{"csrf": {s.csrf}}.Encode())
		}
		req, err := http.NewRequestWithContext(t.Context(), tt.method, f.srv.URL+tt.path, body)
		if err != nil {
			t.Fatal(err)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if tt.host != "" {
			req.Host = tt.host
		}
		for k, v := range tt.header {
			req.Header.Set(k, v)
		}
		req.AddCookie(&http.Cookie{Name: console.CookieName, Value: s.cookie})
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want || !strings.Contains(string(raw), tt.says) {
			t.Errorf("%s: %d, want %d saying %q:\n%.1500s", tt.name, resp.StatusCode, tt.want, tt.says, raw)
		}
	}
	if st := f.state(dlv); st != storage.StateFailed {
		t.Errorf("delivery is %s after refused replays, want failed", st)
	}
}
