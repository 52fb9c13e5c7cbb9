#!/usr/bin/env python3
"""Claude Code hook: tell healer a session started or ended. Never blocks or fails a session.

usage (from hooks/hooks.json; Claude Code passes the hook's JSON on stdin):
  healer_session.py start      SessionStart → POST /api/v1/session/start
  healer_session.py end        SessionEnd   → POST /api/v1/session/{play_id}/finish

It does something only when a healer endpoint is configured: $HEALER_URL, else
defaults.play.healerEndpoint in the session folder's cto-config.json. $HEALER_SESSION_HOOK=0
switches it off; $HEALER_TOKEN is sent as a bearer token. The session registers as play
"claude-<session id>" (schemas/session-start.schema.json) with one agent, "claude-code".

Whatever happens — no endpoint, healer down, a slow network, bad input — it prints nothing on
stdout (SessionStart output would land in Claude's context), gives up after 3 seconds in
all, and exits 0.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

DEADLINE_S = 3.0  # the whole hook, including DNS (socket timeouts do not cover it)
REQUEST_TIMEOUT_S = 2.0
MAX_INPUT = 1 << 20
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def endpoint(cwd: str) -> str | None:
    """The configured healer API, or None (then the hook does nothing)."""
    url = os.environ.get("HEALER_URL", "")
    if not url:
        try:
            cto = json.loads(Path(cwd or ".", "cto-config.json").read_text(encoding="utf-8"))
            url = cto["defaults"]["play"]["healerEndpoint"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    return url.rstrip("/")


def play_id(session_id: object) -> str | None:
    """``claude-<id>`` made a safe name (letters, digits, . _ -; at most 128 characters)."""
    if not isinstance(session_id, str):
        return None
    cleaned = re.sub(r"\.{2,}", ".", _UNSAFE.sub("-", session_id)).strip(".-_")[:100]
    return f"claude-{cleaned}" if cleaned else None


def repository(cwd: str) -> str:
    """The name of the git repository around ``cwd`` (never a remote URL: it may hold a token)."""
    here = Path(cwd or ".").resolve()
    for d in (here, *here.parents):
        if (d / ".git").exists():
            return d.name or "unknown"
    return here.name or "unknown"


def post(url: str, path: str, body: dict[str, Any]) -> int:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if os.environ.get("HEALER_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['HEALER_TOKEN']}"
    # endpoint() admits only http(s) URLs, so no file: or custom scheme reaches urlopen.
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),  # noqa: S310
                                 headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:  # noqa: S310
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)  # 409: the play is already active (a resumed session)


def run(event: str, data: dict[str, Any]) -> str:
    """Do the hook's work; returns what happened (for stderr)."""
    if os.environ.get("HEALER_SESSION_HOOK", "1").strip().lower() in ("0", "false", "no", "off"):
        return "switched off"
    cwd = str(data.get("cwd") or os.getcwd())
    url = endpoint(cwd)
    pid = play_id(data.get("session_id"))
    if url is None or pid is None:
        return "no healer endpoint configured" if url is None else "no session id"
    if event == "start":
        agent: dict[str, Any] = {"cli": "claude-code"}
        if isinstance(data.get("model"), str) and data["model"]:
            agent["model"] = data["model"][:128]
        body = {"play_id": pid, "repository": repository(cwd)[:512], "service": "claude-code",
                "cto_config": {"agents": {"claude-code": agent}}, "tasks": []}
        status = post(url, "/api/v1/session/start", body)
    else:
        reason = str(data.get("reason") or "session ended")[:200]
        status = post(url, f"/api/v1/session/{pid}/finish",
                      {"status": "completed", "reason": f"Claude Code session ended: {reason}"})
    return f"{event} {pid}: HTTP {status}"


def main(argv: list[str]) -> int:
    event = argv[0] if argv else ""
    if event in ("-h", "--help"):
        print(__doc__)
        return 0
    outcome: list[str] = []

    def work() -> None:
        try:
            if event not in ("start", "end"):
                raise ValueError(f"unknown event {event!r} (start or end)")
            raw = sys.stdin.read(MAX_INPUT) if not sys.stdin.isatty() else ""
            data = json.loads(raw) if raw.strip() else {}
            if not isinstance(data, dict):
                raise ValueError("hook input is not a JSON object")
            outcome.append(run(event, data))
        except Exception as exc:  # the hook must never fail the session, whatever went wrong
            outcome.append(f"skipped: {type(exc).__name__}: {exc}")

    # A daemon thread and a deadline: a blocking DNS lookup or a server that accepts and never
    # answers cannot hold the session up, and nothing can turn into a non-zero exit.
    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(DEADLINE_S)
    what = outcome[0] if outcome else f"gave up after {DEADLINE_S:.0f} s"
    if os.environ.get("HEALER_HOOK_DEBUG"):
        sys.stderr.write(f"healer session hook: {what}\n")
        sys.stderr.flush()
    os._exit(0)  # do not wait for a stuck worker thread at interpreter shutdown


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
