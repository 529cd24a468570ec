package webhook_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// The v1a vector: the same message as the v1 vector, signed with the
// Ed25519 key of the Standard Webhooks reference implementation's test
// (Svix's server). Its signature is the v1a example in the spec's
// "Webhook headers" section, so matching it pins the key encoding: a whsk_
// key is the 64-byte private key (seed, then public key).
const (
	v1aVectorKey    = "whsk_6Xb/dCcHpPea21PS1N9VY/NZW723CEc77N4rJCubMbfVKIDij2HKpMKkioLlX0dRqSKJp4AJ6p9lMicMFs6Kvg=="
	v1aVectorPublic = "whpk_1SiA4o9hyqTCpIqC5V9HUakiiaeACeqfZTInDBbOir4="
	v1aVectorSig    = "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg=="
)

func mustKeyPair(t testing.TB) (signing, public string) {
	t.Helper()
	sk, pk, err := webhook.NewKeyPair()
	if err != nil {
		t.Fatalf("NewKeyPair: %v", err)
	}
	return sk, pk
}

func TestSignMatchesTheV1aVector(t *testing.T) {
	t.Parallel()
	got, err := webhook.Sign(vectorID, vectorTime, []byte(vectorBody), v1aVectorKey)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if got != v1aVectorSig {
		t.Fatalf("Sign = %q, want %q", got, v1aVectorSig)
	}
	pub, err := webhook.PublicKey(v1aVectorKey)
	if err != nil || pub != v1aVectorPublic {
		t.Fatalf("PublicKey = %q, %v; want %q", pub, err, v1aVectorPublic)
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, vectorID)
	h.Set(webhook.HeaderTimestamp, strconv.Itoa(vectorUnix))
	h.Set(webhook.HeaderSignature, v1aVectorSig)
	if err := mustVerifier(t, []string{v1aVectorPublic}, fixedNow(vectorTime)).Verify(h, []byte(vectorBody)); err != nil {
		t.Fatalf("Verify of the vector with its public key: %v", err)
	}
}

func TestNewKeyPair(t *testing.T) {
	t.Parallel()
	sk, pk := mustKeyPair(t)
	sk2, pk2 := mustKeyPair(t)
	if sk == sk2 || pk == pk2 {
		t.Fatal("two key pairs are the same")
	}
	priv, err := webhook.ParseSigningKey(sk)
	if err != nil || len(priv) != ed25519.PrivateKeySize {
		t.Fatalf("ParseSigningKey(NewKeyPair()) = %d bytes, %v", len(priv), err)
	}
	pub, err := webhook.ParsePublicKey(pk)
	if err != nil || !pub.Equal(priv.Public()) {
		t.Fatalf("ParsePublicKey(NewKeyPair()) = %x, %v; want the signing key's public key", pub, err)
	}
	if derived, err := webhook.PublicKey(sk); err != nil || derived != pk {
		t.Fatalf("PublicKey(signing key) = %q, %v; want %q", derived, err, pk)
	}
	if !strings.HasPrefix(sk, webhook.SigningKeyPrefix) || !strings.HasPrefix(pk, webhook.PublicKeyPrefix) {
		t.Fatalf("prefixes: %.5s… %.5s…", sk, pk)
	}
}

func TestSchemes(t *testing.T) {
	t.Parallel()
	sk, pk := mustKeyPair(t)
	for _, tc := range []struct {
		key  string
		want webhook.Scheme
	}{
		{mustSecret(t), webhook.SchemeV1},
		{strings.TrimPrefix(mustSecret(t), webhook.SecretPrefix), webhook.SchemeV1},
		{sk, webhook.SchemeV1a},
		{" " + pk + "\n", webhook.SchemeV1a},
	} {
		if got := webhook.KeyScheme(tc.key); got != tc.want {
			t.Errorf("KeyScheme(%.8s…) = %q, want %q", tc.key, got, tc.want)
		}
	}
	for _, sc := range webhook.Schemes() {
		got, err := webhook.ParseScheme(string(sc))
		if err != nil || got != sc {
			t.Errorf("ParseScheme(%q) = %q, %v", sc, got, err)
		}
		key, err := sc.NewKey()
		if err != nil || webhook.KeyScheme(key) != sc {
			t.Errorf("%s.NewKey() is of scheme %q, %v", sc, webhook.KeyScheme(key), err)
		}
	}
	for _, bad := range []string{"", "V1", "v1b", "ed25519", "v1a "} {
		if _, err := webhook.ParseScheme(bad); err == nil || !strings.Contains(err.Error(), `"v1a"`) {
			t.Errorf("ParseScheme(%q) = %v, want an error naming the schemes", bad, err)
		}
	}
	if _, err := webhook.Scheme("v2").NewKey(); err == nil {
		t.Error(`Scheme("v2").NewKey() minted a key`)
	}
}

