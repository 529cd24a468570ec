//go:build unix

package nodetransport

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/syncbuf"
	sdk "github.com/hymical/hymical/sdk/transport"
)

// These tests play go-plugin's host by hand, to hold the plugin to each
// step of the handshake: what a host sees on the plugin's stdout, and what
// the mutual TLS lets through. host_test.go and serve_test.go run it under
// the real host.

// hostCert is a certificate as go-plugin's host makes one for AutoMTLS
// (mtls.go): self-signed, a CA, for "localhost", client and server auth.
func hostCert(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// plugin is one plugin process started by hand.
type plugin struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	line   string // the handshake line
	exited chan error
}

// pluginEnv is the environment a host gives the plugin: PATH (which the
// script's #!/usr/bin/env node needs) and the handshake's variables.
func pluginEnv(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH")}, extra...)
}

const cookie = sdk.MagicCookieKey + "=" + sdk.MagicCookieValue

// startPlugin runs the plugin with env and waits for its handshake line.
func startPlugin(t *testing.T, env []string) *plugin {
	t.Helper()
	cmd := exec.Command(filepath.Join(nodePlugin(t), scriptName))
	cmd.Env = env
	p := &plugin{cmd: cmd, stderr: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
			t.Errorf("the plugin wrote more than its handshake line to stdout: %q", sc.Text())
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("plugin stderr:\n%s", p.stderr)
		}
	})
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("the plugin exited without a handshake line; stderr:\n%s", p.stderr)
		}
		p.line = line
	case <-time.After(20 * time.Second):
		t.Fatalf("no handshake line after 20s; stderr:\n%s", p.stderr)
	}
	return p
}

// handshake is the line's fields, checked as go-plugin's client.go reads
// them.
type handshake struct {
	core, app, network, addr, protocol string
	cert                               *x509.Certificate
}

func parseHandshake(t *testing.T, line string) handshake {
	t.Helper()
	parts := strings.Split(line, "|")
	if len(parts) != 6 {
		t.Fatalf("handshake line %q has %d fields, want 6 (CORE|APP|tcp|ADDR|grpc|CERT)", line, len(parts))
	}
	// go-plugin decodes the certificate with RawStdEncoding, which refuses
	// padding, and skips a field of 50 bytes or less.
	der, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(parts[5]) <= 50 {
		t.Fatalf("certificate field %q is not unpadded standard base64 of a certificate: %v", parts[5], err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("certificate field: %v", err)
	}
	return handshake{parts[0], parts[1], parts[2], parts[3], parts[4], cert}
}

func TestRunByHand(t *testing.T) {
	t.Parallel()
	dir := nodePlugin(t)
	cases := []struct {
		name string
		env  []string
		says []string
	}{
		{"without the cookie", pluginEnv(), []string{"is a Hymical transport plugin", "not meant to be run by hand", "plugins.dir"}},
		{"with a wrong cookie", pluginEnv(sdk.MagicCookieKey + "=nope"), []string{"not meant to be run by hand"}},
		{"without the host's certificate", pluginEnv(cookie, "PLUGIN_PROTOCOL_VERSIONS=1,2"), []string{"PLUGIN_CLIENT_CERT is not set", "mutual TLS"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(dir, scriptName))
			cmd.Env = tc.env
			var stdout, stderr syncbuf.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("run %s: %v, want exit status 1\nstderr: %s", tc.name, err, stderr.String())
			}
			for _, want := range tc.says {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
				}
			}
			if stdout.String() != "" {
				t.Errorf("stdout holds %q; a plugin that does not serve must print no handshake", stdout.String())
			}
		})
	}
}

