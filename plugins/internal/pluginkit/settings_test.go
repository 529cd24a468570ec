package pluginkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/transport"
)

func TestClip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"short", "forms", "forms"},
		{"exactly the limit", strings.Repeat("x", ClipBytes), strings.Repeat("x", ClipBytes)},
		{"one over", strings.Repeat("x", ClipBytes+1), strings.Repeat("x", ClipBytes) + "…"},
		// é is two bytes; the 64th byte is the middle of one.
		{"cut on a rune boundary", strings.Repeat("x", ClipBytes-1) + "ééé", strings.Repeat("x", ClipBytes-1) + "…"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Clip(tt.in); got != tt.want {
				t.Fatalf("Clip(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value   string
		want    time.Duration
		wantErr string // "" means none
	}{
		{"5s", 5 * time.Second, ""},
		{" 500ms ", 500 * time.Millisecond, ""},
		{"1m30s", 90 * time.Second, ""},
		{"0s", 0, `setting connect_timeout: "0s" is not a positive Go duration such as "5s" or "500ms"`},
		{"-1s", 0, `"-1s" is not a positive Go duration`},
		{"soon", 0, `"soon" is not a positive`},
		{"5", 0, `"5" is not a positive`},
		{"", 0, `"" is not a positive`},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			t.Parallel()
			got, err := ParseDuration("connect_timeout", tt.value)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ParseDuration(%q) = %s, %v; want %s", tt.value, got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseDuration(%q) error = %v, want one containing %q", tt.value, err, tt.wantErr)
			}
		})
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	const password = "PASSWORD-MUST-NOT-LEAK"
	tests := []struct {
		name     string
		raw      string
		wantHost string
		wantErr  string // "" means none
	}{
		{"a broker URL", "amqp://u:" + password + "@rabbitmq.internal:5672/vhost", "rabbitmq.internal:5672", ""},
		{"no user", "nats://127.0.0.1:4222", "127.0.0.1:4222", ""},
		{"a bad port", "amqp://u:" + password + "@127.0.0.1:amqp/", "", "invalid port"},
		{"an unclosed bracket", "redis://:" + password + "@[::1", "", "missing ']' in host"},
		{"a control character", "tcp://u:" + password + "@host\x7f:1883", "", "invalid control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, err := ParseURL(tt.raw)
			if tt.wantErr == "" {
				if err != nil || u.Host != tt.wantHost {
					t.Fatalf("ParseURL = %v, %v; want host %s", u, err, tt.wantHost)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseURL error = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), password) {
				t.Fatalf("ParseURL error %q quotes the password", err)
			}
		})
	}
}

func TestCertPool(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(good, selfSigned(t), 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, wantErr string // wantErr "" means none
	}{
		{"a PEM certificate", good, ""},
		{"no such file", filepath.Join(dir, "missing.pem"), "setting tls_ca_file: open "},
		{"not PEM", notPEM, "setting tls_ca_file: " + notPEM + " holds no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool, err := CertPool("tls_ca_file", tt.path)
			if tt.wantErr == "" {
				if err != nil || pool == nil {
					t.Fatalf("CertPool = %v, %v; want a pool", pool, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CertPool error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func selfSigned(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestUnknownKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		config  map[string]string
		allowed []string
		want    string // "" means none unknown
	}{
		{"none", nil, []string{"topic"}, ""},
		{"all known", map[string]string{"topic": "t", "url": "u"}, []string{"topic", "url"}, ""},
		{"one unknown", map[string]string{"topic": "t", "subject": "s"}, []string{"topic", "url"}, "subject"},
		{"the first in sorted order", map[string]string{"zeta": "", "alpha": "", "topic": ""}, []string{"topic"}, "alpha"},
		{"nothing allowed", map[string]string{"topic": ""}, nil, "topic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := UnknownKey(tt.config, tt.allowed...)
			if got != tt.want || ok != (tt.want != "") {
				t.Fatalf("UnknownKey = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

func TestEndpointURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		e       transport.Endpoint
		want    string
		wantErr string // "" means none
	}{
		{"none", transport.Endpoint{}, "", ""},
		{"in the config", transport.Endpoint{Config: map[string]string{"url": " nats://a:4222 "}}, "nats://a:4222", ""},
		{"as the URL", transport.Endpoint{URL: "nats://a:4222 "}, "nats://a:4222", ""},
		{"both, the same", transport.Endpoint{URL: "nats://a:4222", Config: map[string]string{"url": " nats://a:4222"}}, "nats://a:4222", ""},
		{"both, different", transport.Endpoint{URL: "nats://a:4222", Config: map[string]string{"url": "nats://b:4222"}}, "",
			"the endpoint has both a URL and a different url in its config; give the server once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := EndpointURL(tt.e, "url", "server")
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("EndpointURL = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("EndpointURL error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
