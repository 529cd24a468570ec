package secretbox_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hymical/hymical/storage/secretbox"
)

func newBox(t *testing.T) (*secretbox.Box, secretbox.Key) {
	t.Helper()
	k, err := secretbox.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := secretbox.New(k)
	if err != nil {
		t.Fatal(err)
	}
	return b, k
}

func TestSealOpens(t *testing.T) {
	t.Parallel()
	box, k := newBox(t)
	other, _ := newBox(t)
	const secret = "whsec_c2VjcmV0c2VjcmV0c2VjcmV0"
	sealed, err := box.Seal([]byte(secret), "ep_1")
	if err != nil {
		t.Fatal(err)
	}
	if !secretbox.IsSealed(sealed) || strings.Contains(sealed, secret) || strings.Contains(sealed, "c2VjcmV0") {
		t.Fatalf("sealed value %q shows the secret or lacks the prefix", sealed)
	}
	again, _ := box.Seal([]byte(secret), "ep_1")
	if again == sealed {
		t.Error("two seals of one value are equal: the nonce is not fresh")
	}
	got, err := box.Open(sealed, "ep_1")
	if err != nil || string(got) != secret {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if id, err := secretbox.KeyIDOf(sealed); err != nil || id != k.ID() || id != box.KeyID() {
		t.Errorf("KeyIDOf = %q, %v; want %q", id, err, k.ID())
	}

	if !strings.HasPrefix(sealed, secretbox.Header(k.ID())) {
		t.Errorf("sealed value %q does not start with its header %q", sealed, secretbox.Header(k.ID()))
	}
	header := secretbox.Header(k.ID())
	raw, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(sealed, header))
	flipped := bytes.Clone(raw)
	flipped[len(flipped)-1] ^= 1
	// The id sits in the clear: relabelling the value with another key's
	// id is caught by the associated data, not only by the id check.
	otherBox := func() *secretbox.Box { b, _ := newBox(t); return b }()
	relabelled := secretbox.Header(otherBox.KeyID()) + strings.TrimPrefix(sealed, header)

	for _, tc := range []struct {
		name    string
		box     *secretbox.Box
		sealed  string
		context string
		want    error
	}{
		{"another endpoint's row", box, sealed, "ep_2", secretbox.ErrOpen},
		{"another key", other, sealed, "ep_1", secretbox.ErrWrongKey},
		{"a changed byte", box, header + base64.RawURLEncoding.EncodeToString(flipped), "ep_1", secretbox.ErrOpen},
		{"relabelled with another key id", otherBox, relabelled, "ep_1", secretbox.ErrOpen},
		{"no key id", box, secretbox.Prefix + strings.TrimPrefix(sealed, header), "ep_1", secretbox.ErrOpen},
		{"truncated", box, sealed[:20], "ep_1", secretbox.ErrOpen},
		{"plaintext", box, `[{"value":"` + secret + `"}]`, "ep_1", secretbox.ErrNotSealed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.box.Open(tc.sealed, tc.context)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open = %q, %v; want %v", got, err, tc.want)
			}
			if strings.Contains(err.Error(), "c2VjcmV0") {
				t.Errorf("error %q holds the secret", err)
			}
		})
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	k, err := secretbox.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(k.Text())
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{
		k.Text(),
		base64.RawStdEncoding.EncodeToString(raw),
		base64.URLEncoding.EncodeToString(raw),
		hex.EncodeToString(raw),
		strings.ToUpper(hex.EncodeToString(raw)),
		k.Text() + "\n",
	} {
		got, err := secretbox.ParseKey(text)
		if err != nil || got.ID() != k.ID() {
			t.Errorf("ParseKey(%q) = %v, %v; want id %s", text, got, err, k.ID())
		}
	}
	for _, text := range []string{"", "   ", "not a key at all!", base64.StdEncoding.EncodeToString(raw[:16]), hex.EncodeToString(raw[:31]) + "zz"} {
		_, err := secretbox.ParseKey(text)
		if !errors.Is(err, secretbox.ErrKeyFormat) {
			t.Errorf("ParseKey(%q) = %v, want ErrKeyFormat", text, err)
		}
		if len(text) > 8 && strings.Contains(err.Error(), text) {
			t.Errorf("error %q repeats the key text", err)
		}
	}
}

func TestKeyNeverPrints(t *testing.T) {
	t.Parallel()
	_, k := newBox(t)
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "key", k)
	for _, out := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k), logged.String()} {
		if strings.Contains(out, k.Text()) || strings.Contains(out, k.Text()[:12]) {
			t.Errorf("%q shows the key", out)
		}
		if !strings.Contains(out, k.ID()) {
			t.Errorf("%q does not name the key id", out)
		}
	}
}
