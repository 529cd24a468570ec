package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/sdk/webhook"
)

// TestServeDeliversV1aSignedMessages runs `hymical serve` with the real
// http plugin: an endpoint created with signature scheme v1a, a submission
// delivered through the worker to a receiver on loopback, and the request
// verified with sdk/webhook holding only the public key the API shows.
// After a rotation the next delivery carries both keys' signatures.
func TestServeDeliversV1aSignedMessages(t *testing.T) {
	dir := t.TempDir()
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	const token = "test-admin-token-v1a-0123456789"
	t.Setenv("FORMS_SERVER_ADMIN_TOKEN", token)

	type delivery struct {
		header http.Header
		body   []byte
	}
	got := make(chan delivery, 8)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Clone(), body}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()

	ctx := t.Context()
	base, out, logs := startServe(t, dir)
	hymical := func(args ...string) string {
		t.Helper()
		var b bytes.Buffer
		if err := run(ctx, append(args, "--server", base), &b, &b); err != nil {
			t.Fatalf("hymical %s: %v\n%s", strings.Join(args, " "), err, b.String())
		}
		return b.String()
	}
	api := func(method, path string) map[string]any {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	publicKeys := func(v map[string]any) []string {
		var out []string
		for _, k := range v["public_keys"].([]any) {
			out = append(out, k.(string))
		}
		return out
	}
	next := func() delivery {
		t.Helper()
		hymical("submit", "--form", "form_demo")
		select {
		case d := <-got:
			return d
		case <-time.After(20 * time.Second):
			t.Fatalf("no delivery reached the receiver\n%s\n%s", out.String(), logs.String())
		}
		return delivery{}
	}

	added := hymical("endpoints", "add", "--url", recv.URL+"/hook", "--form", "form_demo", "--signature-scheme", "v1a")
	m := regexp.MustCompile(`endpoint (ep_\S+) .*signature scheme v1a\)\npublic key .*: (whpk_\S+)\nsigning key .*: (whsk_\S+)\n`).FindStringSubmatch(added)
	if m == nil {
		t.Fatalf("endpoints add --signature-scheme v1a printed:\n%s", added)
	}
	id, shownPK, sk := m[1], m[2], m[3]

	ep := api("GET", "/v1/endpoints/"+id)
	pks := publicKeys(ep)
	if ep["signature_scheme"] != "v1a" || len(pks) != 1 || pks[0] != shownPK {
		t.Fatalf("GET endpoint: %v; want v1a with the public key the CLI printed", ep)
	}
	if derived, err := webhook.PublicKey(sk); err != nil || derived != pks[0] {
		t.Fatal("the public key the API shows is not that of the signing key it issued")
	}
	if list := hymical("endpoints", "list", "--wide"); !strings.Contains(list, pks[0]) || !strings.Contains(list, "v1a") || strings.Contains(list, "whsk_") {
		t.Fatalf("endpoints list:\n%s", list)
	}

	d := next()
	if sig := d.header.Get(webhook.HeaderSignature); !strings.HasPrefix(sig, "v1a,") || strings.Contains(sig, " ") {
		t.Fatalf("webhook-signature = %q, want one v1a signature", sig)
	}
	v, err := webhook.NewVerifier(pks)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(d.header, d.body); err != nil {
		t.Fatalf("the receiver, holding the API's public key, could not verify: %v", err)
	}

	api("POST", "/v1/endpoints/"+id+"/rotate-secret")
	rotated := publicKeys(api("GET", "/v1/endpoints/"+id))
	if len(rotated) != 2 || rotated[1] != pks[0] {
		t.Fatalf("public keys after a rotation: %v", rotated)
	}
	d = next()
	if sig := d.header.Get(webhook.HeaderSignature); len(strings.Fields(sig)) != 2 {
		t.Fatalf("webhook-signature during a rotation = %q, want two v1a signatures", sig)
	}
	for i, pk := range rotated {
		if err := webhook.Verify(d.header, d.body, pk); err != nil {
			t.Fatalf("public key %d after the rotation: %v", i+1, err)
		}
	}
	if strings.Contains(out.String()+logs.String(), sk[5:]) {
		t.Fatal("the signing key appeared in the server's output")
	}
}
