// Package httptransport is the logic of the HTTP transport plugin: it POSTs
// a signed message to an endpoint's URL and classifies what came back. It
// is a library so that it can run behind plugins/http's main or in-process
// (a benchmark); it speaks only the sdk/transport types and must not import
// anything from the server's server/ or storage/ trees.
//
// What it promises the server:
//   - the request carries exactly the headers it was handed, plus
//     Content-Type: application/json and a User-Agent when those are not
//     among them;
//   - 2xx is delivered; 408, 429, 5xx, redirects (never followed),
//     timeouts and connection failures are retryable, with the receiver's
//     Retry-After passed on; other 4xx are permanent;
//   - at most 4 KiB of a response body is read, and it is discarded: it is
//     never returned or stored;
//   - error text names the host and what went wrong, never a request
//     header, the body or the URL's path and query;
//   - the request carries the W3C traceparent (and tracestate) of a client
//     span that is a child of the attempt in the Send's context, so the
//     receiver's own spans join the attempt's trace; the span records the
//     method, host, port, scheme and status, never the URL's path or query
//     (which may carry a token), a header or the body;
//   - connections to addresses that are not globally reachable (the rule
//     of sdk/netguard: loopback, private, link-local, CGNAT, multicast,
//     documentation, benchmarking, and the NAT64, 6to4 and IPv4-compatible
//     forms of those) are refused when dialing, after DNS resolution,
//     unless the operator's allowed_networks contains the address;
//   - with a proxy setting, every send goes through that proxy in a
//     CONNECT tunnel, http:// receivers too; the plugin still resolves
//     the receiver's name and checks each address with the guard, and
//     asks the proxy for the checked IP:port, so nothing the guard refuses
//     is ever asked for and the proxy's DNS cannot differ. The proxy's
//     own address is trusted, not checked: the operator configured it;
//   - an outcome says no request went out (NoRequest) only when the plugin
//     itself stopped before any connection was made: its guard refused
//     every address the name resolved to, or the endpoint's URL or the
//     headers could not make a request at all; or when the proxy asked
//     for credentials (407), which it does before forwarding anything, so
//     the delivery waits (Deferred) until the operator fixes them. A
//     failed DNS lookup, a refused connection and any other proxy failure
//     are attempts, retryable as before (a proxy's 403 permanent): the
//     retry allowance is what bounds a receiver that cannot be reached.
package httptransport

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// Defaults for the plugin-wide settings.
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultReadTimeout    = 10 * time.Second
	DefaultUserAgent      = "Hymical-Webhooks/1"
)

// MaxResponseBytes is the most of a response body that is read before the
// connection is dropped. It is read only so the receiver is not cut off
// mid-write for tiny answers; it is never kept.
const MaxResponseBytes = 4 << 10

// maxRetryAfter clamps a receiver's Retry-After; the server applies its own
// schedule on top.
const maxRetryAfter = 7 * 24 * time.Hour

// maxIdlePerHost is higher than any server's sends in flight
// (worker.concurrency is at most 10,000), so no connection is closed for
// want of room; idle ones still close after IdleConnTimeout.
const maxIdlePerHost = 1 << 16

// The settings Configure accepts.
const (
	SettingConnectTimeout  = "connect_timeout"
	SettingReadTimeout     = "read_timeout"
	SettingAllowedNetworks = netguard.SettingAllowedNetworks
	// SettingProxy is the egress proxy's URL, http://HOST:PORT or
	// https://HOST:PORT, without credentials; empty sends directly.
	SettingProxy = "proxy"
	// SettingProxyUsername and SettingProxyPassword are the proxy's basic
	// authentication credentials, sent only to the proxy.
	SettingProxyUsername = "proxy_username"
	SettingProxyPassword = "proxy_password"
)

// Options are what the embedding program decides, as opposed to the
// operator's settings.
type Options struct {
	// UserAgent is sent unless the message carries its own; empty means
	// DefaultUserAgent.
	UserAgent string
}

// Transport is the HTTP transport. It is safe for concurrent use, and
// Configure may be called again at any time.
type Transport struct {
	userAgent string
	// roots, when set, replaces the system's roots for TLS to receivers
	// and to the proxy; the tests trust their own servers with it.
	roots *x509.CertPool
	// resolver, when set, replaces net.DefaultResolver for receivers'
	// names; the tests answer DNS with it.
	resolver *net.Resolver

	mu  sync.RWMutex
	cur *configured
}

