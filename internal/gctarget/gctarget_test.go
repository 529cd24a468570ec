package gctarget

import (
	"runtime/debug"
	"strings"
	"testing"
)

// The process runs the collector at Serve unless GOGC is set, and the
// banner line says which.
func TestApply(t *testing.T) {
	// The collector's target is the process's: put back the test binary's.
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	tests := []struct {
		name     string
		gogc     string
		wantGC   int
		wantLine string
	}{
		{"GOGC unset", "", Serve, "GOGC=400, serve's default"},
		{"GOGC set", "150", 100, "GOGC=150, from the environment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			line := Apply(func(k string) string {
				if k == "GOGC" {
					return tt.gogc
				}
				return ""
			})
			if got := debug.SetGCPercent(100); got != tt.wantGC {
				t.Errorf("collector target %d, want %d", got, tt.wantGC)
			}
			if !strings.Contains(line, tt.wantLine) {
				t.Errorf("banner line %q does not say %q", line, tt.wantLine)
			}
		})
	}
}
