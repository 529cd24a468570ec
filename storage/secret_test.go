package storage_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hymical/hymical/storage"
)

func TestSecretNeverPrintsItsValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value, shows string
	}{
		{"a v1 secret", "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", "whsec_[redacted]"},
		{"a v1a signing key", "whsk_6Xb/dCcHpPea21PS1N9VY/NZW723CEc77N4rJCubMbfVKIDij2HKpMKkioLlX0dRqSKJp4AJ6p9lMicMFs6Kvg==", "whsk_[redacted]"},
		{"something without a known prefix", "c2VjcmV0c2VjcmV0c2VjcmV0", "whsec_[redacted]"},
		{"empty", "", "whsec_[redacted]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := storage.NewSecret(tc.value, nil)
			js, err := json.Marshal(struct{ S []storage.Secret }{[]storage.Secret{s}})
			if err != nil {
				t.Fatal(err)
			}
			var logged bytes.Buffer
			slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "secret", s, "secrets", []storage.Secret{s})
			for _, out := range []string{s.String(), fmt.Sprint(s), fmt.Sprintf("%v %+v %s %q", s, s, s, s), fmt.Sprintf("%#v", s), string(js), logged.String()} {
				if !strings.Contains(out, tc.shows) {
					t.Errorf("%q does not show %q", out, tc.shows)
				}
				if body := strings.TrimPrefix(strings.TrimPrefix(tc.value, "whsk_"), "whsec_"); body != "" && strings.Contains(out, body[:12]) {
					t.Errorf("%q holds the secret's value", out)
				}
			}
			if s.Reveal() != tc.value {
				t.Errorf("Reveal = %q, want the value", s.Reveal())
			}
		})
	}
}

func TestHeaderNeverPrintsItsValue(t *testing.T) {
	t.Parallel()
	const value = "Bearer tok-9d2e1f"
	h := storage.NewHeader("Authorization", value)
	js, err := json.Marshal(struct{ H []storage.Header }{[]storage.Header{h}})
	if err != nil {
		t.Fatal(err)
	}
	var logged, text bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "header", h, "headers", []storage.Header{h})
	slog.New(slog.NewTextHandler(&text, nil)).Info("x", "header", h, "headers", []storage.Header{h})
	for _, out := range []string{h.String(), fmt.Sprintf("%v %+v %s %q %#v", h, h, h, h, h), string(js), logged.String(), text.String()} {
		if strings.Contains(out, "tok-9d2e1f") {
			t.Errorf("%q holds the header's value", out)
		}
		if !strings.Contains(out, "Authorization") {
			t.Errorf("%q does not name the header", out)
		}
	}
	if h.Reveal() != value {
		t.Errorf("Reveal = %q, want the value", h.Reveal())
	}
}
