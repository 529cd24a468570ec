package httptransport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/transporttest"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// Secrets the tests hand over; no outcome's error text may ever contain
// them.
const (
	secretHeader   = "v1,SIGNATURE-MUST-NOT-LEAK"
	secretBody     = `{"secret":"BODY-MUST-NOT-LEAK"}`
	secretQuery    = "QUERY-TOKEN-MUST-NOT-LEAK"
	secretResponse = "RESPONSE-BODY-MUST-NOT-LEAK"
	secretLocation = "/LOCATION-MUST-NOT-LEAK"
)

// loopback allows the httptest servers, which listen on loopback.
var loopback = transport.Settings{SettingAllowedNetworks: "127.0.0.0/8, ::1/128"}

func newTransport(t *testing.T, settings transport.Settings) *Transport {
	t.Helper()
	tr := New(Options{})
	if err := tr.Configure(context.Background(), settings); err != nil {
		t.Fatalf("Configure(%v): %v", settings, err)
	}
	return tr
}

func message(url string) transport.Message {
	return transport.Message{
		DeliveryID: "dlv_1",
		Attempt:    1,
		Endpoint:   transport.Endpoint{URL: url},
		Headers: []transport.Header{
			{Name: "webhook-id", Value: "dlv_1"},
			{Name: "webhook-timestamp", Value: "1700000000"},
			{Name: "webhook-signature", Value: secretHeader},
		},
		Body: []byte(secretBody),
	}
}

func assertNoLeak(t *testing.T, out transport.Outcome) {
	t.Helper()
	transporttest.AssertNoLeak(t, out, secretHeader, "SIGNATURE-MUST-NOT-LEAK", secretBody, "BODY-MUST-NOT-LEAK", secretQuery, secretResponse, secretLocation)
}

