package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/authlimit"
)

// route is every route the API serves, with who may call it.
type route struct {
	method, path string
	who          string // "public", "ingest" or "admin"
}

var allRoutes = []route{
	{"GET", "/healthz", "public"},
	{"GET", "/readyz", "public"},
	{"POST", "/v1/forms/contact/submissions", "ingest"},
	{"POST", "/v1/events", "ingest"},
	{"POST", "/v1/endpoints", "admin"},
	{"GET", "/v1/endpoints", "admin"},
	{"GET", "/v1/endpoints/ep_x", "admin"},
	{"PATCH", "/v1/endpoints/ep_x", "admin"},
	{"POST", "/v1/endpoints/ep_x/disable", "admin"},
	{"POST", "/v1/endpoints/ep_x/enable", "admin"},
	{"POST", "/v1/endpoints/ep_x/rotate-secret", "admin"},
	{"GET", "/v1/deliveries", "admin"},
	{"POST", "/v1/deliveries/replay", "admin"},
	{"GET", "/v1/deliveries/dlv_x", "admin"},
	{"GET", "/v1/deliveries/dlv_x/attempts", "admin"},
	{"POST", "/v1/deliveries/dlv_x/replay", "admin"},
	{"GET", "/v1/deliveries/dlv_x/replays", "admin"},
}

// validIngestBody is a body each ingest route accepts.
func validIngestBody(path string) any {
	if path == "/v1/events" {
		return map[string]any{"type": "form.published", "payload": map[string]any{"v": 1}}
	}
	return map[string]any{"email": "a@example.com"}
}

func TestAuthentication(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		// Every route gets every bad credential here, far more failures
		// than the default limit allows; the limit has tests of its own.
		f := newFixture(t, b, func(o *api.Options) {
			o.AuthLimiter = authlimit.MustNew(authlimit.Config{Failures: 10000, Logger: o.Logger})
		})
		badCredentials := []struct {
			name   string
			header string
		}{
			{"no Authorization header", ""},
			{"a wrong bearer token", "Bearer not-the-token"},
			{"the admin token with one character more", "Bearer " + adminToken + "x"},
			{"a prefix of the admin token", "Bearer " + adminToken[:10]},
			{"the admin token under the Basic scheme", "Basic " + adminToken},
			{"Bearer with no token", "Bearer "},
		}
		accepted := 0
		for _, rt := range allRoutes {
			t.Run(rt.method+" "+rt.path, func(t *testing.T) {
				if rt.who == "public" {
					f.send(req{method: rt.method, path: rt.path}).must(t, http.StatusOK)
					return
				}
				for _, bc := range badCredentials {
					r := f.send(req{method: rt.method, path: rt.path, body: map[string]any{}, header: map[string]string{"Authorization": bc.header}})
					if r.status != http.StatusUnauthorized {
						t.Fatalf("%s: status %d, want 401: %s", bc.name, r.status, r.raw)
					}
					if code, _ := r.errorCode(t); code != "unauthorized" {
						t.Fatalf("%s: code %q, want unauthorized", bc.name, code)
					}
					if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
						t.Fatalf("%s: 401 without a Bearer WWW-Authenticate challenge", bc.name)
					}
				}
				for _, key := range []string{ingestKey, ingestKey2} {
					var body any = map[string]any{}
					if rt.who == "ingest" {
						body = validIngestBody(rt.path)
					}
					r := f.send(req{method: rt.method, path: rt.path, token: key, body: body})
					switch rt.who {
					case "admin":
						r.must(t, http.StatusForbidden)
						if code, msg := r.errorCode(t); code != "forbidden" || !strings.Contains(msg, "admin token") {
							t.Fatalf("ingest key on an admin route: %s %s", code, msg)
						}
					case "ingest":
						r.must(t, http.StatusAccepted)
						accepted++
					}
				}
				// The admin token opens every route: what comes back is the
				// route's own answer (404 for the placeholder ids), never 401/403.
				var body any = map[string]any{"url": "https://hooks.example.com/in"}
				if rt.who == "ingest" {
					body = validIngestBody(rt.path)
				}
				r := f.send(req{method: rt.method, path: rt.path, token: adminToken, body: body})
				if r.status == http.StatusUnauthorized || r.status == http.StatusForbidden {
					t.Fatalf("admin token refused: %d %s", r.status, r.raw)
				}
				if rt.who == "ingest" {
					r.must(t, http.StatusAccepted)
					accepted++
				}
			})
		}
		// Refused requests wrote nothing: the only events are the accepted ones.
		if n := f.count("webhook_events"); n != accepted {
			t.Fatalf("%d events in the database, want %d (one per accepted ingest request)", n, accepted)
		}
		if strings.Contains(f.logs.String(), adminToken) || strings.Contains(f.logs.String(), ingestKey) {
			t.Fatal("a token reached the log")
		}
	})
}

