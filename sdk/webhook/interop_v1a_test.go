package webhook_test

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// The Standard Webhooks Go library that compat_test.go checks v1 against
// knows no v1a, so v1a is checked against Ed25519 implementations that
// share no code with Go's: OpenSSL's command line and Node's crypto module.
// Ed25519 signatures are deterministic, so a signing key read from OpenSSL
// must make byte for byte the signature OpenSSL made.

// externalTool finds a program a test needs. Outside CI a missing one skips
// the test; CI installs them (.ci/tools.sh), so there it fails.
func externalTool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		t.Log("hymical-test-uses: " + name) // counted by the repository's harness/testrun
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed, and CI must run this test: apt-get install %s (.ci/tools.sh does)", name, debianPackage)
	}
	t.Skipf("%s is not installed (apt-get install %s); skipping the check against it", name, debianPackage)
	return ""
}

func runTool(t *testing.T, dir, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// signedMessage signs body with keys and returns the headers and the exact
// bytes the signatures cover.
func signedMessage(t *testing.T, body []byte, keys ...string) (http.Header, []byte) {
	t.Helper()
	h, err := webhook.SignHeaders("del_0123456789abcdef", time.Now(), body, keys...)
	if err != nil {
		t.Fatalf("SignHeaders: %v", err)
	}
	content := []byte(h.Get(webhook.HeaderID) + "." + h.Get(webhook.HeaderTimestamp) + ".")
	return h, append(content, body...)
}

// v1aSignatures returns the raw bytes of every v1a signature in h.
func v1aSignatures(t *testing.T, h http.Header) [][]byte {
	t.Helper()
	var out [][]byte
	for _, f := range strings.Fields(h.Get(webhook.HeaderSignature)) {
		if enc, ok := strings.CutPrefix(f, "v1a,"); ok {
			raw, err := base64.StdEncoding.DecodeString(enc)
			if err != nil {
				t.Fatalf("v1a signature %q: %v", f, err)
			}
			out = append(out, raw)
		}
	}
	return out
}

func publicKeyPEM(t *testing.T, whpk string) []byte {
	t.Helper()
	pub, err := webhook.ParsePublicKey(whpk)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

var interopBodies = map[string][]byte{
	"submission event": []byte(`{"type":"submission.received","submission":{"id":"sub_48984534f33749c49a88de2d59400dce","data":{"name":"Zoë"}}}`),
	"empty body":       {},
	"binary body":      {0, 0xff, '.', '\n', 0x80},
}

func TestOurV1aVerifiesWithOpenSSL(t *testing.T) {
	t.Parallel()
	openssl := externalTool(t, "openssl", "openssl")
	newSK, newPK := mustKeyPair(t)
	oldSK, oldPK := mustKeyPair(t)
	for name, body := range interopBodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			// A rotation: one v1 secret beside two v1a keys, as an endpoint
			// could never have, to show each v1a entry stands on its own.
			h, content := signedMessage(t, body, newSK, mustSecret(t), oldSK)
			sigs := v1aSignatures(t, h)
			if len(sigs) != 2 {
				t.Fatalf("%d v1a signatures in %q, want 2", len(sigs), h.Get(webhook.HeaderSignature))
			}
			writeFile(t, dir, "content", content)
			writeFile(t, dir, "altered", append(content, 'x'))
			for i, pk := range []string{newPK, oldPK} {
				writeFile(t, dir, "pub.pem", publicKeyPEM(t, pk))
				writeFile(t, dir, "sig", sigs[i])
				out, err := runTool(t, dir, openssl, "pkeyutl", "-verify", "-pubin", "-inkey", "pub.pem", "-rawin", "-in", "content", "-sigfile", "sig")
				if err != nil || !strings.Contains(out, "Signature Verified Successfully") {
					t.Fatalf("openssl refused v1a signature %d of the rotation: %v\n%s", i+1, err, out)
				}
				out, err = runTool(t, dir, openssl, "pkeyutl", "-verify", "-pubin", "-inkey", "pub.pem", "-rawin", "-in", "altered", "-sigfile", "sig")
				if err == nil || strings.Contains(out, "Verified Successfully") {
					t.Fatalf("openssl accepted signature %d over an altered body:\n%s", i+1, out)
				}
			}
		})
	}
}

