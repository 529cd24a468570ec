package redact

import (
	"slices"
	"testing"
)

// The common secret parameter names beyond the first list: an Azure
// Functions key (code), auth and JWT tokens, short password names,
// hashes and HMACs, session ids, and signature variants. Each is hidden in
// a URL's query and recognised by HoldsMask, while ordinary names that
// merely contain them stay shown.
func TestCommonSecretParameterNames(t *testing.T) {
	tests := []struct {
		name   string
		secret bool
	}{
		{"code", true}, {"CODE", true},
		{"auth", true}, {"x-auth", true}, {"auth_code", true}, {"Authorization", true},
		{"jwt", true}, {"id_jwt", true},
		{"pass", true}, {"pw", true}, {"pwd", true}, {"db_pw", true}, {"admin.pass", true},
		{"hash", true}, {"pw_hash", true}, {"hmac", true}, {"x-hmac-sha256", true},
		{"session", true}, {"session_id", true}, {"sessionId", true}, {"SESSID", true}, {"JSESSIONID", true}, {"PHPSESSID", true},
		{"sig", true}, {"x-sig", true}, {"sig_v1", true}, {"signature", true}, {"x-signature", true},
		{"X-Hub-Signature-256", true}, {"webhook_signature", true},
		// Names that hold them only as a part of a word, or "code" as a
		// word of another name, are not secrets.
		{"zip_code", false}, {"error_code", false}, {"country-code", false}, {"encode", false},
		{"author", false}, {"oauth_provider", false}, {"passenger", false}, {"bypass", false},
		{"hashtag", false}, {"sessions", false}, {"design", false}, {"signup", false},
		{"page", false}, {"x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SecretName(tt.name); got != tt.secret {
				t.Errorf("SecretName(%q) = %v, want %v", tt.name, got, tt.secret)
			}
			raw := "https://fn.example.net/api/hook?" + tt.name + "=S3CRET-VALUE&page=2"
			masked, parts := URLParts(raw)
			want, wantParts := raw, []string(nil)
			if tt.secret {
				want = "https://fn.example.net/api/hook?" + tt.name + "=" + Mask + "&page=2"
				wantParts = []string{PartQuery + tt.name}
			}
			if masked != want || !slices.Equal(parts, wantParts) {
				t.Errorf("URLParts(%q) = %q, %q; want %q, %q", raw, masked, parts, want, wantParts)
			}
			if got := HoldsMask(want); got != tt.secret {
				t.Errorf("HoldsMask(%q) = %v, want %v", want, got, tt.secret)
			}
		})
	}
}
