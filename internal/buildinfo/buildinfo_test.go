package buildinfo

import (
	"runtime/debug"
	"testing"
	"time"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	const rev = "149943f1272193edfe392133790debb11637d761"
	for _, tc := range []struct {
		name     string
		bi       *debug.BuildInfo
		ok       bool
		want     Info
		identity string
	}{
		{
			name: "a build from a clean checkout",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/hymical/hymical", Version: "v0.0.0-20261203141300-149943f12721"},
				Settings: []debug.BuildSetting{{Key: "-buildmode", Value: "exe"}, {Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
					{Key: "vcs.time", Value: "2026-12-03T14:13:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			ok:       true,
			want:     Info{Version: "v0.0.0-20261203141300-149943f12721", Revision: rev, Time: time.Date(2026, 12, 3, 14, 13, 0, 0, time.UTC), GoVersion: "go1.26.8"},
			identity: "v0.0.0-20261203141300-149943f12721+" + rev,
		},
		{
			name: "a build from a checkout with changes",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3+dirty"},
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-12-03T15:13:00+01:00"}, {Key: "vcs.modified", Value: "true"}}},
			ok:       true,
			want:     Info{Version: "v1.2.3+dirty", Revision: rev, Time: time.Date(2026, 12, 3, 14, 13, 0, 0, time.UTC), Modified: true, GoVersion: "go1.26.8"},
			identity: "v1.2.3+dirty+" + rev,
		},
		{
			name:     "a build that recorded no VCS information",
			bi:       &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/hymical/hymical", Version: "(devel)"}},
			ok:       true,
			want:     Info{Version: "(devel)", GoVersion: "go1.26.8"},
			identity: "(devel)",
		},
		{
			name:     "an empty version and a time that does not parse",
			bi:       &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.time", Value: "yesterday"}}},
			ok:       true,
			want:     Info{Version: "(devel)"},
			identity: "(devel)",
		},
		{name: "a binary without build information", ok: false, want: Info{Version: "unknown"}, identity: "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := fromBuildInfo(tc.bi, tc.ok)
			if got != tc.want {
				t.Errorf("fromBuildInfo = %+v, want %+v", got, tc.want)
			}
			if got.String() != tc.identity {
				t.Errorf("String() = %q, want %q", got.String(), tc.identity)
			}
		})
	}
}

// TestReadIsThisBinarysBuild: Read is what ReadBuildInfo says, every time.
func TestReadIsThisBinarysBuild(t *testing.T) {
	t.Parallel()
	want := fromBuildInfo(debug.ReadBuildInfo())
	if got := Read(); got != want || Read() != got || String() != want.String() {
		t.Fatalf("Read() = %+v, want %+v", got, want)
	}
	if want.GoVersion == "" || want.Version == "" {
		t.Fatalf("a test binary has build information, got %+v", want)
	}
}