var _ transport.Transport = (*Transport)(nil)

// configured is one set of settings and the client built for them. It is
// replaced whole, never changed, so a Send keeps a consistent view.
type configured struct {
	connectTimeout time.Duration
	readTimeout    time.Duration
	guard          *netguard.Guard
	proxy          *proxy // nil: send directly
	roots          *x509.CertPool
	resolver       *net.Resolver // never nil
	client         *http.Client
}

// New returns a transport with the default settings, ready to Send before
// any Configure.
func New(opts Options) *Transport {
	ua := opts.UserAgent
	if ua == "" {
		ua = DefaultUserAgent
	}
	t := &Transport{userAgent: ua}
	t.cur = newConfigured(DefaultConnectTimeout, DefaultReadTimeout, nil, nil, nil, nil)
	return t
}

func newConfigured(connect, read time.Duration, allowed []netip.Prefix, px *proxy, roots *x509.CertPool, resolver *net.Resolver) *configured {
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	c := &configured{connectTimeout: connect, readTimeout: read, guard: newGuard(allowed), proxy: px, roots: roots, resolver: resolver}
	// The guard checks each address the dialer connects to, after DNS
	// resolution, so a name that resolves (or re-resolves, as in DNS
	// rebinding) to a refused address is caught.
	dial := c.guard.Dialer(&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second, Resolver: resolver}).DialContext
	if px != nil {
		// Through the proxy, the same check happens before the CONNECT.
		dial = c.dialViaProxy
	}
	var tlsConfig *tls.Config
	if roots != nil {
		tlsConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	c.client = &http.Client{
		Transport: &http.Transport{
			// Never net/http's own proxying (nor HTTPS_PROXY and the like):
			// through it the guard would check the proxy's address, not
			// the receiver's. dialViaProxy tunnels after the check.
			Proxy:                 nil,
			DialContext:           dial,
			TLSClientConfig:       tlsConfig,
			ForceAttemptHTTP2:     true,
			TLSHandshakeTimeout:   connect,
			ResponseHeaderTimeout: read,
			ExpectContinueTimeout: time.Second,
			// Keep every connection a burst opened: idle ones can never
			// outnumber the sends that were in flight at once, which the
			// server's worker.concurrency bounds. With a smaller cap, more
			// concurrent sends to one receiver than the cap closed a
			// connection after each send and dialled a new one for the
			// next: at concurrency 100 against one receiver, twice the
			// plugin's CPU a delivery.
			MaxIdleConns:           0,
			MaxIdleConnsPerHost:    maxIdlePerHost,
			IdleConnTimeout:        90 * time.Second,
			MaxResponseHeaderBytes: 64 << 10,
			// The body is discarded, so there is nothing to decompress.
			DisableCompression: true,
		},
		// A redirect is reported, never followed: following it would send
		// a signed message somewhere the operator never registered.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

func newGuard(allowed []netip.Prefix) *netguard.Guard {
	return netguard.New(netguard.Config{Allowed: allowed, Plugin: "http", Target: "receiver",
		// The server hands its webhook.allowed_networks to this plugin.
		AllowedSetting: "webhook.allowed_networks (FORMS_WEBHOOK_ALLOWED_NETWORKS)"})
}

func (t *Transport) current() *configured {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.cur
}

// Configure applies the plugin-wide settings. Settings not given take
// their defaults, so a Configure replaces every earlier one.
func (t *Transport) Configure(_ context.Context, settings transport.Settings) error {
	connect, read := DefaultConnectTimeout, DefaultReadTimeout
	var allowed []netip.Prefix
	var proxyURL, proxyUser, proxyPassword string
	var errs []error
	for key, value := range settings {
		var err error
		switch key {
		case SettingConnectTimeout:
			connect, err = parseTimeout(key, value)
		case SettingReadTimeout:
			read, err = parseTimeout(key, value)
		case SettingAllowedNetworks:
			allowed, err = netguard.ParseNetworks(SettingAllowedNetworks, value)
		case SettingProxy:
			proxyURL = value
		case SettingProxyUsername:
			proxyUser = value
		case SettingProxyPassword:
			proxyPassword = value
		default:
			err = fmt.Errorf("unknown setting %q: the http plugin takes %s", key, strings.Join([]string{
				SettingConnectTimeout, SettingReadTimeout, SettingAllowedNetworks,
				SettingProxy, SettingProxyUsername, SettingProxyPassword}, ", "))
		}
		errs = append(errs, err)
	}
	px, err := parseProxy(proxyURL, proxyUser, proxyPassword)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	next := newConfigured(connect, read, allowed, px, t.roots, t.resolver)
	t.mu.Lock()
	prev := t.cur
	t.cur = next
	t.mu.Unlock()
	// Sends in flight keep their client; only idle connections go.
	prev.client.CloseIdleConnections()
	return nil
}

func parseTimeout(key, value string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(value))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: %q is not a positive Go duration such as \"5s\" or \"1500ms\"", key, value)
	}
	return d, nil
}

