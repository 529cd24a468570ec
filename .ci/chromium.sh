#!/usr/bin/env bash
# Installs Chromium, which the console's browser test (TestConsoleInABrowser)
# drives headless, from Debian's packages when it is missing: chromium and
# chromium-driver. The test talks to the browser over the DevTools protocol
# (chromedp) and needs no driver process; chromium-driver is installed so
# the same image can run WebDriver-based checks. Nothing is started here.
#
#   .ci/chromium.sh
set -euo pipefail

log() { echo "chromium.sh: $*" >&2; }

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)

if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]} from Debian's packages"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq chromium chromium-driver >&2
fi

command -v chromium >/dev/null 2>&1 || { log "chromium is still missing after the install"; exit 1; }
log "$(chromium --version 2>/dev/null || echo 'chromium (version unknown)')"
