package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hymical/hymical/internal/e2etest"
	"github.com/hymical/hymical/server/config"
)

// TestServeMountsTheConsoleBesideTheAPI checks serve's wiring: with the
// console on, /console/ is the console and everything else still the API;
// with it off, /console/ is the API's own 404.
func TestServeMountsTheConsoleBesideTheAPI(t *testing.T) {
	t.Parallel()
	store := e2etest.Backends()["sqlite"](t)
	apiHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"the API"}}`)
	})
	cfg := config.Default()
	cfg.Server.AdminToken = "test-admin-token-0123456789"
	log := slog.New(slog.DiscardHandler)

	h, err := withConsole(apiHandler, cfg, store, log)
	if err != nil {
		t.Fatal(err)
	}
	get := func(h http.Handler, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}
	if rec := get(h, "/console/login"); rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Errorf("/console/login: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	if rec := get(h, "/console"); rec.Code/100 != 3 || rec.Header().Get("Location") != "/console/" {
		t.Errorf("/console: %d to %q, want a redirect to /console/", rec.Code, rec.Header().Get("Location"))
	}
	if rec := get(h, "/v1/deliveries"); !strings.Contains(rec.Body.String(), "the API") {
		t.Errorf("/v1/deliveries did not reach the API: %s", rec.Body.String())
	}

	cfg.Console.Enabled = false
	if h, err = withConsole(apiHandler, cfg, store, log); err != nil {
		t.Fatal(err)
	}
	if rec := get(h, "/console/login"); !strings.Contains(rec.Body.String(), "the API") {
		t.Errorf("with the console off, /console/login answered %d %s", rec.Code, rec.Body.String())
	}
}
