package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/authlimit"
)

const wrongToken = "guessed-token-0123456789abcdef"

// limitedFixture is the API with a limiter of failures wrong tokens a
// minute, on a real loopback server over SQLite.
func limitedFixture(t *testing.T, failures int) (*fixture, *authlimit.Limiter) {
	t.Helper()
	var limiter *authlimit.Limiter
	f := newFixture(t, backends["sqlite"], func(o *api.Options) {
		limiter = authlimit.MustNew(authlimit.Config{Failures: failures, Window: time.Minute, Clients: 100, Logger: o.Logger})
		o.AuthLimiter = limiter
	})
	return f, limiter
}

// fromAddress sends r to f from another loopback address, 127.0.0.2, so
// the limiter sees a different client.
func (f *fixture) fromAddress(r req) *http.Response {
	f.t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, addr)
	}}}
	hr, err := http.NewRequestWithContext(f.t.Context(), r.method, f.srv.URL+r.path, strings.NewReader(r.body.(string)))
	if err != nil {
		f.t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+r.token)
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	resp, err := client.Do(hr)
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	client.CloseIdleConnections()
	return resp
}

// TestGuessedTokensAreLimitedOnEveryRoute guesses on each route that takes
// a token until the address is refused, then checks the refusal: a 429 in
// the API's error shape with Retry-After, for the right token too from that
// address, but not from another; and one warning in the log, with the
// address and the count and no token.
func TestGuessedTokensAreLimitedOnEveryRoute(t *testing.T) {
	t.Parallel()
	routes := []route{{"GET", "/metrics", "admin"}}
	for _, rt := range allRoutes {
		if rt.who != "public" {
			routes = append(routes, rt)
		}
	}
	const failures = 3
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			t.Parallel()
			f, _ := limitedFixture(t, failures)
			body := `{"url":"https://hooks.example.com/in"}`
			if rt.who == "ingest" {
				body = `{"email":"a@example.com"}`
				if rt.path == "/v1/events" {
					body = `{"type":"form.published","payload":{}}`
				}
			}
			for i := range failures {
				f.send(req{method: rt.method, path: rt.path, token: wrongToken, body: body}).must(t, http.StatusUnauthorized)
				// A request without a token guessed nothing and is not counted.
				if i == 0 {
					f.send(req{method: rt.method, path: rt.path, body: body}).must(t, http.StatusUnauthorized)
				}
			}
			for _, tok := range []string{wrongToken, adminToken, ingestKey, ""} {
				r := f.send(req{method: rt.method, path: rt.path, token: tok, body: body}).must(t, http.StatusTooManyRequests)
				code, msg := r.errorCode(t)
				if code != "too_many_failed_authentications" || !strings.Contains(msg, "Retry-After") || !strings.Contains(msg, "wrong token") {
					t.Errorf("429 error %q: %q", code, msg)
				}
				secs, err := strconv.Atoi(r.header.Get("Retry-After"))
				if err != nil || secs < 1 || secs > 60 {
					t.Errorf("Retry-After %q, want whole seconds within the 1m window", r.header.Get("Retry-After"))
				}
			}
			// The right token from another address is not held up.
			tok := adminToken
			if rt.who == "ingest" {
				tok = ingestKey
			}
			resp := f.fromAddress(req{method: rt.method, path: rt.path, token: tok, body: body})
			if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests {
				t.Errorf("the right token from another address: %d", resp.StatusCode)
			}
			logs := f.logs.String()
			if n := strings.Count(logs, "too many failed authentications"); n != 1 {
				t.Errorf("%d warnings, want one for the burst:\n%s", n, logs)
			}
			if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "client=127.0.0.1") || !strings.Contains(logs, fmt.Sprintf("failures=%d", failures)) {
				t.Errorf("the warning lacks the level, the client or the count:\n%s", logs)
			}
			for _, secret := range []string{wrongToken, wrongToken[:8], adminToken, ingestKey} {
				if strings.Contains(logs, secret) {
					t.Errorf("the log holds a token or part of one (%q)", secret)
				}
			}
		})
	}
}