func TestParseV1aKeysRejects(t *testing.T) {
	t.Parallel()
	// A key whose base64 has a '+' or '/', so that its url-safe spelling
	// differs (about 1 in 16 random keys has neither).
	var sk, pk string
	var raw []byte
	for {
		sk, pk = mustKeyPair(t)
		raw, _ = base64.StdEncoding.DecodeString(strings.TrimPrefix(sk, webhook.SigningKeyPrefix))
		if base64.URLEncoding.EncodeToString(raw) != base64.StdEncoding.EncodeToString(raw) {
			break
		}
	}
	swapped := bytes.Clone(raw)
	swapped[40] ^= 1
	_, otherPK := mustKeyPair(t)
	otherPub, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(otherPK, webhook.PublicKeyPrefix))
	mixed := append(bytes.Clone(raw[:32]), otherPub...)
	enc := base64.StdEncoding.EncodeToString

	signing := []struct{ name, in, says string }{
		{"empty", "", "must start with"},
		{"a whsec_ secret", mustSecret(t), "whsec_ secret"},
		{"a public key", pk, "public key"},
		{"bare base64", enc(raw), "must start with"},
		{"the seed alone", "whsk_" + enc(raw[:32]), "decodes to 32 bytes, want 64"},
		{"not base64", "whsk_" + strings.Repeat("!", 88), "not standard base64"},
		{"url-safe alphabet", "whsk_" + base64.URLEncoding.EncodeToString(raw), "not standard base64"},
		{"missing padding", strings.TrimRight(sk, "="), "not standard base64"},
		{"a corrupted public half", "whsk_" + enc(swapped), "not the public key of its seed"},
		{"another key's public half", "whsk_" + enc(mixed), "not the public key of its seed"},
	}
	for _, tc := range signing {
		t.Run("signing key: "+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := webhook.ParseSigningKey(tc.in)
			if !errors.Is(err, webhook.ErrInvalidSecret) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want ErrInvalidSecret saying %q", err, tc.says)
			}
			assertNoLeak(t, err, strings.TrimPrefix(tc.in, "whsk_"), enc(raw[:32]), enc(raw)[:20])
			if _, err := webhook.Sign("del_1", time.Now(), nil, tc.in); !errors.Is(err, webhook.ErrInvalidSecret) && tc.in != enc(raw) && !strings.HasPrefix(tc.in, "whsec_") {
				t.Fatalf("Sign with it = %v, want ErrInvalidSecret", err)
			}
		})
	}

	pub, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(pk, webhook.PublicKeyPrefix))
	public := []struct{ name, in, says string }{
		{"a signing key", sk, "signing key"},
		{"too short", "whpk_" + enc(pub[:31]), "decodes to 31 bytes, want 32"},
		{"too long", "whpk_" + enc(raw), "decodes to 64 bytes, want 32"},
		{"not base64", "whpk_%%%", "not standard base64"},
	}
	for _, tc := range public {
		t.Run("public key: "+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := webhook.ParsePublicKey(tc.in)
			if !errors.Is(err, webhook.ErrInvalidSecret) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want ErrInvalidSecret saying %q", err, tc.says)
			}
			assertNoLeak(t, err, strings.TrimPrefix(sk, "whsk_")[:20])
		})
	}

	t.Run("ParseSecret refuses v1a keys", func(t *testing.T) {
		t.Parallel()
		for _, k := range []string{sk, pk} {
			_, err := webhook.ParseSecret(k)
			if !errors.Is(err, webhook.ErrInvalidSecret) || !strings.Contains(err.Error(), "v1a") {
				t.Fatalf("ParseSecret(%.5s…) = %v, want ErrInvalidSecret naming v1a", k, err)
			}
			assertNoLeak(t, err, k[5:25])
		}
	})
	t.Run("a public key cannot sign", func(t *testing.T) {
		t.Parallel()
		_, err := webhook.Sign("del_1", time.Now(), nil, mustSecret(t), pk)
		if !errors.Is(err, webhook.ErrInvalidSecret) || !strings.Contains(err.Error(), "secret 2 of 2") || !strings.Contains(err.Error(), "cannot sign") {
			t.Fatalf("Sign with a public key = %v", err)
		}
		assertNoLeak(t, err, pk[5:25])
	})
	t.Run("a verifier refuses the signing key", func(t *testing.T) {
		t.Parallel()
		_, err := webhook.NewVerifier([]string{sk})
		if !errors.Is(err, webhook.ErrInvalidSecret) || !strings.Contains(err.Error(), "verify with its whpk_ public key") {
			t.Fatalf("NewVerifier(signing key) = %v", err)
		}
		assertNoLeak(t, err, sk[5:25])
	})
}

