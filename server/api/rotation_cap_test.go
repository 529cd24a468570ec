package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/endpoint"
)

// nodeReceiver is the Node receiver package (sdk/node) behind Node's own
// http server with its defaults (a 16 KB header limit), as a receiver
// following docs/receiving-node.md runs it. It verifies with the keys in
// the file HYMICAL_WEBHOOK_KEYS_FILE names, read on each request, answers
// 204 or 401, and prints one JSON line per request it got.
const nodeReceiver = `
const fs = require('node:fs');
const http = require('node:http');
const { Verifier } = require(process.env.HYMICAL_SDK_NODE);
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const sig = String(req.headers['webhook-signature'] ?? '');
    const line = { signatures: sig.split(' ').filter(Boolean).length, header_bytes: sig.length, headers: req.headers, body: body.toString('base64') };
    try {
      const keys = fs.readFileSync(process.env.HYMICAL_WEBHOOK_KEYS_FILE, 'utf8').split(/\s+/).filter(Boolean);
      new Verifier(keys).verify(req.headers, body);
      line.verified = true;
      res.writeHead(204).end();
    } catch (err) {
      line.error = String(err && err.code || err);
      res.writeHead(401).end();
    }
    process.stdout.write(JSON.stringify(line) + '\n');
  });
});
server.listen(0, '127.0.0.1', () => process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n'));
`

type nodeReceived struct {
	Port        int               `json:"port"`
	Signatures  int               `json:"signatures"`
	HeaderBytes int               `json:"header_bytes"`
	Headers     map[string]string `json:"headers"`
	Body        []byte            `json:"body"`
	Verified    bool              `json:"verified"`
	Error       string            `json:"error"`
}

// startNodeReceiver runs nodeReceiver verifying with the keys in keysFile
// and returns its URL and what it receives, one request at a time.
func startNodeReceiver(t *testing.T, keysFile string) (string, <-chan nodeReceived) {
	t.Helper()
	node := requireTool(t, "node")
	t.Log("hymical-test-uses: node")
	sdk, err := filepath.Abs(filepath.Join("..", "..", "sdk", "node"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "receiver.js")
	if err := os.WriteFile(script, []byte(nodeReceiver), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script)
	cmd.Env = append(os.Environ(), "HYMICAL_SDK_NODE="+sdk, "HYMICAL_WEBHOOK_KEYS_FILE="+keysFile)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan nodeReceived, 16)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	go func() {
		defer close(lines)
		for sc.Scan() {
			var r nodeReceived
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				r.Error = fmt.Sprintf("unreadable line %q: %v", sc.Text(), err)
			}
			lines <- r
		}
	}()
	select {
	case first, ok := <-lines:
		if !ok || first.Port == 0 {
			t.Fatalf("the Node receiver did not start: %+v", first)
		}
		return fmt.Sprintf("http://127.0.0.1:%d/hook", first.Port), lines
	case <-time.After(10 * time.Second):
		t.Fatal("the Node receiver did not start within 10 s")
	}
	return "", nil
}