// TestManyAddressesCannotFlushARefusal rotates wrong tokens through far
// more client addresses than the limiter remembers, at the handler, where
// each request can have its own address. The refused address stays
// refused, memory stays within its bound, and a client that authenticated
// before gets in with its token.
func TestManyAddressesCannotFlushARefusal(t *testing.T) {
	t.Parallel()
	store, _ := backends["sqlite"].open(t)
	const clients, failures = 100, 3
	logs := &syncbuf.Buffer{}
	// The limiter's clock stands still: the overflow's allowance is a
	// rate, and on a busy machine the 3,000 requests below take long
	// enough for it to refill before the last check.
	stopped := time.Now()
	limiter := authlimit.MustNew(authlimit.Config{Failures: failures, Window: time.Hour, Clients: clients,
		Now: func() time.Time { return stopped }, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	h, err := api.New(api.Options{Store: store, Transports: loopbackHost, AdminToken: adminToken, AuthLimiter: limiter, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	send := func(addr, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(t.Context(), "GET", "/v1/endpoints", nil)
		r.RemoteAddr = addr
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	const blocked, regular = "198.51.100.7:5000", "[2001:db8:aa::1]:5000"
	if w := send(regular, adminToken); w.Code != http.StatusOK {
		t.Fatalf("the regular client: %d %s", w.Code, w.Body)
	}
	for range failures {
		send(blocked, wrongToken)
	}
	// Thirty times as many addresses as the limiter remembers.
	for i := range 30 * clients {
		addr := fmt.Sprintf("10.%d.%d.%d:1", i>>16, i>>8&0xff, i&0xff)
		if i%2 == 1 {
			// Every other one a fresh IPv6 /64.
			addr = fmt.Sprintf("[2001:db8:%x:%x::1]:1", i>>16, i&0xffff)
		}
		send(addr, wrongToken)
		if n := limiter.Remembered(); n > 2*clients {
			t.Fatalf("after %d addresses the limiter remembers %d, bound %d", i+1, n, 2*clients)
		}
	}
	tests := []struct {
		name string
		addr string
		want int
	}{
		{"the refused address, with the right token", blocked, http.StatusTooManyRequests},
		{"a client that authenticated before", regular, http.StatusOK},
		{"another address in the regular client's /64", "[2001:db8:aa::2]:1", http.StatusOK},
		// A new address while the table is full of running windows and
		// the overflow is spent shares the overflow's refusal.
		{"a new address during the attack", "192.0.2.44:1", http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		if w := send(tt.addr, adminToken); w.Code != tt.want {
			t.Errorf("%s: %d, want %d: %s", tt.name, w.Code, tt.want, w.Body)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n > clients+2 {
		t.Errorf("%d warnings for %d addresses: the log is flooded", n, clients)
	}
}

// TestANewClientIsNotRefusedForOthersFailures fills the limiter's table of
// failing addresses, and spends its overflow, from many addresses; then a
// client from an address never seen, holding the right token, must get in
// once the guessing pauses, on an admin route and on ingest, although the
// table stays full for the rest of the window.
func TestANewClientIsNotRefusedForOthersFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		method string
		path   string
		token  string
		body   string
		want   int
	}{
		{"the admin token on an admin route", "GET", "/v1/endpoints", adminToken, "", http.StatusOK},
		{"an ingest key on ingest", "POST", "/v1/forms/contact/submissions", ingestKey, `{"email":"a@example.com"}`, http.StatusAccepted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store, _ := backends["sqlite"].open(t)
			const clients, failures = 100, 3
			var mu sync.Mutex
			now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
			clock := func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				return now
			}
			limiter := authlimit.MustNew(authlimit.Config{Failures: failures, Window: time.Hour, Clients: clients, Now: clock, Logger: quietLogger()})
			h, err := api.New(api.Options{Store: store, Transports: loopbackHost, AdminToken: adminToken, IngestKeys: []string{ingestKey},
				AuthLimiter: limiter, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			send := func(addr, token string) *httptest.ResponseRecorder {
				r := httptest.NewRequestWithContext(t.Context(), tt.method, tt.path, strings.NewReader(tt.body))
				r.RemoteAddr = addr
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Authorization", "Bearer "+token)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			// Ten times as many addresses as the table holds, all at once.
			for i := range 10 * clients {
				send(fmt.Sprintf("10.%d.%d.%d:1", i>>16, i>>8&0xff, i&0xff), wrongToken)
			}
			// During the burst a new address waits a second, and is told why.
			w := send("192.0.2.77:1", tt.token)
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), "many addresses") {
				t.Errorf("a new address during the burst: %d, Retry-After %q: %s; want 429 for a second, saying many addresses failed",
					w.Code, w.Header().Get("Retry-After"), w.Body)
			}
			mu.Lock()
			now = now.Add(time.Second)
			mu.Unlock()
			if w := send("192.0.2.77:1", tt.token); w.Code != tt.want {
				t.Errorf("a new address with the right token, a second after the guessing: %d, want %d: %s", w.Code, tt.want, w.Body)
			}
			if w := send("10.0.0.5:1", tt.token); w.Code != tt.want {
				t.Errorf("an address of the table with one failure, the right token: %d, want %d: %s", w.Code, tt.want, w.Body)
			}
		})
	}
}

// TestTrustedProxiesForwardTheClient runs the API behind a "proxy" at
// 127.0.0.1, which server.trusted_proxies lists: the address it forwards
// is the one that is counted and refused, while a peer that is not
// trusted (127.0.0.2) is counted as itself whatever it forwards.
func TestTrustedProxiesForwardTheClient(t *testing.T) {
	t.Parallel()
	const failures = 2
	f := newFixture(t, backends["sqlite"], func(o *api.Options) {
		o.AuthLimiter = authlimit.MustNew(authlimit.Config{Failures: failures, Window: time.Minute, Logger: o.Logger,
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	})
	viaProxy := func(client, token string) int {
		return f.send(req{method: "GET", path: "/v1/endpoints", token: token, header: map[string]string{"X-Forwarded-For": client}}).status
	}
	for range failures {
		if got := viaProxy("203.0.113.7", wrongToken); got != http.StatusUnauthorized {
			t.Fatalf("a wrong token through the proxy: %d, want 401", got)
		}
	}
	if got := viaProxy("203.0.113.7", adminToken); got != http.StatusTooManyRequests {
		t.Errorf("the forwarded client that failed, with the right token: %d, want 429", got)
	}
	if got := viaProxy("203.0.113.8", adminToken); got != http.StatusOK {
		t.Errorf("another client through the same proxy: %d, want 200 (its failures are its own)", got)
	}

	// An untrusted peer cannot escape its count by naming a new address
	// on every guess.
	for i := range failures {
		direct := req{method: "GET", path: "/v1/endpoints", body: "", token: wrongToken, header: map[string]string{"X-Forwarded-For": fmt.Sprintf("198.51.100.%d", i)}}
		if resp := f.fromAddress(direct); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a wrong token from an untrusted peer: %d, want 401", resp.StatusCode)
		}
	}
	direct := req{method: "GET", path: "/v1/endpoints", body: "", token: adminToken, header: map[string]string{"X-Forwarded-For": "198.51.100.200"}}
	if resp := f.fromAddress(direct); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the untrusted peer, spoofing a fresh address, with the right token: %d, want 429", resp.StatusCode)
	}
}