func TestDeliversExactlyTheHeadersAndBodyHandedOver(t *testing.T) {
	t.Parallel()
	type received struct {
		method string
		header http.Header
		body   string
	}
	got := make(chan received, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- received{r.Method, r.Header.Clone(), string(b)}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	tr := newTransport(t, loopback)
	msg := message(srv.URL + "/hook")
	msg.Headers = append(msg.Headers,
		transport.Header{Name: "X-Repeat", Value: "one"},
		transport.Header{Name: "X-Repeat", Value: "two"})

	out := tr.Send(context.Background(), msg)
	if out.Kind != transport.OutcomeDelivered || out.StatusCode != http.StatusNoContent || out.Error != "" {
		t.Fatalf("outcome = %+v, want delivered 204", out)
	}
	r := <-got
	if r.method != http.MethodPost || r.body != secretBody {
		t.Errorf("receiver got %s with body %q, want POST with %q", r.method, r.body, secretBody)
	}
	want := http.Header{
		"Webhook-Id":        {"dlv_1"},
		"Webhook-Timestamp": {"1700000000"},
		"Webhook-Signature": {secretHeader},
		"X-Repeat":          {"one", "two"},
		"Content-Type":      {"application/json"},
		"User-Agent":        {DefaultUserAgent},
	}
	for name, values := range want {
		if fmt.Sprint(r.header.Values(name)) != fmt.Sprint(values) {
			t.Errorf("receiver got %s: %q, want %q", name, r.header.Values(name), values)
		}
	}
	// What net/http always adds; anything else is a header nobody handed over.
	for name := range r.header {
		if _, ok := want[name]; !ok && name != "Content-Length" && name != "Accept-Encoding" {
			t.Errorf("receiver got unexpected header %s: %q", name, r.header.Values(name))
		}
	}
}

func TestClassifiesResponses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		status         int
		header         map[string]string
		wantKind       transport.OutcomeKind
		wantRetryAfter time.Duration
		wantInError    string
	}{
		{"200 is delivered", 200, nil, transport.OutcomeDelivered, 0, ""},
		{"202 is delivered", 202, nil, transport.OutcomeDelivered, 0, ""},
		{"299 is delivered", 299, nil, transport.OutcomeDelivered, 0, ""},
		{"301 is a redirect not followed", 301, map[string]string{"Location": secretLocation}, transport.OutcomeRetryable, 0, "redirect not followed (HTTP 301"},
		{"302 is a redirect not followed", 302, map[string]string{"Location": secretLocation}, transport.OutcomeRetryable, 0, "redirect not followed (HTTP 302"},
		{"307 is a redirect not followed", 307, map[string]string{"Location": secretLocation}, transport.OutcomeRetryable, 0, "redirect not followed (HTTP 307"},
		{"408 is retryable", 408, nil, transport.OutcomeRetryable, 0, "HTTP 408"},
		{"429 with Retry-After seconds", 429, map[string]string{"Retry-After": "120"}, transport.OutcomeRetryable, 120 * time.Second, "HTTP 429"},
		{"500 is retryable", 500, nil, transport.OutcomeRetryable, 0, "HTTP 500"},
		{"502 is retryable", 502, nil, transport.OutcomeRetryable, 0, "HTTP 502"},
		{"503 with a garbled Retry-After", 503, map[string]string{"Retry-After": "soon"}, transport.OutcomeRetryable, 0, "HTTP 503"},
		{"503 with an absurd Retry-After is clamped", 503, map[string]string{"Retry-After": "99999999999"}, transport.OutcomeRetryable, maxRetryAfter, "HTTP 503"},
		{"400 is permanent", 400, nil, transport.OutcomePermanent, 0, "HTTP 400"},
		{"401 is permanent", 401, nil, transport.OutcomePermanent, 0, "HTTP 401"},
		{"404 is permanent", 404, nil, transport.OutcomePermanent, 0, "HTTP 404"},
		{"410 is permanent", 410, nil, transport.OutcomePermanent, 0, "HTTP 410"},
		{"422 is permanent", 422, nil, transport.OutcomePermanent, 0, "HTTP 422"},
		{"413 is permanent", 413, nil, transport.OutcomePermanent, 0, "HTTP 413"},
		{"431 is retryable: the headers' size, not the event", 431, nil, transport.OutcomeRetryable, 0, "HTTP 431 Request Header Fields Too Large: it (or a proxy"},
		{"431 with Retry-After seconds", 431, map[string]string{"Retry-After": "60"}, transport.OutcomeRetryable, 60 * time.Second, "raise its header limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var followed atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == secretLocation {
					followed.Store(true)
					return
				}
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, secretResponse)
			}))
			defer srv.Close()
			tr := newTransport(t, loopback)

			out := tr.Send(context.Background(), message(srv.URL+"/hook?token="+secretQuery))
			if out.Kind != tt.wantKind || out.StatusCode != tt.status || out.RetryAfter != tt.wantRetryAfter {
				t.Errorf("outcome = %+v, want kind %s, status %d, retry after %v", out, tt.wantKind, tt.status, tt.wantRetryAfter)
			}
			if !strings.Contains(out.Error, tt.wantInError) {
				t.Errorf("outcome error = %q, want it to contain %q", out.Error, tt.wantInError)
			}
			if followed.Load() {
				t.Error("the redirect was followed")
			}
			if out.NoRequest {
				t.Error("an answered request is reported as no request")
			}
			assertNoLeak(t, out)
		})
	}
}

func TestRetryAfterAsHTTPDate(t *testing.T) {
	t.Parallel()
	at := time.Now().Add(90 * time.Second).UTC()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", at.Format(http.TimeFormat))
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	tr := newTransport(t, loopback)

	out := tr.Send(context.Background(), message(srv.URL))
	// The date has whole seconds, and the send took a moment.
	if out.Kind != transport.OutcomeRetryable || out.RetryAfter < 85*time.Second || out.RetryAfter > 90*time.Second {
		t.Errorf("outcome = %+v, want retryable with Retry-After about 90s", out)
	}
}

func TestRetryAfterParsing(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		value string
		want  time.Duration
	}{
		{"", 0},
		{"0", 0},
		{" 30 ", 30 * time.Second},
		{"-5", 0},
		{"1.5", 0},
		{now.Add(time.Hour).Format(http.TimeFormat), time.Hour},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Add(30 * 24 * time.Hour).Format(http.TimeFormat), maxRetryAfter},
		{"Mon, 99 Foo 2030 00:00:00 GMT", 0},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.value, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tt.value, got, tt.want)
		}
	}
}

func TestSlowReceiverHitsTheReadTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	tr := newTransport(t, transport.Settings{SettingAllowedNetworks: "127.0.0.0/8", SettingReadTimeout: "200ms"})

	start := time.Now()
	out := tr.Send(context.Background(), message(srv.URL))
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("Send took %v, want it cut off near the 200ms read timeout", elapsed)
	}
	if out.Kind != transport.OutcomeRetryable || out.StatusCode != 0 || !strings.Contains(out.Error, "read_timeout 200ms") {
		t.Errorf("outcome = %+v, want retryable naming read_timeout 200ms", out)
	}
	assertNoLeak(t, out)
}

