package redact

import "testing"

func TestValue(t *testing.T) {
	tests := []struct{ key, in, want string }{
		{"url", "postgres://u:s3cret@db:5432/x?sslmode=disable", "postgres://u:[redacted]@db:5432/x?sslmode=disable"},
		{"url", "redis://:s3cret@r:6379/0", "redis://:[redacted]@r:6379/0"},
		{"url", "nats://u@n:4222", "nats://u@n:4222"},
		{"url", "https://h/x?token=s3cret&a=1", "https://h/x?a=1&token=[redacted]"},
		{"api_key", "s3cret", "[redacted]"},
		{"Password", "s3cret", "[redacted]"},
		{"subject", "forms.submissions", "forms.submissions"},
		{"url", "redis://u:s3cret@[bad", "redis://[redacted]@[bad"},
		{"token", "", ""},
	}
	for _, tc := range tests {
		if got := Value(tc.key, tc.in); got != tc.want {
			t.Errorf("Value(%q, %q) = %q, want %q", tc.key, tc.in, got, tc.want)
		}
	}
}

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"api_token": true, "client_secret": true, "Password": true, "signing_key": true, "APIKEY": true,
		"db_passwd": true, "credentials_file": true, "url": false, "region": false, "timeout": false,
	} {
		if got := SecretName(name); got != want {
			t.Errorf("SecretName(%q) = %v, want %v", name, got, want)
		}
	}
}
