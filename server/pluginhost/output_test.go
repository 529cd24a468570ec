package pluginhost

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/hymical/hymical/internal/syncbuf"
)

func TestLineLoggerBoundsEveryLine(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", MaxOutputLine)
	type rec struct {
		Line    string
		Dropped int64 `json:"dropped_bytes"`
	}
	tests := []struct {
		name   string
		chunks []string
		want   []rec
	}{
		{"lines split across writes", []string{"first li", "ne\nsecond line\r\n", "\n"}, []rec{{"first line", 0}, {"second line", 0}}},
		{"a line of exactly the bound is kept whole", []string{long + "\nnext\n"}, []rec{{long, 0}, {"next", 0}}},
		{"a longer line is cut, and says how much went", []string{long + "yyy", "yy\nnext\n"}, []rec{{long + droppedMarker(5), 5}, {"next", 0}}},
		{"megabytes in one write", []string{long + strings.Repeat("z", 3<<20) + "\nnext\n"}, []rec{{long + droppedMarker(3<<20), 3 << 20}, {"next", 0}}},
		{"a line waits for its newline", []string{"no newline yet"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf syncbuf.Buffer
			w := newLineLogger(slog.New(slog.NewJSONHandler(&buf, nil)), nil)
			for _, c := range tt.chunks {
				if n, err := w.Write([]byte(c)); n != len(c) || err != nil {
					t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(c))
				}
			}
			var got []rec
			for line := range strings.Lines(buf.String()) {
				var r rec
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				got = append(got, r)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("logged %d lines, want %d:\n%.400s", len(got), len(tt.want), buf.String())
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("line %d = %.80q (%d dropped), want %.80q (%d dropped)", i, got[i].Line, got[i].Dropped, tt.want[i].Line, tt.want[i].Dropped)
				}
			}
			if len(w.b.buf) > MaxOutputLine {
				t.Errorf("holding %d bytes, more than MaxOutputLine", len(w.b.buf))
			}
		})
	}
}