func TestSignDispatchesOnThePrefix(t *testing.T) {
	t.Parallel()
	secret := mustSecret(t)
	sk1, _ := mustKeyPair(t)
	sk2, _ := mustKeyPair(t)
	for _, tc := range []struct {
		name string
		keys []string
		want []string // the scheme of each signature, in order
	}{
		{"one whsec_ secret", []string{secret}, []string{"v1"}},
		{"one whsk_ key", []string{sk1}, []string{"v1a"}},
		{"a v1a rotation", []string{sk1, sk2}, []string{"v1a", "v1a"}},
		{"mixed, in the order given", []string{sk2, secret, sk1}, []string{"v1a", "v1", "v1a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sig, err := webhook.Sign("del_1", vectorTime, []byte(vectorBody), tc.keys...)
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			fields := strings.Fields(sig)
			if len(fields) != len(tc.want) {
				t.Fatalf("%d signatures, want %d: %q", len(fields), len(tc.want), sig)
			}
			for i, f := range fields {
				version, enc, _ := strings.Cut(f, ",")
				raw, err := base64.StdEncoding.DecodeString(enc)
				size := map[string]int{"v1": 32, "v1a": ed25519.SignatureSize}[tc.want[i]]
				if version != tc.want[i] || err != nil || len(raw) != size {
					t.Errorf("signature %d = %q (%d bytes, %v), want %s of %d bytes", i+1, f, len(raw), err, tc.want[i], size)
				}
			}
		})
	}
}

