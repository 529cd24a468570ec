#!/usr/bin/env bash
# Checks configs/hymical.service with systemd's own tools, offline (no
# systemd needs to be running): `systemd-analyze verify` must have nothing
# to say about it, and `systemd-analyze security` must rate its sandbox at
# most MAX_EXPOSURE (1.1 today; a setting dropped or weakened raises it).
# systemd-analyze comes with Debian's systemd package, installed without
# its recommends when it is missing.
#
#   .ci/systemd-unit.sh
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "systemd-unit.sh: $*" >&2; }

# systemd-analyze --threshold counts in tenths: 11 is an exposure of 1.1.
MAX_EXPOSURE=11
unit=configs/hymical.service
bin=/usr/local/bin/hymical

if ! command -v systemd-analyze >/dev/null 2>&1; then
	log "installing systemd-analyze (Debian's systemd package)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends systemd >&2
fi

# verify checks that ExecStart's program exists and is executable. Rather
# than install hymical into this machine's /usr/local/bin, a copy of the
# unit starts a freshly built one from a temporary directory; the unit
# itself must still start $bin.
grep -qx "ExecStart=$bin serve --config /etc/hymical/hymical.yaml" "$unit" \
	|| { log "$unit: ExecStart no longer starts $bin serve --config /etc/hymical/hymical.yaml; update this script and docs/packaging.md with it"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/hymical" .
sed "s#^ExecStart=$bin #ExecStart=$dir/hymical #" "$unit" >"$dir/hymical.service"

# verify warns about unknown keys and bad values but exits 0: any output
# at all is a failure.
if ! out=$(systemd-analyze verify "$dir/hymical.service" 2>&1) || [ -n "$out" ]; then
	log "systemd-analyze verify $unit:"
	echo "${out//$dir/configs}" >&2
	exit 1
fi
if ! out=$(systemd-analyze security --offline=yes --threshold="$MAX_EXPOSURE" "$dir/hymical.service" 2>&1); then
	echo "$out" >&2
	log "$unit: the sandbox's exposure rose above $MAX_EXPOSURE tenths; see the lines marked ✗ above"
	exit 1
fi
log "$(systemd-analyze --version | head -1): $unit verifies; $(echo "$out" | tail -1 | sed 's/^→ //')"
