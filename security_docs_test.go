package main

import (
	"net/netip"
	"os"
	"regexp"
	"testing"

	"github.com/hymical/hymical/sdk/netguard"
)

// TestGuardTableIsDocumented holds docs/security.md to the SSRF guard's
// table: every range the guard judges is named there, so operators read
// the rule the plugins apply, not an older one.
func TestGuardTableIsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[netip.Prefix]bool{}
	for _, m := range regexp.MustCompile("`([0-9a-f:.]+/[0-9]+)`").FindAllStringSubmatch(string(doc), -1) {
		if p, err := netip.ParsePrefix(m[1]); err == nil {
			documented[p] = true
		}
	}
	for _, r := range netguard.Ranges() {
		if !documented[r.Prefix] {
			t.Errorf("docs/security.md does not name %s (%s, %s, %v)", r.Prefix, r.Name, r.Source, r.Verdict)
		}
	}
}
