package webhook_test

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// FuzzVerify checks that Verify never panics on arbitrary headers, that
// anything it accepts carries a genuine signature, and that a message signed
// over one body is never accepted with another. The seeds run in every
// go test; run `go test -fuzz=FuzzVerify ./sdk/webhook` to explore further.
func FuzzVerify(f *testing.F) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	now := time.Unix(1_800_000_000, 0)
	nowUnix := strconv.FormatInt(now.Unix(), 10)
	sub := []byte(`{"type":"submission.received","submission":{"id":"sub_48984534f33749c49a88de2d59400dce"}}`)
	validSig, err := webhook.Sign("del_1", now, sub, secret)
	if err != nil {
		f.Fatalf("Sign: %v", err)
	}

	f.Add("del_1", nowUnix, validSig, sub, append(bytes.Clone(sub), ' '))
	f.Add("del_1", nowUnix, "v1a,"+strings.TrimPrefix(validSig, "v1,")+" "+validSig, sub, []byte{})
	f.Add("del_1", "+"+nowUnix, validSig, []byte{}, []byte("{}"))
	f.Add("", "", "", []byte(nil), []byte(nil))
	f.Add("msg_x", "-9223372036854775808", "v1,", []byte("a"), []byte("b"))
	f.Add("msg x.1", "99999999999999999999", "v1,,,, v1 ,v1", []byte("0.1"), []byte("0"))
	f.Add("del_1", nowUnix, "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", sub, sub[:len(sub)-1])

	v, err := webhook.NewVerifier([]string{secret}, webhook.WithNow(func() time.Time { return now }))
	if err != nil {
		f.Fatalf("NewVerifier: %v", err)
	}

	f.Fuzz(func(t *testing.T, id, ts, sig string, body, altered []byte) {
		checkFuzzedMessage(t, v, now, id, ts, sig, body, altered, secret)
	})
}

// checkFuzzedMessage is one fuzz input against a verifier holding what
// verifies keys (the signing keys, first one signing). 1: arbitrary headers
// never panic, and acceptance means the header carries the genuine
// signature of one of the keys (both schemes are deterministic, so it can
// be rebuilt). 2: a genuinely signed message passes with its body and
// fails with any other.
func checkFuzzedMessage(t *testing.T, v *webhook.Verifier, now time.Time, id, ts, sig string, body, altered []byte, keys ...string) {
	t.Helper()
	h := http.Header{}
	h.Set(webhook.HeaderID, id)
	h.Set(webhook.HeaderTimestamp, ts)
	h.Set(webhook.HeaderSignature, sig)
	if err := v.Verify(h, body); err == nil {
		want, signErr := webhook.Sign(strings.TrimSpace(id), now, body, keys...)
		genuine := false
		for _, f := range strings.Fields(want) {
			genuine = genuine || strings.Contains(sig, f)
		}
		if signErr != nil || !genuine {
			t.Fatalf("Verify accepted id %q ts %q sig %q without a genuine signature", id, ts, sig)
		}
	} else if !isVerifyError(err) {
		t.Fatalf("Verify returned an error outside the documented set: %v", err)
	}

	msgID := id
	if _, err := webhook.Sign(msgID, now, nil, keys[0]); err != nil {
		msgID = "del_fuzz"
	}
	signed, err := webhook.SignHeaders(msgID, now, body, keys[0])
	if err != nil {
		t.Fatalf("SignHeaders(%q): %v", msgID, err)
	}
	if err := v.Verify(signed, body); err != nil {
		t.Fatalf("Verify rejected the signed body: %v", err)
	}
	if !bytes.Equal(altered, body) {
		if err := v.Verify(signed, altered); !errors.Is(err, webhook.ErrNoMatchingSignature) {
			t.Fatalf("Verify of a body altered from %q to %q = %v, want ErrNoMatchingSignature", body, altered, err)
		}
	}
}

func isVerifyError(err error) bool {
	for _, e := range []error{webhook.ErrMissingHeader, webhook.ErrMalformedTimestamp, webhook.ErrTimestampTooOld, webhook.ErrTimestampTooNew, webhook.ErrNoMatchingSignature} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// FuzzVerifyV1a is FuzzVerify for a receiver holding a v1a public key and a
// v1 secret: arbitrary headers never panic, acceptance means the header
// carries the genuine v1a or v1 signature, and a signed body altered fails.
// Ed25519 signatures are deterministic, so the genuine one can be rebuilt.
func FuzzVerifyV1a(f *testing.F) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	const signingKey = "whsk_6Xb/dCcHpPea21PS1N9VY/NZW723CEc77N4rJCubMbfVKIDij2HKpMKkioLlX0dRqSKJp4AJ6p9lMicMFs6Kvg=="
	publicKey, err := webhook.PublicKey(signingKey)
	if err != nil {
		f.Fatalf("PublicKey: %v", err)
	}
	now := time.Unix(1_800_000_000, 0)
	nowUnix := strconv.FormatInt(now.Unix(), 10)
	sub := []byte(`{"type":"submission.received","submission":{"id":"sub_48984534f33749c49a88de2d59400dce"}}`)
	validSig, err := webhook.Sign("del_1", now, sub, signingKey)
	if err != nil {
		f.Fatalf("Sign: %v", err)
	}
	hmacSig, err := webhook.Sign("del_1", now, sub, secret)
	if err != nil {
		f.Fatalf("Sign: %v", err)
	}

	f.Add("del_1", nowUnix, validSig, sub, append(bytes.Clone(sub), ' '))
	f.Add("del_1", nowUnix, "v1,"+strings.TrimPrefix(validSig, "v1a,")+" "+hmacSig, sub, []byte{})
	f.Add("del_1", nowUnix, strings.Repeat("v1a,"+strings.Repeat("A", 86)+"== ", 20)+validSig, sub, []byte("{}"))
	f.Add("del_1", nowUnix, "v1a,"+validSig[4:90], sub, sub[:len(sub)-1])
	f.Add("", "", "v1a", []byte(nil), []byte(nil))

	v, err := webhook.NewVerifier([]string{publicKey, secret}, webhook.WithNow(func() time.Time { return now }))
	if err != nil {
		f.Fatalf("NewVerifier: %v", err)
	}

	f.Fuzz(func(t *testing.T, id, ts, sig string, body, altered []byte) {
		checkFuzzedMessage(t, v, now, id, ts, sig, body, altered, signingKey, secret)
	})
}