func TestOpenSSLSignatureVerifiesWithOurs(t *testing.T) {
	t.Parallel()
	openssl := externalTool(t, "openssl", "openssl")
	keyDir := t.TempDir()
	dir := keyDir
	if out, err := runTool(t, dir, openssl, "genpkey", "-algorithm", "ed25519", "-out", "key.pem"); err != nil {
		t.Fatalf("openssl genpkey: %v\n%s", err, out)
	}
	if out, err := runTool(t, dir, openssl, "pkey", "-in", "key.pem", "-pubout", "-out", "pub.pem"); err != nil {
		t.Fatalf("openssl pkey -pubout: %v\n%s", err, out)
	}
	readPEM := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		if block == nil {
			t.Fatalf("%s holds no PEM block", name)
		}
		return block.Bytes
	}
	pkAny, err := x509.ParsePKIXPublicKey(readPEM("pub.pem"))
	if err != nil {
		t.Fatal(err)
	}
	skAny, err := x509.ParsePKCS8PrivateKey(readPEM("key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	whpk := webhook.PublicKeyPrefix + base64.StdEncoding.EncodeToString(pkAny.(ed25519.PublicKey))
	whsk := webhook.SigningKeyPrefix + base64.StdEncoding.EncodeToString(skAny.(ed25519.PrivateKey))
	if derived, err := webhook.PublicKey(whsk); err != nil || derived != whpk {
		t.Fatalf("PublicKey of OpenSSL's key = %.12s…, %v; OpenSSL says %.12s…", derived, err, whpk)
	}

	for name, body := range interopBodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			id, now := "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", time.Now()
			ts := strconv.FormatInt(now.Unix(), 10)
			writeFile(t, dir, "content", append([]byte(id+"."+ts+"."), body...))
			if out, err := runTool(t, dir, openssl, "pkeyutl", "-sign", "-inkey", filepath.Join(keyDir, "key.pem"), "-rawin", "-in", "content", "-out", "sig"); err != nil {
				t.Fatalf("openssl pkeyutl -sign: %v\n%s", err, out)
			}
			sig, err := os.ReadFile(filepath.Join(dir, "sig"))
			if err != nil {
				t.Fatal(err)
			}
			header := "v1a," + base64.StdEncoding.EncodeToString(sig)
			h := http.Header{}
			h.Set(webhook.HeaderID, id)
			h.Set(webhook.HeaderTimestamp, ts)
			h.Set(webhook.HeaderSignature, header)
			if err := mustVerifier(t, []string{whpk}).Verify(h, body); err != nil {
				t.Fatalf("our Verify of OpenSSL's signature: %v", err)
			}
			if err := mustVerifier(t, []string{whpk}).Verify(h, append(body, 'x')); err == nil {
				t.Fatal("our Verify accepted OpenSSL's signature over an altered body")
			}
			ours, err := webhook.Sign(id, now, body, whsk)
			if err != nil || ours != header {
				t.Fatalf("our Sign with OpenSSL's key = %q, %v; OpenSSL signed %q", ours, err, header)
			}
		})
	}
}

// nodeVerify is a receiver written against Node's crypto module alone: it
// splits webhook-signature as the spec says, imports the whpk_ key as a raw
// Ed25519 public key (JWK) and verifies each v1a entry. It prints "ok" when
// one matches.
const nodeVerify = `
const crypto = require("node:crypto");
const [pk, id, ts, sigHeader, bodyB64] = process.argv.slice(1);
if (!pk.startsWith("whpk_")) throw new Error("not a whpk_ key");
const x = Buffer.from(pk.slice(5), "base64").toString("base64url");
const key = crypto.createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x }, format: "jwk" });
const content = Buffer.concat([Buffer.from(id + "." + ts + "."), Buffer.from(bodyB64, "base64")]);
const ok = sigHeader.split(" ").some((entry) => {
  const [version, sig] = entry.split(",");
  return version === "v1a" && crypto.verify(null, content, key, Buffer.from(sig, "base64"));
});
process.stdout.write(ok ? "ok" : "no match");
`

func TestOurV1aVerifiesWithNode(t *testing.T) {
	t.Parallel()
	node := externalTool(t, "node", "nodejs")
	newSK, newPK := mustKeyPair(t)
	oldSK, oldPK := mustKeyPair(t)
	_, strangerPK := mustKeyPair(t)
	for name, body := range interopBodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, _ := signedMessage(t, body, newSK, oldSK)
			verify := func(pk string, body []byte) string {
				out, err := runTool(t, t.TempDir(), node, "-e", nodeVerify, pk, h.Get(webhook.HeaderID), h.Get(webhook.HeaderTimestamp),
					h.Get(webhook.HeaderSignature), base64.StdEncoding.EncodeToString(body))
				if err != nil {
					t.Fatalf("node: %v\n%s", err, out)
				}
				return out
			}
			for _, pk := range []string{newPK, oldPK} {
				if got := verify(pk, body); got != "ok" {
					t.Fatalf("node's verify with a rotation's public key: %s", got)
				}
			}
			if got := verify(strangerPK, body); got != "no match" {
				t.Fatalf("node's verify with an unrelated public key: %s", got)
			}
			if got := verify(newPK, append(body, 'x')); got != "no match" {
				t.Fatalf("node's verify of an altered body: %s", got)
			}
		})
	}
}
