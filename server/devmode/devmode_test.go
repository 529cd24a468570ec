package devmode_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hymical/hymical/server/devmode"
)

// TestHostNames holds the names a dev-mode server answers to: loopback
// names and addresses with the port of the connection, nothing a DNS
// answer could point elsewhere.
func TestHostNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host string
		ok   bool
	}{
		{"localhost:8080", true},
		{"LOCALHOST:8080", true},
		{"127.0.0.1:8080", true},
		{"127.0.0.2:8080", true},
		{"[::1]:8080", true},
		{"localhost:8081", false},
		{"localhost", false},
		{"localhost.:8080", false},
		{"app.localhost:8080", false},
		{"127.0.0.1.nip.io:8080", false},
		{"[fe80::1%25lo]:8080", false},
		{"10.0.0.5:8080", false},
		{"", false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/v1/endpoints", nil)
		r.Host = tt.host
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}))
		ref := devmode.Check(r)
		if (ref == nil) != tt.ok {
			t.Errorf("Host %q: refusal %v, want ok %v", tt.host, ref, tt.ok)
		}
		if ref != nil && ref.Status != http.StatusMisdirectedRequest {
			t.Errorf("Host %q: status %d, want 421", tt.host, ref.Status)
		}
	}
}

func TestJSONWrites(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, contentType string
		ok                  bool
	}{
		{"GET", "", true},
		{"HEAD", "text/plain", true},
		{"POST", "application/json", true},
		{"POST", "application/json; charset=utf-8", true},
		{"PATCH", "application/merge-patch+json", true},
		{"POST", "", false},
		{"POST", "text/plain", false},
		{"POST", "application/x-www-form-urlencoded", false},
		{"PUT", "multipart/form-data; boundary=x", false},
		{"DELETE", "", false},
		{"POST", "application/json;;", false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, "/v1/endpoints", nil)
		if tt.contentType != "" {
			r.Header.Set("Content-Type", tt.contentType)
		}
		if ref := devmode.CheckJSONWrite(r); (ref == nil) != tt.ok {
			t.Errorf("%s with %q: refusal %v, want ok %v", tt.method, tt.contentType, ref, tt.ok)
		}
	}
}
