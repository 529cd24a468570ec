#!/usr/bin/env bash
# Installs Chromium, which the console's browser test (TestConsoleInABrowser)
# drives headless over the DevTools protocol (chromedp), from Debian's
# packages when it is missing. Only the browser and what it depends on: the
# test needs no WebDriver process (chromium-driver), and none of Chromium's
# recommends (udev, upower, a notification daemon, printer set-up, fonts
# beyond the DejaVu the base system has), which would also pull in and
# upgrade systemd, udev and avahi on the machine. On Debian 12 that is 25
# packages instead of 115. Nothing is started here.
#
#   .ci/chromium.sh
set -euo pipefail

log() { echo "chromium.sh: $*" >&2; }

if ! command -v chromium >/dev/null 2>&1; then
	log "installing chromium from Debian's packages"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends chromium >&2
fi

command -v chromium >/dev/null 2>&1 || { log "chromium is still missing after the install"; exit 1; }
log "$(chromium --version 2>/dev/null || echo 'chromium (version unknown)')"
