package webhook_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// The published Standard Webhooks test vector.
const (
	vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorUnix   = 1614265330
	vectorBody   = `{"test": 2432232314}`
	vectorSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

var vectorTime = time.Unix(vectorUnix, 0)

func mustSecret(t *testing.T) string {
	t.Helper()
	s, err := webhook.NewSecret()
	if err != nil {
		t.Fatalf("NewSecret: %v", err)
	}
	return s
}

func fixedNow(ts time.Time) webhook.Option {
	return webhook.WithNow(func() time.Time { return ts })
}

func mustVerifier(t *testing.T, secrets []string, opts ...webhook.Option) *webhook.Verifier {
	t.Helper()
	v, err := webhook.NewVerifier(secrets, opts...)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

// assertNoLeak fails when err's text contains any of the secret material.
func assertNoLeak(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if strings.Contains(msg, s) {
			t.Errorf("error %q leaks secret material %q", msg, s)
		}
	}
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	a, b := mustSecret(t), mustSecret(t)
	if a == b {
		t.Fatal("two new secrets are equal")
	}
	for _, s := range []string{a, b} {
		enc, ok := strings.CutPrefix(s, webhook.SecretPrefix)
		if !ok {
			t.Fatalf("secret does not start with %q", webhook.SecretPrefix)
		}
		raw, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			t.Fatalf("secret is not standard base64: %v", err)
		}
		if len(raw) != 32 {
			t.Fatalf("secret holds %d bytes, want 32", len(raw))
		}
		key, err := webhook.ParseSecret(s)
		if err != nil {
			t.Fatalf("ParseSecret(NewSecret()): %v", err)
		}
		if string(key) != string(raw) {
			t.Fatal("ParseSecret returned a different key than the one encoded")
		}
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	want := []byte("0123456789abcdef0123456789abcdef")
	enc := base64.StdEncoding.EncodeToString(want)
	ok := []struct{ name, in string }{
		{"prefixed", "whsec_" + enc},
		{"bare base64, as other Standard Webhooks libraries accept", enc},
		{"trailing newline from a file", "whsec_" + enc + "\n"},
		{"surrounding spaces", "  whsec_" + enc + " "},
	}
	for _, tc := range ok {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := webhook.ParseSecret(tc.in)
			if err != nil {
				t.Fatalf("ParseSecret: %v", err)
			}
			if string(got) != string(want) {
				t.Fatalf("key = %q, want %q", got, want)
			}
		})
	}

	bad := []struct{ name, in string }{
		{"empty", ""},
		{"only white space", " \n"},
		{"prefix only", "whsec_"},
		{"not base64", "whsec_s3cr3t!pa$$word"},
		{"bare, not base64", "hunter2-hunter2-hunter2"},
		{"url-safe alphabet", "whsec_" + base64.URLEncoding.EncodeToString([]byte{0xfb, 0xff, 0xfe, 0xfa, 0xbb, 0xfc})},
		{"missing padding", "whsec_" + strings.TrimRight(base64.StdEncoding.EncodeToString([]byte("abcd")), "=")},
	}
	for _, tc := range bad {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := webhook.ParseSecret(tc.in)
			if !errors.Is(err, webhook.ErrInvalidSecret) {
				t.Fatalf("err = %v, want ErrInvalidSecret", err)
			}
			body := strings.TrimPrefix(strings.TrimSpace(tc.in), "whsec_")
			if len(body) >= 4 {
				assertNoLeak(t, err, body)
			}
		})
	}
}

func TestSignMatchesStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{vectorSecret, strings.TrimPrefix(vectorSecret, "whsec_")} {
		got, err := webhook.Sign(vectorID, vectorTime, []byte(vectorBody), secret)
		if err != nil {
			t.Fatalf("Sign: %v", err)
		}
		if got != vectorSig {
			t.Fatalf("Sign = %q, want %q", got, vectorSig)
		}
	}
	// Sub-second parts do not travel in the header, so they must not change the signature.
	got, err := webhook.Sign(vectorID, vectorTime.Add(999*time.Millisecond), []byte(vectorBody), vectorSecret)
	if err != nil || got != vectorSig {
		t.Fatalf("Sign with fractional seconds = %q, %v; want %q", got, err, vectorSig)
	}
}

