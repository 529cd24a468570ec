package httptransport

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/transport"
)

// Proxy credentials the tests use; neither may appear in an outcome or a
// Configure error.
const (
	proxyUser     = "hymical-proxy-user"
	proxyPassword = "PROXY-PASSWORD-MUST-NOT-LEAK"
)

// connectProxy is a small real CONNECT proxy on loopback: it records every
// CONNECT it is asked for and the bytes the client sent through each
// tunnel, checks basic authentication when it has credentials, and can be
// told to answer every CONNECT with a status of its own, as a filtering
// proxy refusing a destination does.
type connectProxy struct {
	srv    *httptest.Server
	user   string
	pass   string
	answer int // non-zero: answer every CONNECT with this status

	mu       sync.Mutex
	connects []string // the authority of each CONNECT, as asked
	tunneled bytes.Buffer
}

// newConnectProxy starts a proxy listening on addr (127.0.0.2:0 keeps it
// off the receivers' 127.0.0.1), over TLS when tlsProxy is set.
func newConnectProxy(t *testing.T, addr string, tlsProxy bool) *connectProxy {
	t.Helper()
	p := &connectProxy{}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("proxy listen on %s: %v", addr, err)
	}
	p.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(p.serve)}}
	if tlsProxy {
		p.srv.StartTLS()
	} else {
		p.srv.Start()
	}
	t.Cleanup(p.srv.Close)
	return p
}

// URL is the proxy's URL for the proxy setting.
func (p *connectProxy) URL() string { return p.srv.URL }

func (p *connectProxy) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	p.mu.Lock()
	p.connects = append(p.connects, r.Host)
	p.mu.Unlock()
	if p.user != "" {
		want := "Basic " + base64.StdEncoding.EncodeToString([]byte(p.user+":"+p.pass))
		if r.Header.Get("Proxy-Authorization") != want {
			w.Header().Set("Proxy-Authenticate", `Basic realm="egress"`)
			w.WriteHeader(http.StatusProxyAuthRequired)
			return
		}
	}
	if p.answer != 0 {
		w.WriteHeader(p.answer)
		return
	}
	upstream, err := net.Dial("tcp", r.Host)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer upstream.Close()
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer client.Close()
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(client, upstream)
	}()
	var sent bytes.Buffer
	_, _ = io.Copy(io.MultiWriter(upstream, &sent), buf)
	_ = upstream.(*net.TCPConn).CloseWrite()
	<-done
	p.mu.Lock()
	p.tunneled.Write(sent.Bytes())
	p.mu.Unlock()
}

// seen is every CONNECT authority the proxy was asked for so far.
func (p *connectProxy) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.connects...)
}

// through is what clients sent through the proxy's closed tunnels.
func (p *connectProxy) through() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tunneled.String()
}

// proxyTransport is a transport configured with settings whose TLS trusts
// the httptest servers' certificate (receivers' and proxy's alike).
func proxyTransport(t *testing.T, settings transport.Settings, trust *httptest.Server) *Transport {
	t.Helper()
	tr := New(Options{})
	if cert := trust.Certificate(); cert != nil {
		pool := x509.NewCertPool()
		pool.AddCert(cert)
		tr.roots = pool
	}
	if err := tr.Configure(context.Background(), settings); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	// Tunnels close when the client lets its connections go, so the
	// proxy's record of them is complete once the test ends.
	t.Cleanup(func() { tr.current().client.CloseIdleConnections() })
	return tr
}

func assertNoProxyLeak(t *testing.T, out transport.Outcome) {
	t.Helper()
	assertNoLeak(t, out)
	secret := base64.StdEncoding.EncodeToString([]byte(proxyUser + ":" + proxyPassword))
	for _, s := range []string{proxyPassword, "MUST-NOT-LEAK", secret} {
		if strings.Contains(out.Error, s) {
			t.Errorf("outcome error %q contains %q", out.Error, s)
		}
	}
}

type receivedRequest struct {
	host string
	tls  bool
	body string
}

func receiver(t *testing.T, useTLS bool) (*httptest.Server, <-chan receivedRequest) {
	t.Helper()
	got := make(chan receivedRequest, 4)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- receivedRequest{host: r.Host, tls: r.TLS != nil, body: string(b)}
		w.WriteHeader(http.StatusNoContent)
	})
	var srv *httptest.Server
	if useTLS {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv, got
}

