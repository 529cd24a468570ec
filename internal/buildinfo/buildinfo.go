// Package buildinfo says which build of hymical is running: the main
// module's version, the VCS revision it was built from, that revision's
// commit time, and whether the checkout had uncommitted changes, as the Go
// toolchain recorded them in the binary. It reads runtime/debug.ReadBuildInfo
// once. String is the one identity of a build, for the version command, the
// worker registry's one-build check, logs and telemetry.
//
// It is a primitive: it imports only the standard library, and any layer may
// use it.
//
// The toolchain records the revision only for `go build` (and `go install`)
// of a package inside a git checkout, with -buildvcs on (the default,
// "auto"). It records nothing with -buildvcs=false (in GOFLAGS, too), for a
// test binary, or in a linked git worktree, whose .git is a file the
// toolchain does not recognise (golang/go#58218): such a build reports its
// revision as unknown.
package buildinfo

import (
	"runtime/debug"
	"sync"
	"time"
)

// Info describes one build.
type Info struct {
	// Version is the main module's version: a release tag, a
	// pseudo-version the toolchain derives from the commit (with "+dirty"
	// when the checkout had changes), or "(devel)" when it recorded none.
	Version string
	// Revision is the full VCS revision (a git commit hash) the binary was
	// built from; "" when the build recorded none.
	Revision string
	// Time is the commit time of Revision, which stands for the build
	// time: Go records no clock of the build itself, so two builds of one
	// commit carry the same time. Zero when the build recorded none.
	Time time.Time
	// Modified is true when the checkout had uncommitted changes.
	Modified bool
	// GoVersion is the toolchain that built the binary, e.g. go1.26.8.
	GoVersion string
}

// Read returns this binary's build, read once.
func Read() Info { return read() }

var read = sync.OnceValue(func() Info { return fromBuildInfo(debug.ReadBuildInfo()) })

// String is this binary's identity, Read().String().
func String() string { return Read().String() }

// String identifies the build: its version, then "+" and the revision
// when the build recorded one, e.g.
// "v0.0.0-20261203141300-149943f12721+149943f1272193edfe392133790debb11637d761".
// Two binaries with the same String were built from the same source.
func (i Info) String() string {
	if i.Revision == "" {
		return i.Version
	}
	return i.Version + "+" + i.Revision
}

// fromBuildInfo reads what ReadBuildInfo returned.
func fromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	if !ok || bi == nil {
		return Info{Version: "unknown"}
	}
	info := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			// A time that does not parse is left out rather than guessed.
			if t, err := time.Parse(time.RFC3339Nano, s.Value); err == nil {
				info.Time = t.UTC()
			}
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}