// TestRotationsKeepTheSignatureHeaderSmall rotates an endpoint's secret
// many times within the grace over the API, then delivers one submission
// through the real worker and http plugin to a default Node receiver
// (sdk/node) that holds only the newest key. Every rotation's answer lists
// at most endpoint.MaxLiveSecrets secrets, the new one current; the
// delivery carries exactly that many signatures, Node verifies it, and
// the header stays far below Node's 16 KB limit. Before the cap, 1,000
// rotations made a 48 KB header, answered 431.
func TestRotationsKeepTheSignatureHeaderSmall(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range []struct {
			scheme    webhook.Scheme
			rotations int
			maxHeader int // bytes of webhook-signature at the cap
		}{
			{webhook.SchemeV1, 50, 5*48 - 1},
			{webhook.SchemeV1a, 50, 5*93 - 1},
			{webhook.SchemeV1, 1000, 5*48 - 1},
		} {
			t.Run(fmt.Sprintf("%d %s rotations", tc.rotations, tc.scheme), func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, b, nil)
				keys := filepath.Join(t.TempDir(), "keys")
				url, got := startNodeReceiver(t, keys)
				form := "contact"
				r := f.admin("POST", "/v1/endpoints", map[string]any{"url": url, "form_ids": []string{form},
					"signature_scheme": string(tc.scheme)}).must(t, http.StatusCreated)
				id := r.str("id")
				made := []string{r.str("secret")}

				start := time.Now()
				var last response
				for i := range tc.rotations {
					last = f.admin("POST", "/v1/endpoints/"+id+"/rotate-secret", nil).must(t, http.StatusOK)
					made = append(made, last.str("secret"))
					secrets := last.list("secrets")
					if want := min(len(made), endpoint.MaxLiveSecrets); len(secrets) != want {
						t.Fatalf("rotation %d lists %d live secrets, want %d: %s", i+1, len(secrets), want, last.raw)
					}
					if cur := secrets[0].(map[string]any); cur["expires_at"] != nil {
						t.Fatalf("rotation %d: the first secret listed expires: %s", i+1, last.raw)
					}
				}
				t.Logf("%d rotations over the API in %s", tc.rotations, time.Since(start).Round(time.Millisecond))
				view := f.admin("GET", "/v1/endpoints/"+id, nil).must(t, http.StatusOK)
				if n := len(view.list("secrets")); n != endpoint.MaxLiveSecrets {
					t.Fatalf("the endpoint shows %d live secrets, want %d", n, endpoint.MaxLiveSecrets)
				}

				// The receiver holds only the newest key: the current one.
				key := made[len(made)-1]
				if tc.scheme == webhook.SchemeV1a {
					pks := last.list("public_keys")
					if len(pks) != endpoint.MaxLiveSecrets {
						t.Fatalf("%d public keys, want %d", len(pks), endpoint.MaxLiveSecrets)
					}
					key = pks[0].(string)
				}
				if err := os.WriteFile(keys, []byte(key), 0o600); err != nil {
					t.Fatal(err)
				}
				f.runPool()
				sub := f.submit(form, map[string]any{"email": "a@example.com"}).must(t, http.StatusAccepted)
				f.waitState(ids(sub, "deliveries")[0], "delivered")

				var rcv nodeReceived
				select {
				case rcv = <-got:
				case <-time.After(10 * time.Second):
					t.Fatal("the Node receiver printed nothing")
				}
				if !rcv.Verified || rcv.Signatures != endpoint.MaxLiveSecrets || rcv.HeaderBytes > tc.maxHeader {
					t.Fatalf("Node got %d signatures in %d bytes, verified %t (%s); want %d signatures in at most %d bytes, verified",
						rcv.Signatures, rcv.HeaderBytes, rcv.Verified, rcv.Error, endpoint.MaxLiveSecrets, tc.maxHeader)
				}
				t.Logf("after %d rotations: webhook-signature of %d bytes, %d signatures; Node verified it with the newest key",
					tc.rotations, rcv.HeaderBytes, rcv.Signatures)
				if tc.scheme != webhook.SchemeV1 {
					return
				}
				// Which secrets signed: the five newest, not the one before.
				h := http.Header{}
				for k, v := range rcv.Headers {
					h.Set(k, v)
				}
				for back, secret := range made[len(made)-endpoint.MaxLiveSecrets-1:] {
					err := webhook.Verify(h, rcv.Body, secret)
					if retired := back == 0; (err == nil) == retired {
						t.Fatalf("the secret %d rotations old: verify error %v, want it to verify only while live",
							endpoint.MaxLiveSecrets-back, err)
					}
				}
				if s := strings.Count(h.Get("webhook-signature"), "v1,"); s != endpoint.MaxLiveSecrets {
					t.Fatalf("%d v1 signatures", s)
				}
			})
		}
	})
}
