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

// Names an operator adds (webhook.mask_query_params) are hidden exactly,
// case-insensitively, in URLs, settings and the secrets TextFor looks for,
// on top of the built-in ones; setting them again replaces them. Not
// parallel: the names are process-wide.
func TestSetSecretNames(t *testing.T) {
	t.Cleanup(func() { SetSecretNames(nil) })
	raw := "https://h.example/in?Tenant_Key2=K-1111&apikey_ref=x&customer=C-2222&state=ok"
	tests := []struct {
		name   string
		names  []string
		masked string
		parts  []string
	}{
		{"built-in only", nil,
			"https://h.example/in?Tenant_Key2=[redacted]&apikey_ref=[redacted]&customer=C-2222&state=ok",
			[]string{"query:Tenant_Key2", "query:apikey_ref"}},
		{"an added name, any case", []string{" CUSTOMER "},
			"https://h.example/in?Tenant_Key2=[redacted]&apikey_ref=[redacted]&customer=[redacted]&state=ok",
			[]string{"query:Tenant_Key2", "query:apikey_ref", "query:customer"}},
		{"an added name matches whole names only", []string{"cust", "stat"},
			"https://h.example/in?Tenant_Key2=[redacted]&apikey_ref=[redacted]&customer=C-2222&state=ok",
			[]string{"query:Tenant_Key2", "query:apikey_ref"}},
		{"empty entries are ignored", []string{"", "  "},
			"https://h.example/in?Tenant_Key2=[redacted]&apikey_ref=[redacted]&customer=C-2222&state=ok",
			[]string{"query:Tenant_Key2", "query:apikey_ref"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			SetSecretNames(tt.names)
			masked, parts := URLParts(raw)
			if masked != tt.masked || !slices.Equal(parts, tt.parts) {
				t.Errorf("URLParts = %q, %q; want %q, %q", masked, parts, tt.masked, tt.parts)
			}
			hidden := slices.Contains(tt.parts, "query:customer")
			if got := HoldsMask(tt.masked); !got {
				t.Errorf("HoldsMask(%q) = false, want true", tt.masked)
			}
			if got := Map(map[string]string{"customer": "C-2222"})["customer"] == Mask; got != hidden {
				t.Errorf("Map hides the setting customer: %v, want %v", got, hidden)
			}
			if got := slices.Contains(SecretsOf(raw, nil), "C-2222"); got != hidden {
				t.Errorf("SecretsOf lists C-2222: %v, want %v", got, hidden)
			}
		})
	}
}