func TestVerifyV1a(t *testing.T) {
	t.Parallel()
	secret := mustSecret(t)
	sk, pk := mustKeyPair(t)
	oldSK, oldPK := mustKeyPair(t)
	_, strangerPK := mustKeyPair(t)
	now := vectorTime
	body := []byte(`{"type":"submission.received","submission":{"id":"sub_48984534f33749c49a88de2d59400dce"}}`)
	signed := func(keys ...string) http.Header {
		h, err := webhook.SignHeaders("del_1", now, body, keys...)
		if err != nil {
			t.Fatalf("SignHeaders: %v", err)
		}
		return h
	}
	// withSig replaces the signature header of a message signed with sk.
	withSig := func(sig string) http.Header {
		h := signed(sk)
		h.Set(webhook.HeaderSignature, sig)
		return h
	}
	v1aSig := signed(sk).Get(webhook.HeaderSignature)
	v1aRaw := strings.TrimPrefix(v1aSig, "v1a,")
	hmacRaw := strings.TrimPrefix(signed(secret).Get(webhook.HeaderSignature), "v1,")

	for _, tc := range []struct {
		name    string
		keys    []string
		headers http.Header
		body    []byte
		ok      bool
		says    string
	}{
		{name: "its public key accepts it", keys: []string{pk}, headers: signed(sk), ok: true},
		{name: "either public key accepts a rotation's pair", keys: []string{oldPK}, headers: signed(sk, oldSK), ok: true},
		{name: "the new public key accepts a rotation's pair", keys: []string{pk}, headers: signed(sk, oldSK), ok: true},
		{name: "a mixed verifier accepts v1a", keys: []string{secret, pk}, headers: signed(sk), ok: true},
		{name: "a mixed verifier accepts v1", keys: []string{secret, pk}, headers: signed(secret), ok: true},
		{name: "a public key accepts the v1a half of a mixed header", keys: []string{pk}, headers: signed(secret, sk), ok: true},
		{name: "another public key refuses it", keys: []string{strangerPK}, headers: signed(sk), says: "0 of them v1, 1 v1a"},
		{name: "the body altered", keys: []string{pk}, headers: signed(sk), body: append(bytes.Clone(body), ' '), says: "1 public key(s)"},
		{name: "the id altered", keys: []string{pk}, headers: func() http.Header { h := signed(sk); h.Set(webhook.HeaderID, "del_2"); return h }()},
		{name: "the timestamp altered within tolerance", keys: []string{pk}, headers: func() http.Header {
			h := signed(sk)
			h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10))
			return h
		}()},
		{name: "a v1a signature under the v1 label", keys: []string{pk}, headers: withSig("v1," + v1aRaw)},
		{name: "an HMAC under the v1a label is not checked against a secret", keys: []string{secret}, headers: withSig("v1a," + hmacRaw), says: "0 of them v1, 1 v1a"},
		{name: "a v1 secret ignores v1a signatures", keys: []string{secret}, headers: signed(sk), says: "1 secret(s) and 0 public key(s)"},
		{name: "a public key ignores v1 signatures", keys: []string{pk}, headers: signed(secret), says: "1 of them v1, 0 v1a"},
		{name: "a truncated signature", keys: []string{pk}, headers: withSig(v1aSig[:len(v1aSig)-4])},
		{name: "unpadded base64", keys: []string{pk}, headers: withSig(strings.TrimRight(v1aSig, "="))},
		{name: "a flipped bit", keys: []string{pk}, headers: withSig("v1a," + base64.StdEncoding.EncodeToString(func() []byte {
			b, _ := base64.StdEncoding.DecodeString(v1aRaw)
			b[10] ^= 1
			return b
		}()))},
		{name: "the real one after 16 bogus v1a signatures is not reached", keys: []string{pk},
			headers: withSig(strings.Repeat("v1a,"+base64.StdEncoding.EncodeToString(make([]byte, 64))+" ", 16) + v1aSig), says: "17 v1a"},
		{name: "the real one after 15 bogus v1a signatures is", keys: []string{pk},
			headers: withSig(strings.Repeat("v1a,"+base64.StdEncoding.EncodeToString(make([]byte, 64))+" ", 15) + v1aSig), ok: true},
		{name: "malformed v1a entries do not count towards the bound", keys: []string{pk},
			headers: withSig(strings.Repeat("v1a,AAAA ", 40) + v1aSig), ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := body
			if tc.body != nil {
				b = tc.body
			}
			err := mustVerifier(t, tc.keys, fixedNow(now)).Verify(tc.headers, b)
			if tc.ok {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, webhook.ErrNoMatchingSignature) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Verify = %v, want ErrNoMatchingSignature saying %q", err, tc.says)
			}
			assertNoLeak(t, err, sk[5:30], v1aRaw[:20])
		})
	}
}

func TestVerifierPrintsNoKeys(t *testing.T) {
	t.Parallel()
	secret := mustSecret(t)
	_, pk := mustKeyPair(t)
	v := mustVerifier(t, []string{secret, pk})
	hmacKey, _ := webhook.ParseSecret(secret)
	pub, _ := webhook.ParsePublicKey(pk)
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("verifier", "v", v)
	for _, out := range []string{fmt.Sprint(v), fmt.Sprintf("%v %+v %#v %s %x %q", v, v, v, v, v, v), fmt.Sprintf("%+v", *v), logged.String()} {
		for _, leak := range []string{secret[6:], fmt.Sprint(hmacKey), fmt.Sprintf("%x", hmacKey), fmt.Sprint([]byte(pub)), fmt.Sprintf("%x", []byte(pub))} {
			if strings.Contains(out, leak) {
				t.Fatalf("printed verifier %q holds key material", out)
			}
		}
		if !strings.Contains(out, "1 v1 secret(s), 1 v1a public key(s)") {
			t.Fatalf("printed verifier %q does not summarise its keys", out)
		}
	}
}
