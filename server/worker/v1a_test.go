package worker_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/storage"
)

// A v1a endpoint in the middle of a rotation: the worker signs with every
// active whsk_ key, one v1a signature each, and not with an expired one;
// a receiver holding either public key accepts the request.
func TestDeliverySignsWithEveryActiveV1aKey(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, open, "http", func(int, *http.Request) int { return http.StatusNoContent })
			newSK, newPK := mustKeyPair(t)
			oldSK, oldPK := mustKeyPair(t)
			expiredSK, expiredPK := mustKeyPair(t)
			grace, gone := time.Now().Add(time.Hour), time.Now().Add(-time.Minute)
			e.ep.Secrets = []storage.Secret{
				storage.NewSecret(newSK, nil), storage.NewSecret(oldSK, &grace), storage.NewSecret(expiredSK, &gone),
			}
			if _, err := e.store.EndpointUpdate(t.Context(), e.ep); err != nil {
				t.Fatal(err)
			}
			e.run(fastConfig(5), e.store)
			_, d := e.submit()
			if got := e.waitFor(d.ID, "terminal", terminal); got.State != storage.StateDelivered {
				t.Fatalf("delivery = %+v", got)
			}
			reqs := e.recv.requests()
			if len(reqs) != 1 {
				t.Fatalf("receiver got %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			sig := r.header.Get(webhook.HeaderSignature)
			fields := strings.Fields(sig)
			if len(fields) != 2 || !strings.HasPrefix(fields[0], "v1a,") || !strings.HasPrefix(fields[1], "v1a,") {
				t.Fatalf("webhook-signature = %q, want two v1a signatures", sig)
			}
			for i, pk := range []string{newPK, oldPK} {
				if err := webhook.Verify(r.header, r.body, pk); err != nil {
					t.Fatalf("public key %d of the rotation: %v", i+1, err)
				}
			}
			if err := webhook.Verify(r.header, r.body, expiredPK); err == nil {
				t.Fatal("the expired key still signed")
			}
			for _, sk := range []string{newSK, oldSK, expiredSK} {
				if strings.Contains(sig, sk[5:]) {
					t.Fatal("a signing key travelled in the header")
				}
			}
		})
	}
}

func mustKeyPair(t *testing.T) (signing, public string) {
	t.Helper()
	sk, pk, err := webhook.NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	return sk, pk
}
