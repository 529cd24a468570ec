package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/buildinfo"
)

// TestVersionPrintsTheBuild checks what version prints for builds with and
// without VCS information, and that the first line is the identity the
// worker registry records (fleet.NewWorker takes it from buildinfo too).
func TestVersionPrintsTheBuild(t *testing.T) {
	t.Parallel()
	rev := "149943f1272193edfe392133790debb11637d761"
	var b bytes.Buffer
	stamped := buildinfo.Info{Version: "v0.0.0-20261203141300-149943f12721+dirty", Revision: rev, Modified: true,
		Time: time.Date(2026, 12, 3, 14, 13, 0, 0, time.UTC), GoVersion: "go1.26.8"}
	writeVersion(&b, stamped, stamped.String(), 6)
	want := `hymical v0.0.0-20261203141300-149943f12721+dirty+149943f1272193edfe392133790debb11637d761 (schema version 6)
version   v0.0.0-20261203141300-149943f12721+dirty
revision  149943f1272193edfe392133790debb11637d761, with uncommitted changes
built     2026-12-03T14:13:00Z (the revision's commit time; Go records no build clock)
go        go1.26.8
`
	if b.String() != want {
		t.Errorf("a stamped build:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	writeVersion(&b, buildinfo.Info{Version: "(devel)", GoVersion: "go1.26.8"}, "(devel)", 6)
	for _, line := range []string{"hymical (devel) (schema version 6)\n", "revision  unknown: the build recorded none", "built     unknown"} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("a build without VCS information does not say %q:\n%s", line, b.String())
		}
	}

	// hymical version and hymical --version are one command.
	var v1, v2 bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &v1, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"--version"}, &v2, io.Discard); err != nil {
		t.Fatal(err)
	}
	if v1.String() != v2.String() || !strings.HasPrefix(v1.String(), "hymical "+buildinfo.String()+" (schema version ") {
		t.Errorf("version:\n%s\n--version:\n%s", v1.String(), v2.String())
	}
}

// TestVersionOfABuildFromACheckout builds hymical the way a user does, go
// build in a git checkout, and checks it prints the checkout's revision and
// its commit time. The checkout is this tree as it is now, committed in a
// fresh repository: the toolchain records nothing in a linked worktree
// (golang/go#58218), and this machine's GOFLAGS may say -buildvcs=false,
// which the -buildvcs=true below overrides.
func TestVersionOfABuildFromACheckout(t *testing.T) {
	needReleaseSwitch(t)
	if testing.Short() {
		t.Skip("builds hymical in a fresh checkout")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	src := t.TempDir()
	files, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		data, err := os.ReadFile(name)
		if os.IsNotExist(err) {
			continue // deleted, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const commitTime = "2026-01-02T03:04:05Z"
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE="+commitTime, "GIT_COMMITTER_DATE="+commitTime)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "the tree under test")
	rev := git("rev-parse", "HEAD")

	bin := filepath.Join(t.TempDir(), "hymical")
	if out, err := runInOwnGroup(t, src, nil, "go", "build", "-buildvcs=true", "-o", bin, "."); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("hymical version: %v\n%s", err, out)
	}
	version := "v0.0.0-20260102030405-" + rev[:12]
	for _, line := range []string{
		"hymical " + version + "+" + rev + " (schema version ",
		"\nversion   " + version + "\n",
		"\nrevision  " + rev + "\n",
		"\nbuilt     " + commitTime + " (the revision's commit time",
	} {
		if !strings.Contains(string(out), line) {
			t.Errorf("hymical version does not say %q:\n%s", line, out)
		}
	}
	t.Logf("hymical version:\n%s", out)
}