func TestDeadlineEndsTheSend(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	tr := newTransport(t, loopback)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()

	out := tr.Send(ctx, message(srv.URL))
	if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "deadline") {
		t.Errorf("outcome = %+v, want retryable saying the deadline passed", out)
	}
}

func TestHugeResponseBodyIsNotReadInFull(t *testing.T) {
	t.Parallel()
	const offered = 256 << 20
	written := make(chan int64, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		chunk := []byte(strings.Repeat(secretResponse, 1<<10))
		var n int64
		for n < offered {
			m, err := w.Write(chunk)
			n += int64(m)
			if err != nil {
				break
			}
		}
		written <- n
	}))
	defer srv.Close()
	tr := newTransport(t, loopback)

	out := tr.Send(context.Background(), message(srv.URL))
	if out.Kind != transport.OutcomeDelivered || out.StatusCode != 200 {
		t.Errorf("outcome = %+v, want delivered 200", out)
	}
	select {
	case n := <-written:
		// Socket buffers absorb some; reading it all would take every byte.
		if n >= offered {
			t.Errorf("receiver wrote all %d bytes, want the client to stop reading after %d", n, MaxResponseBytes)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver was still writing 10s later: the client kept reading the body")
	}
}

func TestConnectionFailuresAreRetryable(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: take one, then close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + l.Addr().String() + "/hook?token=" + secretQuery
	_ = l.Close()

	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(tlsSrv.Close) // not defer: the parallel subtests run after this function returns

	tests := []struct {
		name        string
		url         string
		wantInError string
	}{
		{"connection refused", closedURL, "could not reach 127.0.0.1:"},
		{"untrusted TLS certificate", tlsSrv.URL + "/?token=" + secretQuery, "certificate"},
	}
	tr := newTransport(t, loopback)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := tr.Send(context.Background(), message(tt.url))
			if out.Kind != transport.OutcomeRetryable || out.StatusCode != 0 || !strings.Contains(out.Error, tt.wantInError) {
				t.Errorf("outcome = %+v, want retryable containing %q", out, tt.wantInError)
			}
			// A connection attempt toward the receiver is an attempt: the
			// retry allowance bounds a receiver that cannot be reached.
			if out.NoRequest {
				t.Errorf("outcome = %+v, want it counted as an attempt (NoRequest false)", out)
			}
			assertNoLeak(t, out)
		})
	}
}

func TestSSRFGuardRefusesAtDial(t *testing.T) {
	t.Parallel()
	var hit atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit.Store(true) }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	tests := []struct {
		name     string
		settings transport.Settings
		url      string
		wantKind transport.OutcomeKind
		wantAddr string
	}{
		{"loopback literal without allow-list", nil, srv.URL, transport.OutcomePermanent, fmt.Sprintf("127.0.0.1:%d", port)},
		// The name passes Validate; only the dial sees what it resolved to.
		{"name resolving to loopback without allow-list", nil, fmt.Sprintf("http://localhost:%d/", port), transport.OutcomePermanent, ":" + fmt.Sprint(port)},
		{"allow-list for another network", transport.Settings{SettingAllowedNetworks: "10.0.0.0/8"}, srv.URL, transport.OutcomePermanent, fmt.Sprintf("127.0.0.1:%d", port)},
		{"loopback inside the allow-list", loopback, srv.URL, transport.OutcomeDelivered, ""},
		{"single allowed address", transport.Settings{SettingAllowedNetworks: "127.0.0.1"}, srv.URL, transport.OutcomeDelivered, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hit.Store(false)
			tr := newTransport(t, tt.settings)
			out := tr.Send(context.Background(), message(tt.url))
			if out.Kind != tt.wantKind {
				t.Fatalf("outcome = %+v, want %s", out, tt.wantKind)
			}
			if tt.wantKind == transport.OutcomeDelivered {
				if !hit.Load() {
					t.Error("delivered, but the receiver saw no request")
				}
				return
			}
			if hit.Load() {
				t.Error("the receiver was reached despite the refusal")
			}
			if !out.NoRequest {
				t.Errorf("outcome = %+v, want NoRequest: the guard refused before connecting", out)
			}
			if !strings.Contains(out.Error, tt.wantAddr) || !strings.Contains(out.Error, SettingAllowedNetworks) || !strings.Contains(out.Error, "loopback") {
				t.Errorf("error = %q, want it to name the address %q, the kind of address and %s", out.Error, tt.wantAddr, SettingAllowedNetworks)
			}
		})
	}
}

