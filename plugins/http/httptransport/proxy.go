package httptransport

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
)

// proxy is the egress proxy every send goes through, when the operator
// configured one. Every receiver, http:// or https://, is reached through
// a CONNECT tunnel, so TLS to an https:// receiver runs end to end and the
// proxy sees only the host and port it is asked for.
type proxy struct {
	scheme string // http or https: how the plugin talks to the proxy
	host   string // the proxy's name, for TLS to it and for messages
	addr   string // host:port dialed
	// auth is the Proxy-Authorization value, empty without credentials.
	// It is never put in an error or a message.
	auth string
}

// parseProxy reads the proxy settings. Errors name the setting and never
// repeat the URL or the credentials.
func parseProxy(raw, user, password string) (*proxy, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		if user != "" || password != "" {
			return nil, fmt.Errorf("%s and %s are set but %s is empty: set %s to the proxy's URL, or remove the credentials",
				SettingProxyUsername, SettingProxyPassword, SettingProxy, SettingProxy)
		}
		return nil, nil
	}
	u, err := pluginkit.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: the URL does not parse: %w", SettingProxy, err)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%s: the URL carries a user name or password, which would then be shown wherever the setting is; remove it and give them as %s and %s instead",
			SettingProxy, SettingProxyUsername, SettingProxyPassword)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%s: the scheme is %q; give the http:// (or https://) URL of a proxy that supports CONNECT, such as http://smokescreen.internal:4750",
			SettingProxy, u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%s: the URL has no host; give it as http://HOST:PORT", SettingProxy)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%s: give only the scheme, host and port (http://HOST:PORT), no path, query or fragment", SettingProxy)
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	p := &proxy{scheme: u.Scheme, host: u.Hostname(), addr: net.JoinHostPort(u.Hostname(), port)}
	if password != "" && user == "" {
		return nil, fmt.Errorf("%s is set but %s is empty: basic authentication needs both", SettingProxyPassword, SettingProxyUsername)
	}
	if user != "" {
		// Both go base64-encoded, so any byte is fine but the colon that
		// ends the user name.
		if strings.Contains(user, ":") {
			return nil, fmt.Errorf("%s contains a colon, which basic authentication cannot carry in a user name", SettingProxyUsername)
		}
		p.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	}
	return p, nil
}

// ProxyError is a proxy that did not open a tunnel to a receiver. Its
// text names the proxy and the address asked for, never the credentials.
type ProxyError struct {
	// Proxy is the proxy's host:port.
	Proxy string
	// Target is the receiver's host:port as the endpoint names it, and
	// Addr the checked address the CONNECT asked for.
	Target, Addr string
	// Status is the proxy's answer to CONNECT; 0 when it gave none.
	Status int
	// Err is why there was no answer, when Status is 0.
	Err error
}

func (e *ProxyError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("could not get a tunnel to %s (%s) from the webhook proxy %s: %v", e.Target, e.Addr, e.Proxy, e.Err)
	}
	return fmt.Sprintf("the webhook proxy %s answered CONNECT %s (for %s) with HTTP %d %s", e.Proxy, e.Addr, e.Target, e.Status, http.StatusText(e.Status))
}

func (e *ProxyError) Unwrap() error { return e.Err }

// dialViaProxy is the client's DialContext when a proxy is set. It does
// what the guarded dialer does without one: it resolves the receiver's
// name itself and checks every address with the guard, and asks the proxy
// to CONNECT only to an address that passed, by its IP, so a different DNS
// answer at the proxy cannot take the message elsewhere. The Host header
// and TLS server name stay the receiver's name: the client sets them from
// the URL, over the tunnel this returns. The proxy's own address is not
// checked: the operator configured it, and it usually sits on a private
// network.
func (c *configured) dialViaProxy(ctx context.Context, network, target string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		lookup := "ip"
		switch network {
		case "tcp4":
			lookup = "ip4"
		case "tcp6":
			lookup = "ip6"
		}
		addrs, err = c.resolver.LookupNetIP(ctx, lookup, host)
		if err != nil {
			return nil, err
		}
	}
	var refused, last error
	for _, a := range addrs {
		if a.Zone() != "" {
			// A zone is this host's interface: the CONNECT would name
			// one of the proxy's. target refuses a literal one first.
			zerr := &zoneError{addr: a}
			if _, err := netip.ParseAddr(host); err != nil {
				zerr.host = host
			}
			refused = cmpFirst(refused, zerr)
			continue
		}
		addr := net.JoinHostPort(a.Unmap().String(), port)
		if err := c.guard.CheckNetwork("tcp", addr); err != nil {
			refused = cmpFirst(refused, err)
			continue
		}
		conn, err := c.connect(ctx, target, addr)
		if err == nil {
			return conn, nil
		}
		last = err
		// Only an address the proxy could not reach is worth another: a
		// refusal or a missing credential answers every address alike.
		var perr *ProxyError
		if !errors.As(err, &perr) || perr.Status < 500 {
			return nil, err
		}
	}
	if last != nil {
		return nil, last
	}
	if refused != nil {
		return nil, refused
	}
	return nil, fmt.Errorf("%s resolved to no address", host)
}

func cmpFirst(first, next error) error {
	if first != nil {
		return first
	}
	return next
}

// connect opens a tunnel through the proxy to addr (a checked IP:port),
// within the connect timeout.
func (c *configured) connect(ctx context.Context, target, addr string) (net.Conn, error) {
	p := c.proxy
	fail := func(status int, err error) error {
		return &ProxyError{Proxy: p.addr, Target: target, Addr: addr, Status: status, Err: err}
	}
	d := net.Dialer{Timeout: c.connectTimeout, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, fail(0, err)
	}
	deadline := time.Now().Add(c.connectTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	// A cancelled send must not wait out the deadline.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if p.scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: p.host, RootCAs: c.roots, MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, fail(0, err)
		}
		conn = tc
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if p.auth != "" {
		req.Header.Set("Proxy-Authorization", p.auth)
	}
	if err := req.Write(conn); err != nil {
		_ = conn.Close()
		return nil, fail(0, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		_ = conn.Close()
		return nil, fail(0, err)
	}
	// A CONNECT answer has no body the tunnel's bytes could be mistaken
	// for; whatever the proxy said besides the status is not read.
	if resp.StatusCode != http.StatusOK {
		_ = conn.Close()
		return nil, fail(resp.StatusCode, nil)
	}
	if ctx.Err() != nil {
		_ = conn.Close()
		return nil, fail(0, ctx.Err())
	}
	_ = conn.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// bufferedConn is a tunnel whose first bytes were read along with the
// proxy's answer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }
