#!/usr/bin/env bash
# Builds the binary a release ships into OUT_DIR: hymical, one file that
# carries every transport under plugins/ and runs each as a child process of
# itself (`hymical plugin NAME`). The standalone hymical-plugin-NAME builds
# are no longer shipped: a user who wants one (a newer or patched transport)
# builds it with go build ./plugins/NAME and puts it in plugins.dir, where it
# overrides the built-in. The release archives (.ci/release.sh) and the
# container image (Dockerfile) are both built by this one script, so they
# cannot drift apart.
#
#   GOOS=linux GOARCH=arm64 .ci/build.sh OUT_DIR
#
# Every binary is static (CGO_ENABLED=0: the SQLite driver is pure Go),
# carries no paths of the machine that built it (-trimpath) and no symbol
# table or DWARF (-s -w; stack traces keep their function names and lines).
#
# The version is the one the Go toolchain stamps from git: run it in a git
# checkout (not a linked worktree, whose .git file the toolchain does not
# read, golang/go#58218), and a commit tagged v1.2.3 builds as v1.2.3, any
# other commit as a pseudo-version, with +dirty for uncommitted changes.
# -buildvcs=true overrides a -buildvcs=false in GOFLAGS. internal/buildinfo
# reads it back for `hymical version`; there is no -ldflags -X variable.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: .ci/build.sh OUT_DIR (GOOS and GOARCH from the environment)" >&2
	exit 2
fi
out=$1
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)

export CGO_ENABLED=0
flags=(-trimpath -buildvcs=true -ldflags=-s\ -w)

go build "${flags[@]}" -o "$out/hymical" .