func TestInvalidMessagesArePermanent(t *testing.T) {
	t.Parallel()
	tr := newTransport(t, loopback)
	tests := []struct {
		name        string
		msg         func() transport.Message
		wantInError string
	}{
		{"no URL", func() transport.Message { return message("") }, "no URL"},
		{"bad scheme", func() transport.Message { return message("ftp://example.com/") }, "scheme"},
		{"bad header name", func() transport.Message {
			m := message("http://127.0.0.1:1/")
			m.Headers = append(m.Headers, transport.Header{Name: "Bad Name", Value: "x"})
			return m
		}, `"Bad Name"`},
		{"control character in a header value", func() transport.Message {
			m := message("http://127.0.0.1:1/")
			m.Headers[2].Value = secretHeader + "\r\nInjected: yes"
			return m
		}, `"webhook-signature"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := tr.Send(context.Background(), tt.msg())
			if out.Kind != transport.OutcomePermanent || !out.NoRequest || !strings.Contains(out.Error, tt.wantInError) {
				t.Errorf("outcome = %+v, want permanent, no request, containing %q", out, tt.wantInError)
			}
			assertNoLeak(t, out)
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		settings    transport.Settings
		endpoint    transport.Endpoint
		wantInError string // empty: accepted
	}{
		{"https URL", nil, transport.Endpoint{URL: "https://hooks.example.com/in"}, ""},
		{"http URL with port", nil, transport.Endpoint{URL: "http://hooks.example.com:8080/in"}, ""},
		{"public literal IPv4", nil, transport.Endpoint{URL: "https://93.184.216.34/in"}, ""},
		{"public literal IPv6", nil, transport.Endpoint{URL: "https://[2606:2800:220:1::1]/in"}, ""},
		{"missing URL", nil, transport.Endpoint{}, "no URL"},
		{"unparseable URL", nil, transport.Endpoint{URL: "https://exa mple.com/%zz"}, "does not parse"},
		{"relative URL", nil, transport.Endpoint{URL: "/hooks"}, "scheme"},
		{"ftp scheme", nil, transport.Endpoint{URL: "ftp://example.com/"}, `scheme is "ftp"`},
		{"no host", nil, transport.Endpoint{URL: "https:///path"}, "no host"},
		{"userinfo", nil, transport.Endpoint{URL: "https://user:pw@example.com/"}, "user name or password"},
		{"loopback IPv4", nil, transport.Endpoint{URL: "http://127.0.0.1:9/"}, "loopback"},
		{"loopback IPv6", nil, transport.Endpoint{URL: "http://[::1]:9/"}, "loopback"},
		{"IPv4-mapped loopback", nil, transport.Endpoint{URL: "http://[::ffff:127.0.0.1]/"}, "loopback"},
		{"RFC 1918", nil, transport.Endpoint{URL: "http://10.1.2.3/"}, "private"},
		{"RFC 1918 172.16/12", nil, transport.Endpoint{URL: "http://172.20.0.1/"}, "private"},
		{"RFC 1918 192.168/16", nil, transport.Endpoint{URL: "http://192.168.1.1/"}, "private"},
		{"IPv6 ULA", nil, transport.Endpoint{URL: "http://[fd00::1]/"}, "private"},
		{"metadata service", nil, transport.Endpoint{URL: "http://169.254.169.254/latest/meta-data/"}, "link-local"},
		{"IPv6 link-local", nil, transport.Endpoint{URL: "http://[fe80::1%25eth0]/"}, "link-local"},
		{"unspecified", nil, transport.Endpoint{URL: "http://0.0.0.0/"}, "unspecified"},
		{"multicast", nil, transport.Endpoint{URL: "http://224.0.0.1/"}, "multicast"},
		{"CGNAT", nil, transport.Endpoint{URL: "http://100.64.0.1/"}, "CGNAT"},
		// Forms the guard once let through, each reaching a private network.
		{"NAT64 of a private address", nil, transport.Endpoint{URL: "http://[64:ff9b::a00:5]/"}, "leads to 10.0.0.5, which is in 10.0.0.0/8, private-use (RFC 1918)"},
		{"6to4 of a private address", nil, transport.Endpoint{URL: "http://[2002:a00:5::1]/"}, "leads to 10.0.0.5"},
		{"IPv4-compatible private address", nil, transport.Endpoint{URL: "http://[::a00:5]/"}, "leads to 10.0.0.5"},
		{"site-local", nil, transport.Endpoint{URL: "http://[fec0::1]/"}, "fec0::/10, site-local (deprecated) (RFC 3879)"},
		{"benchmarking", nil, transport.Endpoint{URL: "http://198.18.0.1/"}, "198.18.0.0/15, benchmarking (RFC 2544), which is not globally reachable"},
		{"documentation", nil, transport.Endpoint{URL: "https://203.0.113.9/"}, "203.0.113.0/24, documentation"},
		{"Teredo", nil, transport.Endpoint{URL: "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/"}, "Teredo"},
		{"NAT64 of a public address", nil, transport.Endpoint{URL: "https://[64:ff9b::808:808]/"}, ""},
		{"NAT64 of an allowed private address", transport.Settings{SettingAllowedNetworks: "10.0.0.0/8"}, transport.Endpoint{URL: "http://[64:ff9b::a00:5]/"}, ""},
		{"benchmarking inside the allow-list", transport.Settings{SettingAllowedNetworks: "198.18.0.0/15"}, transport.Endpoint{URL: "http://198.18.0.1/"}, ""},
		{"loopback inside the allow-list", loopback, transport.Endpoint{URL: "http://127.0.0.1:9/"}, ""},
		{"private inside the allow-list", transport.Settings{SettingAllowedNetworks: "10.0.0.0/8"}, transport.Endpoint{URL: "http://10.1.2.3/"}, ""},
		{"private outside the allow-list", transport.Settings{SettingAllowedNetworks: "10.0.0.0/16"}, transport.Endpoint{URL: "http://10.1.2.3/"}, "private"},
		{"endpoint config", nil, transport.Endpoint{URL: "https://example.com/", Config: map[string]string{"timeout": "1s"}}, "takes no endpoint config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newTransport(t, tt.settings)
			err := tr.Validate(context.Background(), tt.endpoint)
			if tt.wantInError == "" {
				if err != nil {
					t.Errorf("Validate: %v, want accepted", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantInError) {
				t.Errorf("Validate error = %v, want it to contain %q", err, tt.wantInError)
			}
			var refused *netguard.RefusedError
			if errors.As(err, &refused) && !strings.Contains(err.Error(), "webhook.allowed_networks") {
				t.Errorf("refusal %q does not say which setting to change", err)
			}
		})
	}
}

func TestConfigure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		settings    transport.Settings
		wantConnect time.Duration
		wantRead    time.Duration
		wantAllowed []string
		wantInError string
	}{
		{"defaults", nil, DefaultConnectTimeout, DefaultReadTimeout, nil, ""},
		{"every setting", transport.Settings{SettingConnectTimeout: "2s", SettingReadTimeout: "1500ms", SettingAllowedNetworks: "10.0.0.0/8, fd00::/8,192.168.1.7"},
			2 * time.Second, 1500 * time.Millisecond, []string{"10.0.0.0/8", "fd00::/8", "192.168.1.7/32"}, ""},
		{"unmasked CIDR is masked", transport.Settings{SettingAllowedNetworks: "10.1.2.3/8"}, DefaultConnectTimeout, DefaultReadTimeout, []string{"10.0.0.0/8"}, ""},
		{"empty allow-list", transport.Settings{SettingAllowedNetworks: ""}, DefaultConnectTimeout, DefaultReadTimeout, nil, ""},
		{"not a duration", transport.Settings{SettingReadTimeout: "10"}, 0, 0, nil, `read_timeout: "10" is not a positive Go duration`},
		{"negative duration", transport.Settings{SettingConnectTimeout: "-1s"}, 0, 0, nil, "connect_timeout"},
		{"bad CIDR", transport.Settings{SettingAllowedNetworks: "10.0.0.0/33"}, 0, 0, nil, `"10.0.0.0/33" is not a CIDR`},
		{"unknown setting", transport.Settings{"read_timout": "1s"}, 0, 0, nil, `unknown setting "read_timout"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := New(Options{})
			before := tr.current()
			err := tr.Configure(context.Background(), tt.settings)
			if tt.wantInError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantInError) {
					t.Errorf("Configure error = %v, want it to contain %q", err, tt.wantInError)
				}
				if tr.current() != before {
					t.Error("a refused Configure changed the settings")
				}
				return
			}
			if err != nil {
				t.Fatalf("Configure: %v", err)
			}
			c := tr.current()
			var allowed []string
			for _, p := range c.guard.Allowed() {
				allowed = append(allowed, p.String())
			}
			if c.connectTimeout != tt.wantConnect || c.readTimeout != tt.wantRead || fmt.Sprint(allowed) != fmt.Sprint(tt.wantAllowed) {
				t.Errorf("configured connect %v, read %v, allowed %v; want %v, %v, %v",
					c.connectTimeout, c.readTimeout, allowed, tt.wantConnect, tt.wantRead, tt.wantAllowed)
			}
		})
	}
}