// Validate checks an endpoint before it is registered: a URL that could
// never be sent to is refused now rather than failing at every attempt.
// Names are not resolved here; an address they resolve to is checked when
// dialing.
func (t *Transport) Validate(_ context.Context, e transport.Endpoint) error {
	if len(e.Config) > 0 {
		keys := make([]string, 0, len(e.Config))
		for k := range e.Config {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return fmt.Errorf("the http transport takes no endpoint config, got %s; remove it", strings.Join(keys, ", "))
	}
	_, err := t.current().target(e.URL, true)
	return err
}

// target parses and checks an endpoint URL. With checkLiteral, a literal
// address in it is checked against the guard too; Send leaves that to the
// dial, which checks every address, literal or resolved, in one place.
func (c *configured) target(raw string, checkLiteral bool) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, errors.New("the endpoint has no URL; give an http:// or https:// URL")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url's error quotes the whole URL, which may carry a token in its
		// query; say what is wrong without it.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("the endpoint URL does not parse: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("the endpoint URL's scheme is %q; the http transport sends only to http:// or https:// URLs", u.Scheme)
	}
	if u.User != nil {
		return nil, errors.New("the endpoint URL carries a user name or password; remove it, since credentials in URLs end up in logs and proxies, and authenticate with the signature instead")
	}
	if u.Hostname() == "" {
		return nil, errors.New("the endpoint URL has no host")
	}
	if addr, err := netip.ParseAddr(u.Hostname()); err == nil {
		if addr.Zone() != "" && c.proxy != nil {
			return nil, &zoneError{addr: addr}
		}
		if checkLiteral {
			if err := c.guard.Check(addr); err != nil {
				return nil, err
			}
		}
	}
	return u, nil
}

// zoneError is an IPv6 address with a zone (fe80::1%eth0) met where
// webhook.proxy is set. A zone names a network interface of this host: a
// CONNECT carrying it would ask the proxy for an interface of its own, and
// without it the address is a different one.
type zoneError struct {
	addr netip.Addr
	host string // the name that resolved to addr; empty for a literal
}

func (e *zoneError) Error() string {
	what := "the endpoint URL's address " + e.addr.String()
	if e.host != "" {
		what = fmt.Sprintf("%s resolved to %s, which", e.host, e.addr)
	}
	return fmt.Sprintf("%s carries an IPv6 zone (%%%s), naming a network interface of this host, so it cannot be sent through webhook.proxy; give an address without a zone, or unset webhook.proxy to send to it directly",
		what, e.addr.Zone())
}

// fromDNS reports whether host is a name whose address comes from a DNS
// answer, which may differ on the next try: not a literal address, and not
// localhost (RFC 6761), which is loopback whatever resolves it.
func fromDNS(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h != "localhost" && !strings.HasSuffix(h, ".localhost")
}