// Every delivery goes through the proxy in a CONNECT tunnel to the
// checked IP:port, http:// and https:// receivers alike; the receiver
// still sees its own name as the Host, and an https:// receiver's TLS runs
// end to end, so the proxy never sees the body. The proxy listens on
// 127.0.0.2, outside allowed_networks: its address is trusted because it
// is configured, not checked by the guard.
func TestProxyCarriesDeliveries(t *testing.T) {
	t.Parallel()
	plain, plainGot := receiver(t, false)
	secure, secureGot := receiver(t, true)
	plainPort := plain.Listener.Addr().(*net.TCPAddr).Port
	securePort := secure.Listener.Addr().(*net.TCPAddr).Port

	tests := []struct {
		name       string
		tlsProxy   bool
		url        string
		got        <-chan receivedRequest
		wantTLS    bool
		wantHost   string
		wantTunnel string // the CONNECT authority
	}{
		{"http receiver", false, plain.URL + "/hook?token=" + secretQuery, plainGot, false, plain.Listener.Addr().String(), fmt.Sprintf("127.0.0.1:%d", plainPort)},
		{"https receiver", false, secure.URL + "/hook", secureGot, true, secure.Listener.Addr().String(), fmt.Sprintf("127.0.0.1:%d", securePort)},
		// The plugin resolves the name itself and asks for the address;
		// the receiver still gets its name as the Host.
		{"receiver by name", false, fmt.Sprintf("http://localhost:%d/hook", plainPort), plainGot, false, fmt.Sprintf("localhost:%d", plainPort), fmt.Sprintf("127.0.0.1:%d", plainPort)},
		{"https proxy, https receiver", true, secure.URL + "/hook", secureGot, true, secure.Listener.Addr().String(), fmt.Sprintf("127.0.0.1:%d", securePort)},
		{"https proxy, http receiver", true, plain.URL + "/hook", plainGot, false, plain.Listener.Addr().String(), fmt.Sprintf("127.0.0.1:%d", plainPort)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: the subtests share the receivers' channels.
			// httptest's certificate names 127.0.0.1, not 127.0.0.2, so a
			// TLS proxy shares the receivers' address.
			addr := "127.0.0.2:0"
			if tt.tlsProxy {
				addr = "127.0.0.1:0"
			}
			px := newConnectProxy(t, addr, tt.tlsProxy)
			tr := proxyTransport(t, transport.Settings{SettingAllowedNetworks: "127.0.0.1/32", SettingProxy: px.URL()}, secure)
			out := tr.Send(context.Background(), message(tt.url))
			if out.Kind != transport.OutcomeDelivered || out.StatusCode != http.StatusNoContent {
				t.Fatalf("outcome = %+v, want delivered 204", out)
			}
			r := <-tt.got
			if r.host != tt.wantHost || r.tls != tt.wantTLS || r.body != secretBody {
				t.Errorf("receiver got Host %q, TLS %v, body %q; want %q, %v, %q", r.host, r.tls, r.body, tt.wantHost, tt.wantTLS, secretBody)
			}
			// localhost may also resolve to ::1, which the guard refuses
			// (only 127.0.0.1 is allowed): the proxy is never asked for it.
			if got := px.seen(); len(got) != 1 || got[0] != tt.wantTunnel {
				t.Errorf("the proxy was asked to CONNECT to %q, want [%s]", got, tt.wantTunnel)
			}
			// The tunnel's bytes: plaintext for an http:// receiver (which
			// shows the proxy's record works), ciphertext for https://.
			tr.current().client.CloseIdleConnections()
			waitFor(t, func() bool { return px.through() != "" })
			if sawBody := strings.Contains(px.through(), "BODY-MUST-NOT-LEAK"); sawBody == tt.wantTLS {
				t.Errorf("the proxy saw the body: %v; want %v (TLS to an https:// receiver runs end to end)", sawBody, !tt.wantTLS)
			}
		})
	}
}

