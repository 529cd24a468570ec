// Package devmode guards a server that runs without credentials
// (server.insecure_dev_mode). Such a server lets in anyone who can reach
// it, and it listens on loopback only, so the one stranger who can still
// reach it is a web page in the developer's own browser: a form or a
// fetch sent from another site (CSRF), or a site whose DNS name is
// switched to 127.0.0.1 after the page loaded, which makes the browser
// treat the server as that site's own and hand the page its answers (DNS
// rebinding).
//
// Check refuses both: a Host that is not a loopback name with the port
// the server listens on, and a request the browser says came from
// another site. CheckJSONWrite adds, for the API, that every write
// carries Content-Type: application/json: a browser sends that type to
// another origin only after a CORS preflight, which the server never
// answers with a yes, so no page can send a write at all. The package
// only says what is wrong; each face answers in its own shape.
package devmode

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Refusal is why a request to a dev-mode server is refused.
type Refusal struct {
	// Status is the HTTP status to answer with.
	Status int
	// Code is a short machine-readable name, for the API's error shape.
	Code string
	// Message says what was wrong and what to do instead.
	Message string
}

func (r *Refusal) Error() string { return fmt.Sprintf("%d %s: %s", r.Status, r.Code, r.Message) }

// Check refuses a request whose Host is not a loopback name or address
// with the port the server listens on (421), or that a browser says came
// from another site: Sec-Fetch-Site cross-site or same-site (another port
// of localhost is the same site), or an Origin other than the server's
// own (403). Requests without those headers (curl, the CLI) and those a
// browser marks same-origin or none (typed into the address bar) pass.
//
// The port is the local port of the connection r came in on; a request
// that has none (built in a test) has only its host name checked.
func Check(r *http.Request) *Refusal {
	if ref := checkHost(r); ref != nil {
		return ref
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return &Refusal{Status: http.StatusForbidden, Code: "cross_site_request",
			Message: fmt.Sprintf("refused: the browser says this request came from another site (Sec-Fetch-Site: %s), and this insecure dev mode server needs no token, so any page could otherwise use it; call it from the CLI, curl, or its own console", site)}
	}
	if origin := r.Header.Get("Origin"); origin != "" && origin != "http://"+r.Host && origin != "https://"+r.Host {
		return &Refusal{Status: http.StatusForbidden, Code: "cross_origin_request",
			Message: fmt.Sprintf("refused: the request came from a page at %q, not from this server (http://%s), and this insecure dev mode server needs no token, so any page could otherwise use it; call it from the CLI, curl, or its own console", origin, r.Host)}
	}
	return nil
}

// CheckJSONWrite refuses a POST, PUT, PATCH or DELETE whose Content-Type
// is not JSON (application/json or a +json type), with or without a body
// (415).
func CheckJSONWrite(r *http.Request) *Refusal {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	got := "none"
	if ct != "" {
		got = strconv.Quote(ct)
	}
	return &Refusal{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
		Message: fmt.Sprintf("in insecure dev mode every %s needs \"Content-Type: application/json\", even without a body (this one has %s): a web page cannot send that type to another site without the server's consent, which this server never gives; add the header (the hymical CLI sends it)", r.Method, got)}
}

// checkHost refuses a Host that is not a loopback name with the port the
// connection came in on.
func checkHost(r *http.Request) *Refusal {
	port := 0
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		port = a.Port
	}
	host, hostPort, err := net.SplitHostPort(r.Host)
	if err != nil {
		// No port: the client's default, 80.
		host, hostPort = r.Host, "80"
	}
	if loopbackName(host) && (port == 0 || hostPort == strconv.Itoa(port)) {
		return nil
	}
	want := "127.0.0.1"
	if port != 0 {
		want = net.JoinHostPort(want, strconv.Itoa(port))
	}
	return &Refusal{Status: http.StatusMisdirectedRequest, Code: "misdirected_request",
		Message: fmt.Sprintf("refused: this insecure dev mode server answers only to localhost, 127.0.0.1 or [::1] with the port it listens on, and the request was for host %q; a page that reached it under another name (DNS rebinding) could read its answers. Use http://%s", r.Host, want)}
}

// loopbackName reports whether host names this machine in a way no DNS
// answer can change: localhost, or a loopback address.
func loopbackName(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Zone() == "" && a.IsLoopback()
}
