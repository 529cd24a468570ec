package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/server"
)

// testCA signs the test's certificates, so the client verifies every
// pair the server is given against one root.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1000), Subject: pkix.Name{CommonName: "hymical test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// pair is a certificate for 127.0.0.1 with serial, signed by ca, and its
// key, in PEM.
func (ca *testCA) pair(t *testing.T, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "hymical test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// tlsFiles is a certificate and key file pair the test rewrites.
type tlsFiles struct{ cert, key string }

func (f tlsFiles) write(t *testing.T, certPEM, keyPEM []byte) {
	t.Helper()
	if err := os.WriteFile(f.cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

// servedSerial connects anew over HTTPS, verifying the server against
// ca, checks an admin route answers, and returns the serial of the
// certificate the server presented.
func servedSerial(t *testing.T, ca *testCA, addr string) int64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+addr+"/v1/endpoints", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("GET /v1/endpoints over HTTPS: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
}

// TestNativeTLSServesAndReloads serves HTTPS from a pair of files, then
// renews the pair: a reload serves the new one from the next connection,
// a bad pair on reload keeps the one in service, and SIGHUP reloads.
func TestNativeTLSServesAndReloads(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	files := tlsFiles{cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem")}
	c1, k1 := ca.pair(t, 1)
	files.write(t, c1, k1)
	cfg := testConfig("sqlite:" + filepath.Join(dir, "hymical.db"))
	cfg.Server.TLSCertFile, cfg.Server.TLSKeyFile = files.cert, files.key
	r := start(t, cfg)
	addr := r.srv.Addr().String()
	if got := servedSerial(t, ca, addr); got != 1 {
		t.Fatalf("served serial %d, want 1", got)
	}

	c2, k2 := ca.pair(t, 2)
	files.write(t, c2, k2)
	if err := r.srv.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, ca, addr); got != 2 {
		t.Fatalf("after the reload: serial %d, want 2", got)
	}

	// A key of another certificate: the reload fails, naming both files,
	// and the pair in service stays.
	cert3, _ := ca.pair(t, 3)
	_, otherKey := ca.pair(t, 4)
	files.write(t, cert3, otherKey)
	err := r.srv.ReloadTLS()
	if err == nil || !strings.Contains(err.Error(), "server.tls_cert_file") || !strings.Contains(err.Error(), "not a matching") {
		t.Fatalf("reload of a mismatched pair: %v, want an error naming the files", err)
	}
	if got := servedSerial(t, ca, addr); got != 2 {
		t.Fatalf("after a failed reload: serial %d, want the previous 2", got)
	}

	// A real SIGHUP: New has asked for it, so it reloads rather than ends
	// the process.
	c5, k5 := ca.pair(t, 5)
	files.write(t, c5, k5)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, func() error {
		if got := servedSerial(t, ca, addr); got != 5 {
			return fmt.Errorf("after SIGHUP: serial %d, want 5", got)
		}
		return nil
	})
}

func TestNativeTLSRefusesBadFilesAtStart(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	dir := t.TempDir()
	good := tlsFiles{cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem")}
	c1, k1 := ca.pair(t, 1)
	good.write(t, c1, k1)
	_, otherKey := ca.pair(t, 2)
	other := filepath.Join(dir, "other-key.pem")
	if err := os.WriteFile(other, otherKey, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		cert, key string
		want      []string
	}{
		{"a missing certificate", filepath.Join(dir, "missing.pem"), good.key, []string{"server.tls_cert_file", "missing.pem", "cannot be read"}},
		{"a missing key", good.cert, filepath.Join(dir, "missing.pem"), []string{"server.tls_key_file", "missing.pem", "cannot be read"}},
		{"a key of another certificate", good.cert, other, []string{"server.tls_cert_file", "server.tls_key_file", "not a matching"}},
		{"the files swapped", good.key, good.cert, []string{"not a matching"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig("sqlite:" + filepath.Join(t.TempDir(), "hymical.db"))
			cfg.Server.TLSCertFile, cfg.Server.TLSKeyFile = tt.cert, tt.key
			srv, err := server.New(t.Context(), cfg, nil)
			if err == nil {
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				srv.Run(ctx)
				t.Fatal("New accepted the pair")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
