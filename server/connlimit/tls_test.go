package connlimit_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hymical/hymical/server/connlimit"
)

// TestConnStateSeesThroughTLS serves over TLS, where the http.Server's
// ConnState hook gets the *tls.Conn around the connection the Listener
// accepted: a keep-alive must still count as idle, or it could never
// make room for a newcomer.
func TestConnStateSeesThroughTLS(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := connlimit.New(inner, connlimit.Config{Max: 4, MaxPerAddress: 2, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.Listener = ln
	srv.Config.ConnState = ln.ConnState
	srv.StartTLS()
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	wantWaiting(t, ln, 1, 0, 1)
}