func TestSignErrors(t *testing.T) {
	t.Parallel()
	good := mustSecret(t)
	cases := []struct {
		name    string
		id      string
		secrets []string
		is      error
		says    string
	}{
		{"no secret", "msg_1", nil, webhook.ErrInvalidSecret, "no secret"},
		{"bad only secret", "msg_1", []string{"whsec_not*base64"}, webhook.ErrInvalidSecret, "base64"},
		{"bad second secret is named by position", "msg_1", []string{good, "whsec_not*base64"}, webhook.ErrInvalidSecret, "secret 2 of 2"},
		{"empty id", "", []string{good}, webhook.ErrInvalidMessageID, "empty"},
		{"id with trailing space", "msg_1 ", []string{good}, webhook.ErrInvalidMessageID, "white space"},
		{"id with newline", "msg\n1", []string{good}, webhook.ErrInvalidMessageID, "control"},
		{"id with NUL", "msg\x001", []string{good}, webhook.ErrInvalidMessageID, "control"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sig, err := webhook.Sign(tc.id, vectorTime, []byte("{}"), tc.secrets...)
			if !errors.Is(err, tc.is) {
				t.Fatalf("Sign = %q, %v; want an error wrapping %v", sig, err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
			assertNoLeak(t, err, good, strings.TrimPrefix(good, "whsec_"), "not*base64")
			if _, err := webhook.SignHeaders(tc.id, vectorTime, []byte("{}"), tc.secrets...); !errors.Is(err, tc.is) {
				t.Fatalf("SignHeaders err = %v, want %v", err, tc.is)
			}
		})
	}
}

func TestSignHeaders(t *testing.T) {
	t.Parallel()
	h, err := webhook.SignHeaders(vectorID, vectorTime, []byte(vectorBody), vectorSecret)
	if err != nil {
		t.Fatalf("SignHeaders: %v", err)
	}
	if len(h) != 3 {
		t.Fatalf("SignHeaders returned %d headers, want 3: %v", len(h), h)
	}
	for name, want := range map[string]string{
		webhook.HeaderID:        vectorID,
		webhook.HeaderTimestamp: strconv.Itoa(vectorUnix),
		webhook.HeaderSignature: vectorSig,
	} {
		if got := h.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want [%q]", name, got, want)
		}
	}
	// What goes on the wire is what a receiver reads back.
	v := mustVerifier(t, []string{vectorSecret}, fixedNow(vectorTime))
	if err := v.Verify(h, []byte(vectorBody)); err != nil {
		t.Fatalf("Verify(SignHeaders): %v", err)
	}
}