// The plugin keeps refusing what it always refused; the whole rule is
// tested in sdk/netguard.
func TestGuardClassifiesAddresses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr    string
		blocked bool
	}{
		{"127.0.0.1", true}, {"127.255.0.1", true}, {"::1", true},
		{"10.0.0.1", true}, {"172.16.0.1", true}, {"172.31.255.255", true}, {"192.168.0.1", true},
		{"fc00::1", true}, {"fdff::1", true},
		{"169.254.169.254", true}, {"169.254.0.1", true}, {"fe80::1", true},
		{"0.0.0.0", true}, {"::", true}, {"0.1.2.3", true},
		{"224.0.0.1", true}, {"239.255.255.250", true}, {"ff02::1", true},
		{"100.64.0.1", true}, {"100.127.255.255", true},
		{"255.255.255.255", true}, {"::ffff:10.0.0.1", true},
		{"64:ff9b::a00:5", true}, {"2002:a00:5::1", true}, {"::a00:5", true}, {"fec0::1", true}, {"198.18.0.1", true},
		{"8.8.8.8", false}, {"172.32.0.1", false}, {"100.128.0.1", false}, {"100.63.255.255", false},
		{"2001:4860:4860::8888", false}, {"93.184.216.34", false}, {"64:ff9b::808:808", false},
	}
	everything := newGuard([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")})
	for _, tt := range tests {
		addr := netip.MustParseAddr(tt.addr)
		if got := newGuard(nil).Check(addr) != nil; got != tt.blocked {
			t.Errorf("%s: blocked = %v, want %v", tt.addr, got, tt.blocked)
		}
		if err := everything.Check(addr); err != nil {
			t.Errorf("%s with everything allowed: %v", tt.addr, err)
		}
	}
	if err := newGuard(nil).CheckNetwork("tcp", "not-an-address"); err == nil {
		t.Error("the guard accepted an address it could not parse")
	}
}

// Configure may run while sends are in flight (the host reconfigures after
// a restart); neither may see a half-built configuration.
func TestConcurrentSendsAndConfigure(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	tr := newTransport(t, loopback)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%4 == 0 {
				if err := tr.Configure(context.Background(), loopback); err != nil {
					t.Errorf("Configure: %v", err)
				}
			}
			if out := tr.Send(context.Background(), message(srv.URL)); out.Kind != transport.OutcomeDelivered {
				t.Errorf("outcome = %+v, want delivered", out)
			}
		}()
	}
	wg.Wait()
}

