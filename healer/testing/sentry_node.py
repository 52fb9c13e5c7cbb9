"""The real ``@sentry/node`` from npm, pinned, installed once into a cache directory.

The Node SDK end-to-end tests (tests/context/test_sentry_node_e2e.py) run it in a Node
subprocess; ``make setup-test`` pre-installs it so they need no network::

    python -m healer.testing.sentry_node [--quiet]

installs the pin when it is missing and never fails: without node, or with a registry npm
cannot reach, it says why (the tests then skip, saying the same). The directory is
``$HEALER_NPM_CACHE``, else ``<repo>/.cache/npm-sentry`` (gitignored).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PIN = "10.78.0"  # @sentry/node; 10.x supports node >= 18 (11.x needs >= 20.19)
MIN_NODE = 18
ENV = "HEALER_NPM_CACHE"
INSTALL_TIMEOUT_S = 150.0
# What npm says when the registry is out of reach (as opposed to a broken install).
_NETWORK = re.compile(r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|"
                      r"ENETUNREACH|ESOCKETTIMEDOUT|ERR_SOCKET_TIMEOUT|npm error network|"
                      r"code E50[234]|self.signed certificate|UNABLE_TO_GET_ISSUER_CERT")


class Unavailable(Exception):
    """No node, or npm cannot reach the registry: a reason to skip, not a failure."""


@dataclass(frozen=True)
class NodeSdk:
    node: str  # the node executable
    module: Path  # .../node_modules/@sentry/node, for require()
    version: str


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    given = env.get(ENV, "").strip()
    if given:
        return Path(given).expanduser().resolve()
    return Path(__file__).resolve().parents[2] / ".cache" / "npm-sentry"


def installed_version(prefix: Path) -> str | None:
    try:
        meta = json.loads((prefix / "node_modules" / "@sentry" / "node" / "package.json")
                          .read_text())
    except (OSError, ValueError):
        return None
    version = meta.get("version") if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


def node_executable() -> str:
    node = shutil.which("node")
    if node is None:
        raise Unavailable("node is not installed (the Node SDK tests need node and npm)")
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30,
                             check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise Unavailable(f"node does not run: {exc}") from None
    major = re.match(r"v?(\d+)", out)
    if major is None or int(major.group(1)) < MIN_NODE:
        raise Unavailable(f"node {out or '?'} is older than @sentry/node {PIN} supports "
                          f"(>= {MIN_NODE})")
    return node


def ensure(prefix: Path | None = None, *, timeout: float = INSTALL_TIMEOUT_S) -> NodeSdk:
    """``@sentry/node@PIN`` under ``prefix`` (installed if missing, under a lock so parallel
    runs install once). Raises ``Unavailable`` to skip, ``RuntimeError`` if npm failed for
    another reason than the network."""
    node = node_executable()
    prefix = prefix or cache_dir()
    module = prefix / "node_modules" / "@sentry" / "node"
    if installed_version(prefix) == PIN:
        return NodeSdk(node, module, PIN)
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable(f"npm is not installed, and @sentry/node {PIN} is not in {prefix}")
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / f".{prefix.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed_version(prefix) != PIN:
            _npm_install(npm, prefix, timeout)
    got = installed_version(prefix)
    if got != PIN:
        raise RuntimeError(f"npm installed @sentry/node {got} into {prefix}, not {PIN}")
    return NodeSdk(node, module, PIN)


def _npm_install(npm: str, prefix: Path, timeout: float) -> None:
    argv = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
            "--loglevel=error", "--prefer-offline", "--fetch-retries=1",
            "--fetch-retry-mintimeout=1000", "--fetch-retry-maxtimeout=5000",
            "--fetch-timeout=30000", f"@sentry/node@{PIN}"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"npm install @sentry/node@{PIN} did not finish within {timeout:g} s "
                          "(registry unreachable or too slow)") from None
    if done.returncode == 0:
        return
    text = f"{done.stderr}\n{done.stdout}"
    if _NETWORK.search(text):
        first = next((ln for ln in text.splitlines() if "network request" in ln or "errno" in ln
                      or "code E" in ln), text.strip().splitlines()[0] if text.strip() else "")
        raise Unavailable(f"npm cannot reach the registry to install @sentry/node@{PIN}: "
                          f"{first.removeprefix('npm error').strip()[:300]}")
    raise RuntimeError(f"npm install @sentry/node@{PIN} failed (exit {done.returncode}):\n"
                       f"{text.strip()[-2000:]}")


def main(argv: list[str]) -> int:
    quiet = "--quiet" in argv or "-q" in argv
    try:
        sdk = ensure()
    except Unavailable as exc:
        print(f"setup: @sentry/node not installed ({exc}); its tests will skip", file=sys.stderr)
    except (RuntimeError, OSError) as exc:
        print(f"setup: @sentry/node not installed: {exc}", file=sys.stderr)
    else:
        if not quiet:
            print(f"@sentry/node {sdk.version} in {sdk.module}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