// The guard decides before the proxy is asked: a receiver it refuses gets
// no CONNECT at all, and the outcome says no request went out.
func TestProxyGuardRefusesBeforeConnect(t *testing.T) {
	t.Parallel()
	srv, _ := receiver(t, false)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	tests := []struct {
		name     string
		url      string
		wantAddr string
	}{
		{"loopback literal", srv.URL, fmt.Sprintf("127.0.0.1:%d", port)},
		{"name resolving to loopback", fmt.Sprintf("http://localhost:%d/", port), fmt.Sprintf(":%d", port)},
		{"metadata service", "http://169.254.169.254/latest/meta-data/", "169.254.169.254:80"},
		{"private network over https", "https://10.1.2.3/hook", "10.1.2.3:443"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			px := newConnectProxy(t, "127.0.0.2:0", false)
			// allowed_networks is empty: the proxy is reachable only
			// because it is configured.
			tr := proxyTransport(t, transport.Settings{SettingProxy: px.URL()}, srv)
			out := tr.Send(context.Background(), message(tt.url))
			if out.Kind != transport.OutcomePermanent || !out.NoRequest {
				t.Fatalf("outcome = %+v, want refused (permanent, no request)", out)
			}
			if !strings.Contains(out.Error, tt.wantAddr) || !strings.Contains(out.Error, "webhook.allowed_networks") {
				t.Errorf("error = %q, want it to name %q and webhook.allowed_networks", out.Error, tt.wantAddr)
			}
			if got := px.seen(); len(got) != 0 {
				t.Errorf("the proxy was asked to CONNECT to %q for a refused receiver", got)
			}
		})
	}
}

// Basic authentication goes to the proxy from the settings; a missing or
// wrong credential defers the delivery (the operator fixes it; nothing
// about the delivery is wrong) and no outcome ever shows the password.
func TestProxyAuthentication(t *testing.T) {
	t.Parallel()
	srv, got := receiver(t, false)
	tests := []struct {
		name     string
		user     string
		password string
		wantKind transport.OutcomeKind
		wantErr  string
	}{
		{"right credentials", proxyUser, proxyPassword, transport.OutcomeDelivered, ""},
		{"no credentials", "", "", transport.OutcomeRetryable, "none are set: set webhook.proxy_username and webhook.proxy_password (FORMS_WEBHOOK_PROXY_USERNAME"},
		{"wrong password", proxyUser, proxyPassword + "-WRONG", transport.OutcomeRetryable, "did not accept the credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			px := newConnectProxy(t, "127.0.0.2:0", false)
			px.user, px.pass = proxyUser, proxyPassword
			settings := transport.Settings{SettingAllowedNetworks: "127.0.0.1/32", SettingProxy: px.URL()}
			if tt.user != "" {
				settings[SettingProxyUsername] = tt.user
				settings[SettingProxyPassword] = tt.password
			}
			tr := proxyTransport(t, settings, srv)
			out := tr.Send(context.Background(), message(srv.URL+"/hook"))
			assertNoProxyLeak(t, out)
			if out.Kind != tt.wantKind {
				t.Fatalf("outcome = %+v, want %s", out, tt.wantKind)
			}
			if len(px.seen()) != 1 {
				t.Errorf("the proxy got %d CONNECTs, want 1", len(px.seen()))
			}
			if tt.wantKind == transport.OutcomeDelivered {
				<-got
				return
			}
			if !out.NoRequest || !strings.Contains(out.Error, "407") || !strings.Contains(out.Error, tt.wantErr) {
				t.Errorf("outcome = %+v, want deferred (no request) naming 407 and %q", out, tt.wantErr)
			}
		})
	}
}