// TestHandshakeNegotiatesTheVersion: the plugin answers the newest version
// the host offers that it speaks, and its oldest when there is none (the
// host then refuses it), as go-plugin's Go plugins do.
func TestHandshakeNegotiatesTheVersion(t *testing.T) {
	t.Parallel()
	_, certPEM := hostCert(t)
	cases := []struct{ offered, want string }{
		{"1,2", "2"},
		{"2,1", "2"},
		{"2", "2"},
		{"1,2,3", "2"},
		{"1", "1"},
		{"3", "1"},
		{"", "1"},
	}
	for _, tc := range cases {
		t.Run("offered "+tc.offered, func(t *testing.T) {
			t.Parallel()
			p := startPlugin(t, pluginEnv(cookie, "PLUGIN_PROTOCOL_VERSIONS="+tc.offered, "PLUGIN_CLIENT_CERT="+certPEM))
			hs := parseHandshake(t, p.line)
			if hs.core != "1" || hs.app != tc.want || hs.network != "tcp" || hs.protocol != "grpc" || !strings.HasPrefix(hs.addr, "127.0.0.1:") {
				t.Fatalf("handshake %q: want 1|%s|tcp|127.0.0.1:PORT|grpc|CERT", p.line, tc.want)
			}
			if !slices.Contains(hs.cert.DNSNames, "localhost") || !hs.cert.IsCA {
				t.Fatalf("the plugin's certificate names %v (CA %v); go-plugin's host checks \"localhost\" and trusts it as its root", hs.cert.DNSNames, hs.cert.IsCA)
			}
		})
	}
}

// dial connects as go-plugin's host does with AutoMTLS: trusting only the
// plugin's certificate, for "localhost", presenting cert.
func dial(t *testing.T, hs handshake, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(hs.cert)
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(hs.addr, append(sdk.HostDialOptions(nil), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestMutualTLS: the plugin serves only the host whose certificate it was
// given, and proves itself with the certificate of its handshake line.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	host, certPEM := hostCert(t)
	other, _ := hostCert(t)
	p := startPlugin(t, pluginEnv(cookie, "PLUGIN_PROTOCOL_VERSIONS=1,2", "PLUGIN_CLIENT_CERT="+certPEM))
	hs := parseHandshake(t, p.line)

	check := func(conn *grpc.ClientConn) (*grpc_health_v1.HealthCheckResponse, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		return grpc_health_v1.NewHealthClient(conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: "plugin"})
	}
	resp, err := check(dial(t, hs, &host))
	if err != nil || resp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Fatalf("health of \"plugin\" with the host's certificate: %v, %v; want SERVING", resp, err)
	}
	for name, cert := range map[string]*tls.Certificate{"another certificate": &other, "no certificate": nil} {
		if _, err := check(dial(t, hs, cert)); err == nil {
			t.Errorf("a client with %s was served; only the host's certificate may be", name)
		}
	}
}

