package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReleaseArchive runs .ci/release.sh for linux/amd64 on the commit
// checked out (HEAD) and checks what a user downloads: one archive named
// for the version the toolchain stamped, listed with its SHA-256 in
// SHA256SUMS; inside it one binary, hymical, carrying every transport,
// static, built with -trimpath from that commit, the LICENSE, the README,
// the CHANGELOG, the docs and the configs. The archive is reproducible: Go builds with -trimpath
// are, and the archive carries nothing of the machine or the moment (its
// entries sorted, owned by 0:0 with no names, dated at the commit; gzip
// with no name or time).
func TestReleaseArchive(t *testing.T) {
	needReleaseSwitch(t)
	if testing.Short() {
		t.Skip("builds a release from a fresh clone")
	}
	// Its time goes to go build and gzip in other processes: it runs beside
	// the package's other tests rather than after them.
	t.Parallel()
	for _, tool := range []string{"git", "bash", "sha256sum", "gzip", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	rev := strings.TrimSpace(string(head))

	release := func(out string) {
		t.Helper()
		// The commit read above, not HEAD again: a commit made while the
		// test runs must not change what it checks against.
		if b, err := runInOwnGroup(t, "", []string{"PLATFORMS=linux/amd64"}, "bash", ".ci/release.sh", "-o", out, rev); err != nil {
			t.Fatalf(".ci/release.sh: %v\n%s", err, b)
		}
	}
	out := t.TempDir()
	release(out)

	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(sums))
	if len(fields) != 2 || !strings.HasPrefix(fields[1], "hymical-") || !strings.HasSuffix(fields[1], "-linux-amd64.tar.gz") {
		t.Fatalf("SHA256SUMS lists %q, want one hymical-VERSION-linux-amd64.tar.gz", sums)
	}
	name := fields[1]
	version := strings.TrimSuffix(strings.TrimPrefix(name, "hymical-"), "-linux-amd64.tar.gz")
	archive, err := os.ReadFile(filepath.Join(out, name))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(archive); hex.EncodeToString(sum[:]) != fields[0] {
		t.Errorf("SHA256SUMS says %s for %s, the file hashes to %x", fields[0], name, sum)
	}

	// Unpack it and look at every file.
	dir := t.TempDir()
	top := "hymical-" + version + "-linux-amd64/"
	commitTime, err := exec.Command("git", "log", "-1", "--format=%ct", rev).Output()
	if err != nil {
		t.Fatal(err)
	}
	files := untar(t, archive, dir, strings.TrimSpace(string(commitTime)))
	if !slices.IsSorted(files) {
		t.Errorf("the entries of %s are not sorted: %q", name, files)
	}
	want := []string{"hymical", "LICENSE", "README.md", "CHANGELOG.md", "configs/hymical.service", "configs/sqlite.yaml", "configs/postgres.yaml", "docs/packaging.md", "docs/receiving-node.md"}
	for _, f := range want {
		if !slices.Contains(files, top+f) {
			t.Errorf("%s has no %s%s; it has %q", name, top, f, files)
		}
	}
	for _, f := range files {
		if !strings.HasPrefix(f, top) {
			t.Errorf("%s: %s is outside %s", name, f, top)
		}
		// One binary: the transports are inside hymical.
		if strings.HasPrefix(path.Base(f), "hymical-plugin-") {
			t.Errorf("%s ships %s; the transports are built into hymical (hymical plugin NAME)", name, f)
		}
	}

	for _, bin := range want[:1] {
		path := filepath.Join(dir, top, bin)
		assertStatic(t, path)
		bi, err := buildinfo.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v", bin, err)
			continue
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if bi.Main.Version != version || settings["vcs.revision"] != rev || settings["vcs.modified"] != "false" ||
			settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" {
			t.Errorf("%s: version %s, revision %s (modified %s), -trimpath %s, CGO_ENABLED %s; want %s, %s (false), true, 0",
				bin, bi.Main.Version, settings["vcs.revision"], settings["vcs.modified"], settings["-trimpath"], settings["CGO_ENABLED"], version, rev)
		}
	}
	v, err := exec.Command(filepath.Join(dir, top, "hymical"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(v), "hymical "+version+"+"+rev+" ") {
		t.Errorf("the released hymical version says (%v):\n%s\nwant it to start with hymical %s+%s", err, v, version, rev)
	}
}

// releaseSwitch is the environment variable that turns on the tests that
// build release archives and fresh checkouts. They spend minutes in go
// build on a small machine, which every run of the package's tests paid,
// so a plain go test leaves them out; .ci/run sets it.
const releaseSwitch = "HYMICAL_TEST_RELEASE"

// needReleaseSwitch skips the test unless releaseSwitch is 1, with one
// reason for every such test, so the test command's summary counts them
// under it.
func needReleaseSwitch(t *testing.T) {
	t.Helper()
	if os.Getenv(releaseSwitch) != "1" {
		t.Skipf("%s is not set to 1: release builds and fresh checkouts take minutes (.ci/run sets it)", releaseSwitch)
	}
}

// runInOwnGroup runs a command that starts processes of its own (go
// build, git, gzip) in a process group of its own, in dir ("": this
// package's) with env added to this process's environment, and returns its
// combined output. Killing the command alone would leave those running
// (they were left as orphans when the test was stopped), so the whole
// group is killed when the test ends, or a little before the test
// binary's -timeout would end it with a panic that kills nothing; and
// whatever the command left running in its group goes with it when it
// exits.
func runInOwnGroup(t *testing.T, dir string, env []string, name string, args ...string) ([]byte, error) {
	t.Helper()
	ctx := t.Context()
	if dl, ok := t.Deadline(); ok {
		margin := min(time.Until(dl)/10, time.Minute)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-margin))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A killed command's children may hold the output pipe a moment.
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: its process group was killed as the test's time ran out (%w)", err, ctx.Err())
	}
	return out, err
}

// untar writes a .tar.gz's regular files under dir and returns every
// entry's name, checking that neither the gzip nor the tar headers say
// anything of the machine or the time it was made: no name or time in the
// gzip header, every entry owned by 0:0 without user or group names and
// dated unix (the commit's time).
func untar(t *testing.T, archive []byte, dir, unix string) []string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("the gzip header holds the name %q and the time %s; want neither (gzip -n)", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s is owned by %d:%d (%q:%q), want 0:0 without names", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if got := strconv.FormatInt(h.ModTime.Unix(), 10); got != unix {
			t.Errorf("%s is dated %s, want the commit's time %s", h.Name, got, unix)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// assertStatic fails unless path is an executable ELF file that needs no
// dynamic loader and no shared library.
func assertStatic(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	if fi.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable (%s)", path, fi.Mode())
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	defer f.Close()
	var problems []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			problems = append(problems, "it names a dynamic loader (PT_INTERP)")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		problems = append(problems, fmt.Sprintf("it needs %q", libs))
	}
	if len(problems) > 0 {
		t.Errorf("%s is not static: %s", filepath.Base(path), strings.Join(problems, "; "))
	}
}