// What a proxy that opens no tunnel means for the delivery.
func TestProxyErrorsAreClassified(t *testing.T) {
	t.Parallel()
	srv, _ := receiver(t, false)
	// A port nothing listens on, for a proxy that is down.
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	_ = l.Close()

	tests := []struct {
		name     string
		answer   int    // the proxy's answer to CONNECT
		proxyURL string // instead of a running proxy
		wantKind transport.OutcomeKind
		wantErr  string
	}{
		{"filtering proxy refuses the destination", http.StatusForbidden, "", transport.OutcomePermanent, "refused to open a tunnel to 127.0.0.1:"},
		{"proxy cannot reach the receiver", http.StatusBadGateway, "", transport.OutcomeRetryable, "HTTP 502 Bad Gateway"},
		{"proxy overloaded", http.StatusServiceUnavailable, "", transport.OutcomeRetryable, "HTTP 503 Service Unavailable"},
		{"proxy does not do CONNECT", http.StatusMethodNotAllowed, "", transport.OutcomeRetryable, "HTTP 405 Method Not Allowed"},
		{"proxy is down", 0, down, transport.OutcomeRetryable, "from the webhook proxy " + strings.TrimPrefix(down, "http://")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			proxyURL := tt.proxyURL
			if proxyURL == "" {
				px := newConnectProxy(t, "127.0.0.2:0", false)
				px.answer = tt.answer
				proxyURL = px.URL()
			}
			tr := proxyTransport(t, transport.Settings{SettingAllowedNetworks: "127.0.0.1/32", SettingProxy: proxyURL,
				SettingProxyUsername: proxyUser, SettingProxyPassword: proxyPassword}, srv)
			out := tr.Send(context.Background(), message(srv.URL+"/hook?token="+secretQuery))
			assertNoProxyLeak(t, out)
			// The proxy was asked: that is an attempt.
			if out.Kind != tt.wantKind || out.NoRequest || out.StatusCode != 0 || !strings.Contains(out.Error, tt.wantErr) {
				t.Errorf("outcome = %+v, want %s, an attempt, no receiver status, error containing %q", out, tt.wantKind, tt.wantErr)
			}
		})
	}
}

func TestConfigureProxy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		settings    transport.Settings
		wantAddr    string
		wantAuth    bool
		wantInError string
	}{
		{"no proxy", transport.Settings{SettingProxy: ""}, "", false, ""},
		{"http proxy", transport.Settings{SettingProxy: "http://smokescreen.internal:4750"}, "smokescreen.internal:4750", false, ""},
		{"trailing slash", transport.Settings{SettingProxy: "http://10.0.0.5:3128/"}, "10.0.0.5:3128", false, ""},
		{"default port", transport.Settings{SettingProxy: "https://proxy.internal"}, "proxy.internal:443", false, ""},
		{"IPv6", transport.Settings{SettingProxy: "http://[fd00::5]:3128"}, "[fd00::5]:3128", false, ""},
		{"credentials", transport.Settings{SettingProxy: "http://proxy:3128", SettingProxyUsername: proxyUser, SettingProxyPassword: proxyPassword}, "proxy:3128", true, ""},
		{"user without password", transport.Settings{SettingProxy: "http://proxy:3128", SettingProxyUsername: proxyUser}, "proxy:3128", true, ""},
		{"credentials in the URL", transport.Settings{SettingProxy: "http://" + proxyUser + ":" + proxyPassword + "@proxy:3128"}, "", false, "proxy: the URL carries a user name or password"},
		{"unparseable with a password", transport.Settings{SettingProxy: "http://u:" + proxyPassword + "@proxy:99999999999/%zz"}, "", false, "proxy: the URL does not parse"},
		{"socks", transport.Settings{SettingProxy: "socks5://proxy:1080"}, "", false, `scheme is "socks5"`},
		{"bare host", transport.Settings{SettingProxy: "proxy:3128"}, "", false, "proxy:"},
		{"path", transport.Settings{SettingProxy: "http://proxy:3128/egress"}, "", false, "no path, query or fragment"},
		{"password without user", transport.Settings{SettingProxy: "http://proxy:3128", SettingProxyPassword: proxyPassword}, "", false, "proxy_password is set but proxy_username is empty"},
		{"credentials without proxy", transport.Settings{SettingProxyUsername: proxyUser, SettingProxyPassword: proxyPassword}, "", false, "proxy is empty"},
		{"colon in the user", transport.Settings{SettingProxy: "http://proxy:3128", SettingProxyUsername: "a:b", SettingProxyPassword: proxyPassword}, "", false, "proxy_username contains a colon"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := New(Options{})
			err := tr.Configure(context.Background(), tt.settings)
			if tt.wantInError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantInError) {
					t.Fatalf("Configure error = %v, want it to contain %q", err, tt.wantInError)
				}
				if strings.Contains(err.Error(), proxyPassword) {
					t.Errorf("Configure error %q shows the password", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Configure: %v", err)
			}
			px := tr.current().proxy
			switch {
			case tt.wantAddr == "" && px != nil:
				t.Errorf("proxy at %s, want none", px.addr)
			case tt.wantAddr != "" && (px == nil || px.addr != tt.wantAddr || (px.auth != "") != tt.wantAuth):
				t.Errorf("proxy = %v, want %s with credentials %v", px != nil, tt.wantAddr, tt.wantAuth)
			}
		})
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