// TestProtocols drives the Transport service over both protocols with the
// SDK's own client, the one the host uses, on a connection made as the
// host makes it; then stops the plugin as the host does.
func TestProtocols(t *testing.T) {
	t.Parallel()
	host, certPEM := hostCert(t)
	p := startPlugin(t, pluginEnv(cookie, "PLUGIN_PROTOCOL_VERSIONS=1,2", "PLUGIN_CLIENT_CERT="+certPEM))
	conn := dial(t, parseHandshake(t, p.line), &host)
	ctx := t.Context()
	dir := t.TempDir()

	for _, protocol := range []int{1, 2} {
		c := sdk.NewGRPCClient(conn, sdk.WithProtocol(protocol))
		if err := c.Configure(ctx, sdk.Settings{"root": "relative"}); !errors.Is(err, sdk.ErrRejected) || !strings.Contains(err.Error(), "absolute") {
			t.Fatalf("protocol %d: Configure with a relative root = %v, want the plugin's refusal", protocol, err)
		}
		if err := c.Configure(ctx, sdk.Settings{"root": dir}); err != nil {
			t.Fatalf("protocol %d: Configure: %v", protocol, err)
		}
		file := filepath.Join(dir, "p"+string(rune('0'+protocol))+".jsonl")
		ep := sdk.Endpoint{Config: map[string]string{"path": file}}
		if err := c.Validate(ctx, ep); err != nil {
			t.Fatalf("protocol %d: Validate: %v", protocol, err)
		}

		// The attempt's trace context reaches the plugin: in the request
		// on the stream, in the call's metadata for a unary Send.
		traceID := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, byte(protocol), 0x36}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled})
		msg := sdk.Message{
			DeliveryID: "dlv_p" + string(rune('0'+protocol)), Attempt: 1, Endpoint: ep,
			Headers:  []sdk.Header{{Name: "webhook-id", Value: "dlv_1"}, {Name: "webhook-signature", Value: "v1,c2ln"}},
			Body:     []byte(`{"type":"submission.received","data":"<&>"}`),
			Deadline: time.Now().Add(10 * time.Second),
		}
		out, err := c.SendRPC(trace.ContextWithSpanContext(ctx, sc), msg)
		if err != nil || out.Kind != sdk.OutcomeDelivered {
			t.Fatalf("protocol %d: Send = %+v, %v; want delivered", protocol, out, err)
		}
		lines := e2etest.ReadJSONL(t, file)
		if len(lines) != 1 || lines[0].DeliveryID != msg.DeliveryID || *lines[0].Body != string(msg.Body) || len(lines[0].Headers) != 2 {
			t.Fatalf("protocol %d: the file holds %+v", protocol, lines)
		}
		waitFor(t, "the plugin's log line with the trace id", func() bool {
			return strings.Contains(p.stderr.String(), `"trace_id":"`+traceID.String()+`"`)
		})

		// Outcomes: an attempt whose deadline has passed is not made; a
		// file that cannot be opened is retryable, and counts; an endpoint
		// whose path became a directory is refused, and does not.
		msg.Deadline = time.Now().Add(-time.Second)
		if out, err := c.SendRPC(ctx, msg); err != nil || out.Kind != sdk.OutcomeRetryable || !strings.Contains(out.Error, "deadline") {
			t.Errorf("protocol %d: Send past its deadline = %+v, %v; want retryable, naming the deadline", protocol, out, err)
		}
		msg.Deadline = time.Now().Add(10 * time.Second)
		msg.Endpoint = sdk.Endpoint{Config: map[string]string{"path": filepath.Join(dir, "missing", "f.jsonl")}}
		if out, err := c.SendRPC(ctx, msg); err != nil || out.Kind != sdk.OutcomeRetryable || out.NoRequest || !strings.Contains(out.Error, "ENOENT") {
			t.Errorf("protocol %d: Send into a missing directory = %+v, %v; want retryable, counted", protocol, out, err)
		}
		sub := filepath.Join(dir, "sub"+string(rune('0'+protocol)))
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		msg.Endpoint = sdk.Endpoint{Config: map[string]string{"path": sub}}
		if out, err := c.SendRPC(ctx, msg); err != nil || out.Kind != sdk.OutcomePermanent || !out.NoRequest || !strings.Contains(out.Error, "a directory") {
			t.Errorf("protocol %d: Send to a directory = %+v, %v; want permanent with no request", protocol, out, err)
		}
		if got := e2etest.ReadJSONL(t, file); len(got) != 1 {
			t.Errorf("protocol %d: %d lines after the failed sends, want still 1", protocol, len(got))
		}
	}

	// go-plugin's host stops a plugin with GRPCController.Shutdown, then
	// waits two seconds before it kills it: the plugin exits at once, with
	// status 0.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := conn.Invoke(sctx, "/plugin.GRPCController/Shutdown", &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("after Shutdown the plugin exited with %v, want status 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin still runs 10s after Shutdown")
	}
}

// waitFor polls cond for up to 10 seconds: output that travels on its own
// pipe may trail the answer a little.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 10s", what)
		}
	}
}
