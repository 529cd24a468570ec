#!/usr/bin/env bash
# Builds the binaries a release ships into OUT_DIR: hymical and every
# transport plugin under plugins/ as hymical-plugin-NAME, side by side, which
# is where `hymical serve` looks for them when plugins.dir is empty. The
# release archives (.ci/release.sh) and the container image (Dockerfile) are
# both built by this one script, so they cannot drift apart.
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
for main in plugins/*/main.go; do
	dir=$(dirname "$main")
	go build "${flags[@]}" -o "$out/hymical-plugin-$(basename "$dir")" "./$dir"
done