// Send POSTs msg and classifies the answer.
func (t *Transport) Send(ctx context.Context, msg transport.Message) transport.Outcome {
	c := t.current()
	// Until the request is handed to the client nothing has left the
	// process, so each refusal here says no request went out.
	u, err := c.target(msg.Endpoint.URL, false)
	if err != nil {
		return transport.Refused(err.Error())
	}
	for _, h := range msg.Headers {
		if !httpguts.ValidHeaderFieldName(h.Name) {
			return transport.Refused(fmt.Sprintf("header name %q is not valid in HTTP", h.Name))
		}
		if !httpguts.ValidHeaderFieldValue(h.Value) {
			// The value may be a signature: name the header, not the value.
			return transport.Refused(fmt.Sprintf("the value of header %q is not valid in HTTP (it contains control characters)", h.Name))
		}
	}

	// reqCtx also bounds reading the response body, after Do returns. Its
	// trace notes whether the client ever got a connection: without one,
	// no byte of the request can have been written.
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var connected atomic.Bool
	reqCtx = httptrace.WithClientTrace(reqCtx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	})
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, u.String(), bytes.NewReader(msg.Body))
	if err != nil {
		return transport.Refused(fmt.Sprintf("could not build a request for %s: %v", u.Host, err))
	}
	for _, h := range msg.Headers {
		req.Header.Add(h.Name, h.Value)
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", t.userAgent)
	}

	// The span's tracer comes from the Send's own context: the provider
	// the plugin's Serve set up, or a no-op one that still carries the
	// attempt's trace context onwards.
	tracer := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName)
	spanCtx, span := tracer.Start(reqCtx, http.MethodPost, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.HTTPRequestMethodPost, semconv.ServerAddress(u.Hostname()),
			semconv.ServerPort(port(u)), semconv.URLScheme(u.Scheme)))
	defer span.End()
	propagation.TraceContext{}.Inject(spanCtx, propagation.HeaderCarrier(req.Header))

	out := c.do(ctx, req, u, cancel, &connected)
	if out.StatusCode != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(out.StatusCode))
	}
	if out.Kind != transport.OutcomeDelivered {
		span.SetStatus(codes.Error, out.Error)
	}
	return out
}

// tracerName is the instrumentation scope of the plugin's client spans.
const tracerName = "github.com/hymical/hymical/plugins/http/httptransport"

// do sends req and classifies what came back. connected says whether the
// client got a connection for it, which it sets as it does.
func (c *configured) do(ctx context.Context, req *http.Request, u *url.URL, cancel context.CancelFunc, connected *atomic.Bool) transport.Outcome {
	resp, err := c.client.Do(req)
	if err != nil {
		return c.classifyError(ctx, u, err, connected.Load())
	}
	discard(resp.Body, c.readTimeout, cancel)
	return classifyResponse(resp, time.Now())
}

// port is the URL's port, or the scheme's default.
func port(u *url.URL) int {
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}

// discard reads at most MaxResponseBytes of body within timeout and closes
// it. Nothing read is kept, and a read error changes nothing: the status is
// already known.
func discard(body io.ReadCloser, timeout time.Duration, cancel context.CancelFunc) {
	timer := time.AfterFunc(timeout, cancel)
	defer timer.Stop()
	_, _ = io.CopyN(io.Discard, body, MaxResponseBytes)
	_ = body.Close()
}

// classifyError says what a failed Do means. connected is whether the
// client got a connection for the request at any point.
func (c *configured) classifyError(ctx context.Context, u *url.URL, err error, connected bool) transport.Outcome {
	host := u.Host
	// The refusal's own text: err's would repeat the URL, which may carry
	// a token in its query.
	var refusal error
	var refused *netguard.RefusedError
	var zoned *zoneError
	switch {
	case errors.As(err, &refused):
		refusal = refused
	case errors.As(err, &zoned):
		refusal = zoned
	}
	if refusal != nil {
		text := refusal.Error()
		if fromDNS(u.Hostname()) {
			// A DNS answer can change: one bad answer for a name that
			// usually resolves to an allowed address (a resolver's
			// mistake, a rebinding attempt that passes) must not fail
			// the delivery for good. Each try checks the new answer.
			text = fmt.Sprintf("%s resolved to an address this plugin will not connect to: %s; a DNS answer can change, so the delivery is tried again", u.Hostname(), text)
			if !connected {
				// Nothing was sent: tried again after a short wait,
				// without using up its retries.
				return transport.Deferred(text)
			}
			return transport.Retryable(0, text)
		}
		// A literal address (or localhost) is refused on every try: the
		// operator's setting or the endpoint's URL has to change.
		if !connected {
			// The guard refused the dial, and the client had no other
			// connection: nothing was sent.
			return transport.Refused(text)
		}
		return transport.Permanent(0, text)
	}
	var perr *ProxyError
	if errors.As(err, &perr) {
		return c.proxyOutcome(ctx, perr)
	}
	// url.Error's text repeats the URL, which may carry a token in its
	// query; the host and the cause are what an operator needs.
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	if ctx.Err() != nil {
		return transport.Retryable(0, fmt.Sprintf("no answer from %s before the attempt's deadline", host))
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			return transport.Retryable(0, fmt.Sprintf("timed out connecting to %s (connect_timeout %s)", host, c.connectTimeout))
		}
		return transport.Retryable(0, fmt.Sprintf("timed out waiting for %s (connect_timeout %s, read_timeout %s): %v",
			host, c.connectTimeout, c.readTimeout, err))
	}
	return transport.Retryable(0, fmt.Sprintf("could not reach %s: %v", host, err))
}

