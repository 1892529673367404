#!/bin/sh
# Install the browser the end-to-end dashboard test drives (Debian's Chromium at
# /usr/bin/chromium). Idempotent: does nothing when it is already there. Needs root for apt;
# without root it only says what to run. Playwright's own browser download is not used.
set -eu

# Under CI a tool that cannot be installed fails the run (the tests needing it would fail
# anyway, with less to say); elsewhere the script only says what to run.
missing() {
    case "${CI:-}" in ""|0|false|no) exit 0 ;; *) echo "${0##*/}: CI is set and this could not be installed" >&2; exit 1 ;; esac
}

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    echo "install_browser: $CHROMIUM already installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install_browser: $CHROMIUM is missing; as root run: apt-get update && apt-get install -y chromium" >&2
    missing
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_browser: no apt-get here; install Chromium so that $CHROMIUM exists" >&2
    missing
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y chromium
echo "install_browser: installed $($CHROMIUM --version 2>/dev/null || echo chromium)"