func TestInsecureModeNeedsNoTokenAndSaysSo(t *testing.T) {
	f := newFixture(t, backends["sqlite"], func(o *api.Options) {
		o.Insecure = true
		o.AdminToken = ""
		o.IngestKeys = nil
	})
	for _, rt := range allRoutes {
		var body any = map[string]any{}
		if rt.who == "ingest" {
			body = validIngestBody(rt.path)
		}
		r := f.send(req{method: rt.method, path: rt.path, body: body})
		if r.status == http.StatusUnauthorized || r.status == http.StatusForbidden {
			t.Fatalf("%s %s refused in insecure mode: %s", rt.method, rt.path, r.raw)
		}
		if r.header.Get(api.HeaderAuth) != "disabled" {
			t.Fatalf("%s %s: no %s: disabled header in insecure mode", rt.method, rt.path, api.HeaderAuth)
		}
	}
	if !strings.Contains(f.logs.String(), "WITHOUT authentication") {
		t.Fatalf("insecure mode was not logged as such:\n%s", f.logs.String())
	}
	secure := newFixture(t, backends["sqlite"], nil)
	if r := secure.send(req{method: "GET", path: "/healthz"}); r.header.Get(api.HeaderAuth) != "" {
		t.Fatal("a secured API claims auth is disabled")
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	store, _ := backends["sqlite"].open(t)
	base := func() api.Options {
		return api.Options{Store: store, Transports: loopbackHost, AdminToken: adminToken, IngestKeys: []string{ingestKey}, Logger: quietLogger()}
	}
	for _, tc := range []struct {
		name string
		edit func(*api.Options)
		want string
	}{
		{"no store", func(o *api.Options) { o.Store = nil }, "Store is required"},
		{"no transports", func(o *api.Options) { o.Transports = nil }, "Transports is required"},
		{"an empty admin token", func(o *api.Options) { o.AdminToken = "" }, "admin token is empty"},
		{"a blank admin token", func(o *api.Options) { o.AdminToken = "   " }, "admin token is empty"},
		{"an empty ingest key", func(o *api.Options) { o.IngestKeys = []string{ingestKey, ""} }, "ingest key 2 of 2 is empty"},
		{"an ingest key equal to the admin token", func(o *api.Options) { o.IngestKeys = []string{adminToken} }, "equals the admin token"},
		{"a negative body limit", func(o *api.Options) { o.MaxBodyBytes = -1 }, "MaxBodyBytes"},
		{"a negative rotation grace", func(o *api.Options) { o.SecretRotationGrace = -1 }, "SecretRotationGrace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			tc.edit(&o)
			h, err := api.New(o)
			if err == nil || h != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want an error saying %q", h, err, tc.want)
			}
			if strings.Contains(err.Error(), adminToken) {
				t.Fatal("the error quotes the admin token")
			}
		})
	}
	t.Run("insecure mode needs no admin token", func(t *testing.T) {
		o := base()
		o.AdminToken, o.Insecure = "", true
		if _, err := api.New(o); err != nil {
			t.Fatal(err)
		}
	})
}
