package pluginkit

import (
	"strings"
	"testing"

	"github.com/hymical/hymical/sdk/transport"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		text    string
		secrets []string
		want    string
	}{
		{"no secrets", "dial amqp://u:pw@h: refused", nil, "dial amqp://u:pw@h: refused"},
		{"one secret, twice", "pw then pw", []string{"pw"}, "[redacted] then [redacted]"},
		{"an empty secret is skipped", "text", []string{""}, "text"},
		{"several", "user tok and pass", []string{"tok", "pass"}, "user [redacted] and [redacted]"},
		{"an escaped form too", "p@ss or p%40ss", []string{"p@ss", "p%40ss"}, "[redacted] or [redacted]"},
		{"the escaped forms unasked", "p@ss w/rd, p%40ss+w%2Frd, p@ss%20w%2Frd", []string{"p@ss w/rd"}, "[redacted], [redacted], [redacted]"},
		{"a secret inside another", "abc and abcdef", []string{"abc", "abcdef"}, "[redacted] and [redacted]"},
		{"absent", "nothing here", []string{"secret"}, "nothing here"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Redact(tt.text, tt.secrets...); got != tt.want {
				t.Fatalf("Redact(%q, %q) = %q, want %q", tt.text, tt.secrets, got, tt.want)
			}
		})
	}
}

func TestScrubMessage(t *testing.T) {
	t.Parallel()
	msg := transport.Message{
		Headers: []transport.Header{
			{Name: "webhook-id", Value: "msg_1234567"},
			{Name: "webhook-timestamp", Value: "1700"},
			{Name: "webhook-signature", Value: "v1,SIGNATURE"},
		},
		Body: []byte(`{"secret":"BODY"}`),
	}
	tests := []struct {
		name string
		text string
		msg  transport.Message
		want string
	}{
		{"nothing quoted", "connection refused", msg, "connection refused"},
		{"a header value", "bad value v1,SIGNATURE", msg, "bad value [header webhook-signature]"},
		{"the body", `rejected {"secret":"BODY"} as too large`, msg, "rejected [body] as too large"},
		{"values under 8 bytes stay", "at 1700 exactly", msg, "at 1700 exactly"},
		{"the id", "duplicate msg_1234567", msg, "duplicate [header webhook-id]"},
		{"a short body stays", "got {}", transport.Message{Body: []byte("{}")}, "got {}"},
		{"invalid UTF-8 is made safe", "bad \xff byte", msg, "bad \uFFFD byte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ScrubMessage(tt.text, tt.msg); got != tt.want {
				t.Fatalf("ScrubMessage(%q) = %q, want %q", tt.text, got, tt.want)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		t.Parallel()
		got := ScrubMessage(strings.Repeat("x", 3*transport.MaxErrorBytes), msg)
		if len(got) > transport.MaxErrorBytes {
			t.Fatalf("ScrubMessage kept %d bytes, want at most %d", len(got), transport.MaxErrorBytes)
		}
	})
}
