#!/usr/bin/env bash
# Builds the release archives of one commit: for each platform a
# hymical-VERSION-OS-ARCH.tar.gz holding the one static binary hymical (as
# .ci/build.sh builds it, every shipped transport inside), LICENSE,
# README.md, CHANGELOG.md, docs/ and configs/, and a SHA256SUMS over the
# archives.
#
#   .ci/release.sh [-o DIR] [REF]      e.g. .ci/release.sh v1.2.0
#
# REF is a tag, branch or commit of this repository (default HEAD); DIR is
# where the archives go (default dist/). PLATFORMS overrides the platform
# list, e.g. PLATFORMS="linux/amd64" for a quick local build.
#
# It builds from a fresh clone of REF in a temporary directory, never from
# the working tree: uncommitted changes cannot slip into a release, and the
# Go toolchain can stamp the version from git (it cannot in a linked
# worktree). The version is therefore the one the toolchain derives, the
# one `hymical version` prints: a commit tagged v1.2.0 is v1.2.0, any other
# commit a pseudo-version such as v0.0.0-20260102030405-0123456789ab. To cut
# a release, tag first (sdk/v1.2.0, then v1.2.0: docs/packaging.md), then
# run this with the tag.
set -euo pipefail

log() { echo "release.sh: $*" >&2; }
die() { log "$*"; exit 1; }

out=dist
while getopts "o:h" opt; do
	case $opt in
	o) out=$OPTARG ;;
	*) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -le 1 ] || die "one REF at most, got $*"
ref=${1:-HEAD}
platforms=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
commit=$(git -C "$repo" rev-parse --verify --quiet "$ref^{commit}") \
	|| die "$ref is not a commit, branch or tag of $repo (to release a new version, tag it first: git tag -a v1.2.0)"
mkdir -p "$out"
out=$(cd "$out" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/hymical-release.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS

# --shared borrows the object store, so any commit of it can be checked
# out, and takes the tags along.
git clone --quiet --shared --no-checkout "$repo" "$work/src"
git -C "$work/src" -c advice.detachedHead=false checkout --quiet "$commit"

version=""
sums=()
for platform in $platforms; do
	goos=${platform%/*}
	goarch=${platform#*/}
	bin="$work/bin-$goos-$goarch"
	log "building $goos/$goarch"
	GOOS=$goos GOARCH=$goarch "$work/src/.ci/build.sh" "$bin"

	# The version the toolchain stamped, read from the binary itself so
	# that the archive's name and `hymical version` agree.
	v=$(go version -m "$bin/hymical" | awk '$1 == "mod" { print $3 }')
	[ -n "$v" ] || die "no version stamped in $bin/hymical"
	case $v in
	"(devel)" | *+dirty) die "$bin/hymical is stamped $v, not a clean commit's version" ;;
	esac
	[ -z "$version" ] || [ "$v" = "$version" ] || die "$goos/$goarch stamped $v, the first platform $version"
	version=$v

	name="hymical-$version-$goos-$goarch"
	stage="$work/stage/$name"
	mkdir -p "$stage"
	cp "$bin"/* "$stage/"
	cp -R "$work/src/LICENSE" "$work/src/README.md" "$work/src/CHANGELOG.md" "$work/src/configs" "$work/src/docs" "$stage/"
	# Owner, group and times fixed, entries sorted, gzip without a name or
	# time: the same commit gives the same archive bytes on any machine.
	mtime=$(git -C "$work/src" log -1 --format=%cI)
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" \
		-C "$work/stage" -cf - "$name" | gzip -9 -n >"$out/$name.tar.gz"
	sums+=("$name.tar.gz")
done

(cd "$out" && sha256sum "${sums[@]}" >SHA256SUMS)
log "hymical $version ($commit) in $out, $((SECONDS - start)) s:"
(cd "$out" && ls -l "${sums[@]}" SHA256SUMS >&2)
