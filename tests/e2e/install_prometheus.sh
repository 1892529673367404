#!/bin/sh
# Install the Prometheus server and promtool the exporter tests drive (Debian's `prometheus`
# package ships both in /usr/bin). Idempotent: does nothing when they are already there.
# Needs root for apt; without root it only says what to run. Nothing is downloaded at test time.
set -eu

# Under CI a tool that cannot be installed fails the run (the tests needing it would fail
# anyway, with less to say); elsewhere the script only says what to run.
missing() {
    case "${CI:-}" in ""|0|false|no) exit 0 ;; *) echo "${0##*/}: CI is set and this could not be installed" >&2; exit 1 ;; esac
}

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    echo "install_prometheus: $(command -v prometheus) and $(command -v promtool) already installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install_prometheus: prometheus/promtool are missing; as root run: apt-get update && apt-get install -y --no-install-recommends prometheus" >&2
    missing
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_prometheus: no apt-get here; install Prometheus 2.x so that prometheus and promtool are on PATH" >&2
    missing
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
# --no-install-recommends: the node exporter and the web console assets are not needed
apt-get install -y --no-install-recommends prometheus
# the package starts a system service on Debian when an init system runs; the tests start
# their own server on 127.0.0.1 and do not need it
echo "install_prometheus: installed $(prometheus --version 2>&1 | head -n 1)"
