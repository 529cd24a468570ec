//go:build unix

package config_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/pluginhost"
)

// TestPluginHostRunsTheRealHTTPPlugin builds the http plugin into a plugin
// directory, loads a config that points at it, and sends through a real
// plugin host: the allowed networks and the read timeout from the webhook
// section must reach the plugin process.
func TestPluginHostRunsTheRealHTTPPlugin(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test builds the http plugin and needs the go command: %v", err)
	}
	dir := t.TempDir()
	build := exec.Command(goBin, "build", "-o", filepath.Join(dir, pluginhost.BinaryPrefix+config.HTTPPlugin), "github.com/hymical/hymical/plugins/http")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the http plugin: %v\n%s", err, out)
	}

	var startLogged func(t *testing.T, logs io.Writer, env ...string) *pluginhost.Host
	slow := 1500 * time.Millisecond
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(slow)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close) // the parallel subtests outlive this function

	start := func(t *testing.T, env ...string) *pluginhost.Host {
		t.Helper()
		return startLogged(t, io.Discard, env...)
	}
	startLogged = func(t *testing.T, logs io.Writer, env ...string) *pluginhost.Host {
		t.Helper()
		cfg, _ := mustLoad(t, "", withToken(append([]string{"FORMS_PLUGINS_DIR=" + dir}, env...)...))
		h, err := pluginhost.New(context.Background(), cfg.PluginHost(), slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
		if err != nil {
			t.Fatalf("pluginhost.New: %v", err)
		}
		t.Cleanup(h.Close)
		return h
	}
	send := func(h *pluginhost.Host, path string) transport.Outcome {
		msg := transport.Message{DeliveryID: "dlv_1", Attempt: 1, Endpoint: transport.Endpoint{URL: receiver.URL + path}, Body: []byte(`{}`)}
		return h.Send(context.Background(), config.HTTPPlugin, msg, time.Now().Add(10*time.Second))
	}

	t.Run("loopback is refused without allowed_networks", func(t *testing.T) {
		t.Parallel()
		out := send(start(t), "/")
		if out.Kind == transport.OutcomeDelivered || !strings.Contains(out.Error, "allowed_networks") {
			t.Errorf("outcome = %+v, want a refusal naming allowed_networks", out)
		}
	})
	t.Run("allowed_networks and the read timeout reach the plugin", func(t *testing.T) {
		t.Parallel()
		h := start(t, "FORMS_WEBHOOK_ALLOWED_NETWORKS=127.0.0.0/8,::1", "FORMS_WEBHOOK_READ_TIMEOUT_SECONDS=1",
			"FORMS_WORKER_LEASE_SECONDS=20")
		if out := send(h, "/"); out.Kind != transport.OutcomeDelivered || out.StatusCode != http.StatusNoContent {
			t.Errorf("outcome = %+v, want delivered 204", out)
		}
		out := send(h, "/slow")
		if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "read_timeout 1s") {
			t.Errorf("outcome = %+v, want retryable naming read_timeout 1s", out)
		}
	})
	// webhook.proxy and its credentials from the environment reach the
	// plugin process, which sends through the proxy; the guard still
	// refuses a receiver not allowed, before the proxy is asked; the
	// password is in no outcome and no log line.
	t.Run("webhook.proxy reaches the plugin", func(t *testing.T) {
		t.Parallel()
		const user, password = "hymical", "proxy-PASSWORD-not-shown-31a7"
		px := startProxy(t, user, password)
		var logs safeBuffer
		h := startLogged(t, &logs, "FORMS_WEBHOOK_PROXY="+px.url, "FORMS_WEBHOOK_PROXY_USERNAME="+user, "FORMS_WEBHOOK_PROXY_PASSWORD="+password,
			// The receiver's address only: the proxy, on 127.0.0.2, is
			// reached because it is configured.
			"FORMS_WEBHOOK_ALLOWED_NETWORKS=127.0.0.1")
		out := send(h, "/")
		if out.Kind != transport.OutcomeDelivered || out.StatusCode != http.StatusNoContent {
			t.Errorf("outcome = %+v, want delivered 204", out)
		}
		want := strings.TrimPrefix(receiver.URL, "http://")
		if got := px.seen(); len(got) != 1 || got[0] != want {
			t.Errorf("the proxy was asked to CONNECT to %q, want [%s]", got, want)
		}
		if strings.Contains(out.Error, password) || strings.Contains(logs.String(), password) {
			t.Errorf("the proxy password was shown: outcome %+v, logs:\n%s", out, logs.String())
		}

		refusing := startLogged(t, &logs, "FORMS_WEBHOOK_PROXY="+px.url, "FORMS_WEBHOOK_PROXY_USERNAME="+user, "FORMS_WEBHOOK_PROXY_PASSWORD="+password)
		out = send(refusing, "/")
		if out.Kind != transport.OutcomePermanent || !out.NoRequest || !strings.Contains(out.Error, "allowed_networks") {
			t.Errorf("outcome = %+v, want a refusal naming allowed_networks", out)
		}
		if got := px.seen(); len(got) != 1 {
			t.Errorf("the proxy was asked to CONNECT to %q; the refused receiver must add nothing", got)
		}

		wrong := startLogged(t, &logs, "FORMS_WEBHOOK_PROXY="+px.url, "FORMS_WEBHOOK_PROXY_USERNAME="+user, "FORMS_WEBHOOK_PROXY_PASSWORD="+password+"-wrong",
			"FORMS_WEBHOOK_ALLOWED_NETWORKS=127.0.0.1")
		out = send(wrong, "/")
		if out.Kind != transport.OutcomeRetryable || !out.NoRequest || !strings.Contains(out.Error, "407") {
			t.Errorf("outcome = %+v, want deferred naming 407", out)
		}
		if !strings.Contains(logs.String(), "hymical-plugin-http") {
			t.Fatalf("the plugin hosts logged nothing about the plugin; the check below would prove nothing:\n%s", logs.String())
		}
		if strings.Contains(out.Error, password) || strings.Contains(logs.String(), password) {
			t.Errorf("the proxy password was shown: outcome %+v, logs:\n%s", out, logs.String())
		}
	})
}

// loopbackProxy is a CONNECT proxy on 127.0.0.2 that asks for basic
// authentication and records what it was asked to CONNECT to.
type loopbackProxy struct {
	url      string
	mu       sync.Mutex
	connects []string
}

func (p *loopbackProxy) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.connects...)
}

func startProxy(t *testing.T, user, password string) *loopbackProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &loopbackProxy{url: "http://" + l.Addr().String()}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		p.mu.Lock()
		p.connects = append(p.connects, r.Host)
		p.mu.Unlock()
		if r.Header.Get("Proxy-Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+password)) {
			w.WriteHeader(http.StatusProxyAuthRequired)
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
		_, _ = io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n")
		go func() { _, _ = io.Copy(client, upstream) }()
		_, _ = io.Copy(upstream, buf)
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	return p
}

// safeBuffer is a bytes.Buffer several plugin hosts may log to at once.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