func TestRotation(t *testing.T) {
	t.Parallel()
	oldS, newS := mustSecret(t), mustSecret(t)
	body := []byte(`{"type":"submission.received","submission":{"id":"sub_1"}}`)
	now := time.Unix(1_800_000_000, 0)
	h, err := webhook.SignHeaders("del_1", now, body, newS, oldS)
	if err != nil {
		t.Fatalf("SignHeaders: %v", err)
	}
	sigs := strings.Split(h.Get(webhook.HeaderSignature), " ")
	if len(sigs) != 2 || sigs[0] == sigs[1] {
		t.Fatalf("want two different space-separated signatures, got %q", h.Get(webhook.HeaderSignature))
	}
	for _, s := range sigs {
		if !strings.HasPrefix(s, "v1,") {
			t.Fatalf("signature %q does not start with v1,", s)
		}
	}

	cases := []struct {
		name    string
		secrets []string
	}{
		{"receiver still on the old secret", []string{oldS}},
		{"receiver already on the new secret", []string{newS}},
		{"receiver holding both", []string{oldS, newS}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := mustVerifier(t, tc.secrets, fixedNow(now)).Verify(h, body); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}

	t.Run("receiver holding neither rejects", func(t *testing.T) {
		t.Parallel()
		other := mustSecret(t)
		err := mustVerifier(t, []string{other}, fixedNow(now)).Verify(h, body)
		if !errors.Is(err, webhook.ErrNoMatchingSignature) {
			t.Fatalf("err = %v, want ErrNoMatchingSignature", err)
		}
	})

	t.Run("verifier with an old and a new secret accepts a message signed with either alone", func(t *testing.T) {
		t.Parallel()
		v := mustVerifier(t, []string{oldS, newS}, fixedNow(now))
		for _, s := range []string{oldS, newS} {
			h, err := webhook.SignHeaders("del_1", now, body, s)
			if err != nil {
				t.Fatalf("SignHeaders: %v", err)
			}
			if err := v.Verify(h, body); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		}
	})
}

func TestVerifyErrors(t *testing.T) {
	t.Parallel()
	secret := mustSecret(t)
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"type":"submission.received","submission":{"id":"sub_48984534f33749c49a88de2d59400dce"}}`)
	signed, err := webhook.SignHeaders("del_abc", now, body, secret)
	if err != nil {
		t.Fatalf("SignHeaders: %v", err)
	}
	sig := signed.Get(webhook.HeaderSignature)
	sigB64 := strings.TrimPrefix(sig, "v1,")
	// What a verifier holding secret would compute for a wrong timestamp; must not leak either.
	otherTSSig, _ := webhook.Sign("del_abc", now.Add(time.Second), body, secret)

	with := func(edit func(h http.Header)) http.Header {
		h := signed.Clone()
		edit(h)
		return h
	}
	set := func(name, value string) http.Header {
		return with(func(h http.Header) { h.Set(name, value) })
	}
	del := func(name string) http.Header {
		return with(func(h http.Header) { h.Del(name) })
	}
	at := func(d time.Duration) http.Header {
		return set(webhook.HeaderTimestamp, strconv.FormatInt(now.Add(d).Unix(), 10))
	}

	cases := []struct {
		name    string
		headers http.Header
		body    []byte
		is      error
		header  string   // for ErrMissingHeader, which one
		says    []string // substrings the message must contain
	}{
		{name: "missing webhook-id", headers: del(webhook.HeaderID), is: webhook.ErrMissingHeader, header: webhook.HeaderID},
		{name: "missing webhook-timestamp", headers: del(webhook.HeaderTimestamp), is: webhook.ErrMissingHeader, header: webhook.HeaderTimestamp},
		{name: "missing webhook-signature", headers: del(webhook.HeaderSignature), is: webhook.ErrMissingHeader, header: webhook.HeaderSignature},
		{name: "empty webhook-id", headers: set(webhook.HeaderID, ""), is: webhook.ErrMissingHeader, header: webhook.HeaderID},
		{name: "blank webhook-signature", headers: set(webhook.HeaderSignature, "   "), is: webhook.ErrMissingHeader, header: webhook.HeaderSignature},
		{name: "no headers at all", headers: http.Header{}, is: webhook.ErrMissingHeader, header: webhook.HeaderID},

		{name: "timestamp not a number", headers: set(webhook.HeaderTimestamp, "yesterday"), is: webhook.ErrMalformedTimestamp, says: []string{`"yesterday"`, "unix seconds"}},
		{name: "timestamp with a fraction", headers: set(webhook.HeaderTimestamp, "1800000000.5"), is: webhook.ErrMalformedTimestamp},
		{name: "timestamp with plus sign", headers: set(webhook.HeaderTimestamp, "+1800000000"), is: webhook.ErrMalformedTimestamp},
		{name: "timestamp with leading zero", headers: set(webhook.HeaderTimestamp, "01800000000"), is: webhook.ErrMalformedTimestamp},
		{name: "timestamp as a date", headers: set(webhook.HeaderTimestamp, now.Format(time.RFC3339)), is: webhook.ErrMalformedTimestamp},
		{name: "timestamp overflowing int64", headers: set(webhook.HeaderTimestamp, "99999999999999999999"), is: webhook.ErrMalformedTimestamp},
		{name: "long garbage timestamp is clipped", headers: set(webhook.HeaderTimestamp, strings.Repeat("x", 500)), is: webhook.ErrMalformedTimestamp, says: []string{`..."`}},

		{name: "timestamp too old", headers: at(-7 * time.Minute), is: webhook.ErrTimestampTooOld, says: []string{"7m0s in the past", "tolerance is 5m0s"}},
		{name: "timestamp too new", headers: at(6 * time.Minute), is: webhook.ErrTimestampTooNew, says: []string{"6m0s in the future", "tolerance is 5m0s"}},
		{name: "timestamp at the epoch", headers: set(webhook.HeaderTimestamp, "0"), is: webhook.ErrTimestampTooOld},
		{name: "timestamp far in the future", headers: set(webhook.HeaderTimestamp, "9223372036854775807"), is: webhook.ErrTimestampTooNew},
		{name: "timestamp at the smallest int64", headers: set(webhook.HeaderTimestamp, "-9223372036854775808"), is: webhook.ErrTimestampTooOld},
		{name: "negative timestamp", headers: set(webhook.HeaderTimestamp, "-1800000000"), is: webhook.ErrTimestampTooOld},

		{name: "body altered", headers: signed, body: []byte(strings.Replace(string(body), "sub_4898", "sub_4899", 1)), is: webhook.ErrNoMatchingSignature, says: []string{"none of the 1 signatures", "1 of them v1", "1 secret(s)"}},
		{name: "body empty", headers: signed, body: []byte{}, is: webhook.ErrNoMatchingSignature},
		{name: "id altered", headers: set(webhook.HeaderID, "del_abd"), is: webhook.ErrNoMatchingSignature},
		{name: "timestamp altered within tolerance", headers: at(time.Second), is: webhook.ErrNoMatchingSignature},
		{name: "signed by another secret", headers: with(func(h http.Header) {
			s, _ := webhook.Sign("del_abc", now, body, mustSecret(t))
			h.Set(webhook.HeaderSignature, s)
		}), is: webhook.ErrNoMatchingSignature},
		{name: "only an unknown version, carrying a correct MAC", headers: set(webhook.HeaderSignature, "v1a,"+sigB64), is: webhook.ErrNoMatchingSignature, says: []string{"0 of them v1"}},
		{name: "v2 carrying a correct MAC", headers: set(webhook.HeaderSignature, "v2,"+sigB64), is: webhook.ErrNoMatchingSignature},
		{name: "no version prefix", headers: set(webhook.HeaderSignature, sigB64), is: webhook.ErrNoMatchingSignature},
		{name: "signature not base64", headers: set(webhook.HeaderSignature, "v1,***"), is: webhook.ErrNoMatchingSignature},
		{name: "signature truncated", headers: set(webhook.HeaderSignature, sig[:len(sig)-4]), is: webhook.ErrNoMatchingSignature},
		{name: "signature without padding", headers: set(webhook.HeaderSignature, strings.TrimRight(sig, "=")), is: webhook.ErrNoMatchingSignature},
		{name: "signature empty after version", headers: set(webhook.HeaderSignature, "v1,"), is: webhook.ErrNoMatchingSignature},
		{name: "version in upper case", headers: set(webhook.HeaderSignature, "V1,"+sigB64), is: webhook.ErrNoMatchingSignature},
		{name: "several wrong signatures", headers: set(webhook.HeaderSignature, "v1,AAAA v1a,"+sigB64+" v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32))), is: webhook.ErrNoMatchingSignature, says: []string{"none of the 3 signatures", "2 of them v1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := tc.body
			if b == nil {
				b = body
			}
			v := mustVerifier(t, []string{secret}, fixedNow(now))
			err := v.Verify(tc.headers, b)
			if !errors.Is(err, tc.is) {
				t.Fatalf("Verify = %v, want an error wrapping %v", err, tc.is)
			}
			for _, other := range []error{webhook.ErrMissingHeader, webhook.ErrMalformedTimestamp, webhook.ErrTimestampTooOld, webhook.ErrTimestampTooNew, webhook.ErrNoMatchingSignature} {
				if other != tc.is && errors.Is(err, other) {
					t.Errorf("error also matches %v", other)
				}
			}
			if tc.header != "" {
				var mh *webhook.MissingHeaderError
				if !errors.As(err, &mh) || mh.Header != tc.header {
					t.Fatalf("err = %#v, want MissingHeaderError for %s", err, tc.header)
				}
				if !strings.Contains(err.Error(), tc.header) {
					t.Errorf("error %q does not name %s", err, tc.header)
				}
			}
			if errors.Is(tc.is, webhook.ErrTimestampTooOld) || errors.Is(tc.is, webhook.ErrTimestampTooNew) {
				var te *webhook.TimestampError
				if !errors.As(err, &te) || te.Tolerance != webhook.DefaultTolerance || !te.Now.Equal(now) {
					t.Fatalf("err = %#v, want a TimestampError at now with the default tolerance", err)
				}
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			// The expected signature for these headers is also secret: it is a valid forgery.
			expected, _ := webhook.Sign(headerOr(tc.headers, webhook.HeaderID, "del_abc"), now, b, secret)
			assertNoLeak(t, err, secret, strings.TrimPrefix(secret, "whsec_"), sigB64, strings.TrimPrefix(otherTSSig, "v1,"), strings.TrimPrefix(expected, "v1,"))
		})
	}
}

