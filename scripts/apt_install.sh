#!/usr/bin/env bash
# Install Debian packages for scripts/setup.sh and .ci/run: `apt-get update`, then
# `apt-get install` of the packages given, as root or through sudo.
# Another apt-get (unattended-upgrades, a second setup) may hold dpkg's lock: every call
# waits for it, saying so, for at most APT_LOCK_TIMEOUT_S seconds (300) instead of giving up
# at once; when apt still fails, its own output is shown and its exit code returned.
# Usage: scripts/apt_install.sh PACKAGE...
set -euo pipefail

if [ $# -eq 0 ]; then
  echo "usage: scripts/apt_install.sh PACKAGE..." >&2
  exit 2
fi
wait_s=${APT_LOCK_TIMEOUT_S:-300}
if [ "$(id -u)" = 0 ]; then sudo=(); else sudo=(sudo); fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT

apt_get() {
  # apt's output is kept for when it fails: on success it is noise, on failure the reason.
  local code=0
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get -o "DPkg::Lock::Timeout=$wait_s" "$@" >"$out" 2>&1 || code=$?
  if [ "$code" != 0 ]; then
    echo "setup: apt-get $1 failed (exit $code):" >&2
    cat "$out" >&2
    exit "$code"
  fi
}

echo "setup: installing system packages: $*" >&2
echo "setup: waiting for another apt-get… (if one holds the lock; at most ${wait_s} s)" >&2
apt_get update -q
apt_get install -y -q --no-install-recommends "$@"