// A burst of concurrent sends to one receiver opens a connection per send;
// the next bursts must reuse them all rather than close some after each
// send and dial again (net/http keeps two idle connections a host unless
// told otherwise, and any fixed cap below the server's concurrency churns).
func TestConnectionsAreKeptForTheNextBurst(t *testing.T) {
	t.Parallel()
	const inFlight, bursts = 40, 3
	var opened atomic.Int64
	arrived := make(chan struct{}, inFlight)
	release := make(chan struct{})
	var mu sync.Mutex
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Take this burst's release before saying it arrived: once all have
		// arrived the test closes it and makes the next burst's.
		mu.Lock()
		wait := release
		mu.Unlock()
		arrived <- struct{}{}
		<-wait
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := newTransport(t, loopback)

	for burst := range bursts {
		var wg sync.WaitGroup
		for range inFlight {
			wg.Go(func() {
				if out := tr.Send(context.Background(), message(srv.URL)); out.Kind != transport.OutcomeDelivered {
					t.Errorf("outcome = %+v, want delivered", out)
				}
			})
		}
		// Every send of the burst is at the receiver before any is answered,
		// so each one needed a connection of its own.
		for range inFlight {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatalf("burst %d: not all %d sends reached the receiver", burst, inFlight)
			}
		}
		mu.Lock()
		close(release)
		release = make(chan struct{})
		mu.Unlock()
		wg.Wait()
	}
	if got := opened.Load(); got != inFlight {
		t.Errorf("%d bursts of %d concurrent sends opened %d connections, want %d: connections were closed between bursts and dialled again",
			bursts, inFlight, got, inFlight)
	}
}
