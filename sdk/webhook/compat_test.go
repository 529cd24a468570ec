package webhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hymical/hymical/sdk/webhook"
)

// These tests check this package against the Standard Webhooks project's own
// Go library, written independently, so that a receiver using any Standard
// Webhooks implementation can verify Hymical's messages and vice versa. That
// library always checks against time.Now, so these tests use the real clock.

func TestHeaderNamesMatchStandardWebhooks(t *testing.T) {
	t.Parallel()
	for ours, theirs := range map[string]string{
		webhook.HeaderID:        standardwebhooks.HeaderWebhookID,
		webhook.HeaderTimestamp: standardwebhooks.HeaderWebhookTimestamp,
		webhook.HeaderSignature: standardwebhooks.HeaderWebhookSignature,
	} {
		if ours != theirs {
			t.Errorf("header %q, Standard Webhooks says %q", ours, theirs)
		}
	}
}

func TestOurSignVerifiesWithStandardWebhooks(t *testing.T) {
	t.Parallel()
	s1, s2 := mustSecret(t), mustSecret(t)
	bodies := map[string][]byte{
		"submission event": []byte(`{"type":"submission.received","submission":{"id":"sub_48984534f33749c49a88de2d59400dce","data":{"name":"Zoë"}}}`),
		"empty body":       {},
		"binary body":      {0, 0xff, '.', '\n', 0x80},
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, err := webhook.SignHeaders("del_0123456789abcdef", time.Now(), body, s1, s2)
			if err != nil {
				t.Fatalf("SignHeaders: %v", err)
			}
			for i, s := range []string{s1, s2} {
				wh, err := standardwebhooks.NewWebhook(s)
				if err != nil {
					t.Fatalf("standardwebhooks.NewWebhook: %v", err)
				}
				if err := wh.Verify(body, h); err != nil {
					t.Errorf("their Verify with secret %d of a rotation pair: %v", i+1, err)
				}
				if err := wh.Verify(append(append([]byte(nil), body...), 'x'), h); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
					t.Errorf("their Verify of an altered body = %v, want their ErrNoMatchingSignature", err)
				}
			}
			other, err := standardwebhooks.NewWebhook(mustSecret(t))
			if err != nil {
				t.Fatalf("standardwebhooks.NewWebhook: %v", err)
			}
			if err := other.Verify(body, h); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
				t.Errorf("their Verify with an unrelated secret = %v, want their ErrNoMatchingSignature", err)
			}
		})
	}
}

func TestStandardWebhooksSignVerifiesWithOurs(t *testing.T) {
	t.Parallel()
	secret := mustSecret(t)
	body := []byte(`{"type":"submission.received","submission":{"id":"sub_1"}}`)
	ts := time.Now()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("standardwebhooks.NewWebhook: %v", err)
	}
	sig, err := wh.Sign("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, body)
	if err != nil {
		t.Fatalf("their Sign: %v", err)
	}
	// Headers built the way their example does.
	h := http.Header{}
	h.Set(standardwebhooks.HeaderWebhookID, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)

	ours, err := webhook.Sign("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, body, secret)
	if err != nil {
		t.Fatalf("our Sign: %v", err)
	}
	if ours != sig {
		t.Errorf("our Sign = %q, theirs = %q", ours, sig)
	}

	cases := []struct {
		name    string
		secrets []string
	}{
		{"whsec_ secret", []string{secret}},
		{"bare base64 secret", []string{strings.TrimPrefix(secret, "whsec_")}},
		{"their secret as the old half of a rotation", []string{mustSecret(t), secret}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := webhook.Verify(h, body, tc.secrets...); err != nil {
				t.Fatalf("our Verify of their signature: %v", err)
			}
			if err := webhook.Verify(h, body[1:], tc.secrets...); !errors.Is(err, webhook.ErrNoMatchingSignature) {
				t.Fatalf("our Verify of an altered body = %v, want ErrNoMatchingSignature", err)
			}
		})
	}

	t.Run("their published test vector", func(t *testing.T) {
		t.Parallel()
		wh, err := standardwebhooks.NewWebhook(vectorSecret)
		if err != nil {
			t.Fatalf("standardwebhooks.NewWebhook: %v", err)
		}
		theirs, err := wh.Sign(vectorID, vectorTime, []byte(vectorBody))
		if err != nil {
			t.Fatalf("their Sign: %v", err)
		}
		h := http.Header{}
		h.Set(webhook.HeaderID, vectorID)
		h.Set(webhook.HeaderTimestamp, strconv.Itoa(vectorUnix))
		h.Set(webhook.HeaderSignature, theirs)
		v := mustVerifier(t, []string{vectorSecret}, fixedNow(vectorTime.Add(time.Minute)))
		if err := v.Verify(h, []byte(vectorBody)); err != nil {
			t.Fatalf("our Verify of their vector: %v", err)
		}
	})
}

// A request signed by the Standard Webhooks library passes the Handler, and
// the Handler turns it away once any signed part is changed: a receiver can
// put the Handler in front of any sender that follows the scheme.
func TestStandardWebhooksSignedRequestPassesTheHandler(t *testing.T) {
	t.Parallel()
	r := newReceiver(t)
	wh, err := standardwebhooks.NewWebhook(r.secret)
	if err != nil {
		t.Fatalf("standardwebhooks.NewWebhook: %v", err)
	}
	body := submissionBody(subID)
	ts := time.Now()
	sig, err := wh.Sign("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, body)
	if err != nil {
		t.Fatalf("their Sign: %v", err)
	}
	theirs := func(id string, unix int64, sig string) http.Header {
		h := http.Header{}
		h.Set(standardwebhooks.HeaderWebhookID, id)
		h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(unix, 10))
		h.Set(standardwebhooks.HeaderWebhookSignature, sig)
		return h
	}
	refused := []struct {
		name string
		h    http.Header
		body []byte
	}{
		{"their signature over another body", theirs("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts.Unix(), sig), submissionBody("sub_00000000000000000000000000000000")},
		{"their signature under another id", theirs("msg_other", ts.Unix(), sig), body},
		{"their signature under another timestamp", theirs("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts.Unix()-1, sig), body},
	}
	for _, tc := range refused {
		if status, text := post(t, r.url, tc.h, tc.body); status != http.StatusUnauthorized {
			t.Errorf("%s: %d %q, want 401", tc.name, status, text)
		}
	}
	if r.rec.count() != 0 {
		t.Fatalf("the handler ran for a refused request")
	}
	if status, text := post(t, r.url, theirs("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts.Unix(), sig), body); status != http.StatusNoContent {
		t.Fatalf("their signed request: %d %q, want 204", status, text)
	}
	if r.rec.count() != 1 || r.rec.events[0].Submission.ID != subID {
		t.Fatalf("handler saw %d events, want the one submission", r.rec.count())
	}
}