func headerOr(h http.Header, name, fallback string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	return fallback
}

func TestVerifyAccepts(t *testing.T) {
	t.Parallel()
	secret := mustSecret(t)
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"submission":{"id":"sub_1"}}`)
	signed, err := webhook.SignHeaders("del_1", now, body, secret)
	if err != nil {
		t.Fatalf("SignHeaders: %v", err)
	}
	sig := signed.Get(webhook.HeaderSignature)
	sigB64 := strings.TrimPrefix(sig, "v1,")
	zero := "v1," + base64.StdEncoding.EncodeToString(make([]byte, 32))

	with := func(edit func(h http.Header)) http.Header {
		h := signed.Clone()
		edit(h)
		return h
	}
	cases := []struct {
		name    string
		headers http.Header
	}{
		{"headers as SignHeaders wrote them", signed},
		{"unknown versions beside the v1 signature", with(func(h http.Header) {
			h.Set(webhook.HeaderSignature, "v1a,"+sigB64+" v2,whatever "+sig+" v0")
		})},
		{"matching signature after wrong ones", with(func(h http.Header) {
			h.Set(webhook.HeaderSignature, zero+" v1,AAAA "+sig)
		})},
		{"extra white space between signatures", with(func(h http.Header) {
			h.Set(webhook.HeaderSignature, "  "+zero+"   "+sig+"  ")
		})},
		{"signatures split over two header lines", with(func(h http.Header) {
			h.Set(webhook.HeaderSignature, zero)
			h.Add(webhook.HeaderSignature, sig)
		})},
		{"lower-case keys in a hand-built map", http.Header{
			"webhook-id":        {"del_1"},
			"webhook-timestamp": {strconv.FormatInt(now.Unix(), 10)},
			"webhook-signature": {sig},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := mustVerifier(t, []string{secret}, fixedNow(now)).Verify(tc.headers, body); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
}

func TestVerifyToleranceEdges(t *testing.T) {
	t.Parallel()
	secret := mustSecret(t)
	ts := time.Unix(1_800_000_000, 0)
	body := []byte(`{}`)
	h, err := webhook.SignHeaders("del_1", ts, body, secret)
	if err != nil {
		t.Fatalf("SignHeaders: %v", err)
	}
	cases := []struct {
		name      string
		tolerance time.Duration // 0: default
		nowOffset time.Duration // verifier clock minus message timestamp
		want      error
	}{
		{"same second", 0, 0, nil},
		{"exactly the tolerance in the past", 0, 5 * time.Minute, nil},
		{"a nanosecond past the tolerance in the past", 0, 5*time.Minute + time.Nanosecond, webhook.ErrTimestampTooOld},
		{"a second past the tolerance in the past", 0, 5*time.Minute + time.Second, webhook.ErrTimestampTooOld},
		{"exactly the tolerance in the future", 0, -5 * time.Minute, nil},
		{"a nanosecond past the tolerance in the future", 0, -5*time.Minute - time.Nanosecond, webhook.ErrTimestampTooNew},
		{"a second past the tolerance in the future", 0, -5*time.Minute - time.Second, webhook.ErrTimestampTooNew},
		{"custom 30s: 30s old accepted", 30 * time.Second, 30 * time.Second, nil},
		{"custom 30s: 31s old rejected", 30 * time.Second, 31 * time.Second, webhook.ErrTimestampTooOld},
		{"custom 30s: 31s ahead rejected", 30 * time.Second, -31 * time.Second, webhook.ErrTimestampTooNew},
		{"custom 1h: 59m old accepted", time.Hour, 59 * time.Minute, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := []webhook.Option{fixedNow(ts.Add(tc.nowOffset))}
			tol := webhook.DefaultTolerance
			if tc.tolerance != 0 {
				opts = append(opts, webhook.WithTolerance(tc.tolerance))
				tol = tc.tolerance
			}
			err := mustVerifier(t, []string{secret}, opts...).Verify(h, body)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			var te *webhook.TimestampError
			if !errors.As(err, &te) {
				t.Fatalf("err %T is not a *TimestampError", err)
			}
			if te.Age() != tc.nowOffset || te.Tolerance != tol {
				t.Fatalf("TimestampError age %s tolerance %s, want %s and %s", te.Age(), te.Tolerance, tc.nowOffset, tol)
			}
		})
	}
}

func TestNewVerifierErrors(t *testing.T) {
	t.Parallel()
	good := mustSecret(t)
	cases := []struct {
		name    string
		secrets []string
		opts    []webhook.Option
		is      error
		says    string
	}{
		{"no secrets", nil, nil, webhook.ErrInvalidSecret, "no secret"},
		{"an invalid secret", []string{good, "whsec_%%%%"}, nil, webhook.ErrInvalidSecret, "secret 2 of 2"},
		{"zero tolerance", []string{good}, []webhook.Option{webhook.WithTolerance(0)}, nil, "tolerance must be positive"},
		{"negative tolerance", []string{good}, []webhook.Option{webhook.WithTolerance(-time.Second)}, nil, "tolerance must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := webhook.NewVerifier(tc.secrets, tc.opts...)
			if err == nil {
				t.Fatalf("NewVerifier = %v, want an error", v)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
			assertNoLeak(t, err, good, strings.TrimPrefix(good, "whsec_"))
		})
	}

	t.Run("nil clock means the real clock", func(t *testing.T) {
		t.Parallel()
		h, err := webhook.SignHeaders("del_1", time.Now(), nil, good)
		if err != nil {
			t.Fatalf("SignHeaders: %v", err)
		}
		if err := mustVerifier(t, []string{good}, webhook.WithNow(nil)).Verify(h, nil); err != nil {
			t.Fatalf("Verify: %v", err)
		}
	})
}

func TestVerifyFunc(t *testing.T) {
	t.Parallel()
	secret := mustSecret(t)
	body := []byte(`{"submission":{"id":"sub_1"}}`)
	h, err := webhook.SignHeaders("del_1", time.Now(), body, secret)
	if err != nil {
		t.Fatalf("SignHeaders: %v", err)
	}
	if err := webhook.Verify(h, body, secret); err != nil {
		t.Fatalf("Verify with the real clock: %v", err)
	}
	if err := webhook.Verify(h, append(body, '\n'), secret); !errors.Is(err, webhook.ErrNoMatchingSignature) {
		t.Fatalf("Verify of an altered body = %v, want ErrNoMatchingSignature", err)
	}
	if err := webhook.Verify(h, body); !errors.Is(err, webhook.ErrInvalidSecret) {
		t.Fatalf("Verify without a secret = %v, want ErrInvalidSecret", err)
	}
	old, err := webhook.SignHeaders("del_1", time.Now().Add(-time.Hour), body, secret)
	if err != nil {
		t.Fatalf("SignHeaders: %v", err)
	}
	if err := webhook.Verify(old, body, secret); !errors.Is(err, webhook.ErrTimestampTooOld) {
		t.Fatalf("Verify of an hour-old message = %v, want ErrTimestampTooOld", err)
	}
}
