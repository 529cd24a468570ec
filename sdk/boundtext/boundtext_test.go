package boundtext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBound(t *testing.T) {
	tests := []struct {
		name, in string
		max      int
		want     string
	}{
		{"short text is kept", "connection refused", 64, "connection refused"},
		{"NUL bytes are dropped", "a\x00b", 64, "ab"},
		{"invalid UTF-8 is replaced", "a\xffb", 64, "a\uFFFDb"},
		{"long text is cut with an ellipsis", strings.Repeat("x", 20), 10, strings.Repeat("x", 7) + "…"},
		{"a cut never splits a rune", strings.Repeat("é", 10), 10, strings.Repeat("é", 3) + "…"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Bound(tc.in, tc.max)
			if got != tc.want {
				t.Fatalf("Bound(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
			if len(got) > tc.max || !utf8.ValidString(got) {
				t.Fatalf("Bound result %q is over %d bytes or invalid", got, tc.max)
			}
		})
	}
}
