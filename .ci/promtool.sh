#!/usr/bin/env bash
# Checks the shipped Prometheus alerting rules (configs/prometheus) with
# promtool: their syntax (promtool check rules) and their behaviour (promtool
# test rules, every alert firing and quiet on made-up series). promtool comes
# with Debian's prometheus package, installed when missing; the package's own
# service is not wanted, so it is kept from starting. A few seconds.
#
#   .ci/promtool.sh
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "promtool.sh: $*" >&2; }

if ! command -v promtool >/dev/null 2>&1; then
	log "installing promtool (Debian's prometheus package)"
	export DEBIAN_FRONTEND=noninteractive
	policy=/usr/sbin/policy-rc.d
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		trap 'rm -f "$policy"' EXIT
	fi
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends prometheus >&2
fi
command -v promtool >/dev/null 2>&1 || { log "promtool is still missing after the install"; exit 1; }
log "$(promtool --version 2>&1 | head -1)"

promtool check rules configs/prometheus/hymical-alerts.yml
promtool test rules configs/prometheus/hymical-alerts.test.yml