// proxyOutcome says what a proxy that opened no tunnel means. Nothing
// reached the receiver, but the proxy was asked, so it is an attempt,
// except for missing or wrong credentials: those are the operator's to fix
// and say nothing about the delivery, so it waits (Deferred) without using
// up its retries until the proxy takes them.
func (c *configured) proxyOutcome(ctx context.Context, e *ProxyError) transport.Outcome {
	switch {
	case e.Status == http.StatusForbidden:
		// A filtering proxy's verdict on the destination: every retry
		// would get the same answer.
		return transport.Permanent(0, fmt.Sprintf("the webhook proxy %s refused to open a tunnel to %s (%s) with HTTP 403 Forbidden: its policy does not allow this destination; allow it at the proxy if the receiver is meant to be reached",
			e.Proxy, e.Target, e.Addr))
	case e.Status == http.StatusProxyAuthRequired:
		what := "asked for credentials, and none are set: set webhook.proxy_username and webhook.proxy_password (FORMS_WEBHOOK_PROXY_USERNAME, FORMS_WEBHOOK_PROXY_PASSWORD)"
		if c.proxy.auth != "" {
			what = "did not accept the credentials: check webhook.proxy_username and webhook.proxy_password (FORMS_WEBHOOK_PROXY_USERNAME, FORMS_WEBHOOK_PROXY_PASSWORD)"
		}
		return transport.Deferred(fmt.Sprintf("the webhook proxy %s %s (HTTP 407 Proxy Authentication Required); the delivery waits, without using up its retries, until the proxy accepts them",
			e.Proxy, what))
	case e.Status != 0:
		// 502, 503, 504: the proxy could not reach the receiver, or is
		// overloaded; anything else is a proxy that may be fixed.
		return transport.Retryable(0, e.Error())
	case ctx.Err() != nil:
		return transport.Retryable(0, fmt.Sprintf("no tunnel to %s from the webhook proxy %s before the attempt's deadline", e.Target, e.Proxy))
	}
	var netErr net.Error
	if errors.As(e.Err, &netErr) && netErr.Timeout() {
		return transport.Retryable(0, fmt.Sprintf("timed out getting a tunnel to %s from the webhook proxy %s (connect_timeout %s)", e.Target, e.Proxy, c.connectTimeout))
	}
	return transport.Retryable(0, e.Error())
}

func classifyResponse(resp *http.Response, now time.Time) transport.Outcome {
	code := resp.StatusCode
	status := fmt.Sprintf("HTTP %d %s", code, http.StatusText(code))
	switch {
	case code >= 200 && code <= 299:
		return transport.Delivered(code)
	case code >= 300 && code <= 399:
		// The Location is not repeated: it is the receiver's to disclose.
		out := transport.Retryable(code, fmt.Sprintf("redirect not followed (%s); register the URL the receiver redirects to instead", status))
		out.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), now)
		return out
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500 && code <= 599:
		out := transport.Retryable(code, "receiver answered "+status)
		out.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), now)
		return out
	case code == http.StatusRequestHeaderFieldsTooLarge:
		// A well-formed message refused for the size of its headers (the
		// webhook-signature grows with the endpoint's live secrets): the
		// receiver's limit, or a proxy's in front of it, can be raised,
		// or the secrets brought down, and the event then goes through.
		// Nothing about the event itself is wrong, so it is retried.
		out := transport.Retryable(code, "receiver answered "+status+
			": it (or a proxy in front of it) refused the size of the request's headers; raise its header limit")
		out.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), now)
		return out
	case code >= 400 && code <= 499:
		return transport.Permanent(code, "receiver answered "+status)
	}
	return transport.Retryable(code, "receiver answered with an unexpected "+status)
}

// retryAfter reads a Retry-After header, given in seconds or as an HTTP
// date; 0 means absent, unreadable or already past.
func retryAfter(value string, now time.Time) time.Duration {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(value, 10, 64); err == nil {
		if secs > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(value); err == nil {
		d = at.Sub(now)
	} else {
		return 0
	}
	return min(max(d, 0), maxRetryAfter)
}
