package transport

import (
	"strings"
	"testing"
)

func TestScrubError(t *testing.T) {
	t.Parallel()
	msg := Message{
		Headers: []Header{
			{Name: "webhook-id", Value: "msg_1234567"},
			{Name: "webhook-timestamp", Value: "1700"},
			{Name: "webhook-signature", Value: "v1,SIGNATURE"},
		},
		Body: []byte(`{"secret":"BODY"}`),
	}
	tests := []struct {
		name string
		text string
		msg  Message
		want string
	}{
		{"nothing quoted", "connection refused", msg, "connection refused"},
		{"a header value", "bad value v1,SIGNATURE", msg, "bad value [header webhook-signature]"},
		{"the body", `rejected {"secret":"BODY"} as too large`, msg, "rejected [body] as too large"},
		{"the id", "duplicate msg_1234567", msg, "duplicate [header webhook-id]"},
		// The rule of redact.Replace: 4 bytes or more anywhere, shorter
		// ones only standing alone.
		{"a 4-byte value", "at 1700 exactly", msg, "at [header webhook-timestamp] exactly"},
		{"a 4-byte value inside a number", "port 17001", msg, "port [header webhook-timestamp]1"},
		{"a short body standing alone", "got {}", Message{Body: []byte("{}")}, "got [body]"},
		{"a short body inside a word", "got x{}y", Message{Body: []byte("{}")}, "got x{}y"},
		{"a body longer than the text", "EOF", msg, "EOF"},
		{"invalid UTF-8 is made safe", "bad \xff byte", msg, "bad \uFFFD byte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ScrubError(tt.text, tt.msg); got != tt.want {
				t.Fatalf("ScrubError(%q) = %q, want %q", tt.text, got, tt.want)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		t.Parallel()
		got := ScrubError(strings.Repeat("x", 3*MaxErrorBytes), msg)
		if len(got) > MaxErrorBytes {
			t.Fatalf("ScrubError kept %d bytes, want at most %d", len(got), MaxErrorBytes)
		}
	})
}
