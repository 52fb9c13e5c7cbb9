#!/usr/bin/env python3
"""Play sessions through healer's HTTP API; prints the API's JSON answer.

usage:
  play.py health                                  is healer's API up?
  play.py active                                  active play sessions
  play.py list [--status active|completed|failed|cancelled]
  play.py show PLAY_ID                            one session: agents, checklist, issues
  play.py start FILE.json|-                       register a play (schemas/session-start)
  play.py inventory PLAY_ID --agent A --tool T [--tool T ...] [--server NAME=ready|failed]
                                                  an agent's pre-flight tool report
  play.py logs PLAY_ID --agent A FILE|-           post an agent's log lines for scanning
  play.py finish PLAY_ID [--status completed|failed|cancelled] [--reason TEXT]

The API is --url, else $HEALER_URL, else defaults.play.healerEndpoint of ./cto-config.json,
else http://127.0.0.1:8083. $HEALER_TOKEN is sent as a bearer token when set.

exit codes: 0 done, the API's answer is on stdout (read it: alerts, failed checklist items,
issues) · 2 bad input or refused by the API (400, 404, 409) · 3 healer's API is not
reachable (start it: healer serve)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from _healer import EXIT_UNAVAILABLE, EXIT_USAGE, emit, fail

DEFAULT_URL = "http://127.0.0.1:8083"
TIMEOUT_S = 10.0
BATCH = 5000  # log lines per request (the API takes at most 10,000)


def base_url(flag: str | None) -> str:
    for given, where in ((flag, "--url"), (os.environ.get("HEALER_URL"), "HEALER_URL")):
        if given:
            if not given.startswith(("http://", "https://")):
                fail(f"{where} must be an http:// or https:// URL, got {given!r}")
            return given.rstrip("/")
    try:
        cto = json.loads(Path("cto-config.json").read_text(encoding="utf-8"))
        url = cto["defaults"]["play"]["healerEndpoint"]
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            return url.rstrip("/")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return DEFAULT_URL


def call(url: str, method: str, path: str, body: Any = None) -> Any:
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if os.environ.get("HEALER_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['HEALER_TOKEN']}"
    # base_url() admits only http(s) URLs, so no file: or custom scheme reaches urlopen.
    req = urllib.request.Request(url + path, data=data, method=method,  # noqa: S310
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read() or b"{}")
        except ValueError:
            detail = {}
        message = detail.get("message") or detail.get("error") or exc.reason
        code = EXIT_UNAVAILABLE if exc.code >= 500 else EXIT_USAGE
        fail(f"{method} {path}: HTTP {exc.code}: {message}", code, status=exc.code)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        fail(f"healer's API at {url} is not reachable ({reason}); start it with "
             "'healer serve' or set HEALER_URL", EXIT_UNAVAILABLE)


def read_input(name: str) -> str:
    try:
        return sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {name}: {exc}")


def quote(play_id: str) -> str:
    return urllib.parse.quote(play_id, safe="")


def main() -> int:
    p = argparse.ArgumentParser(prog="play.py", description=__doc__.split("\n\n")[0],
                                epilog="\n".join(__doc__.split("\n")[2:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="healer's API (default $HEALER_URL or http://127.0.0.1:8083)")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub.add_parser("health")
    sub.add_parser("active")
    ls = sub.add_parser("list")
    ls.add_argument("--status", choices=["active", "completed", "failed", "cancelled"])
    sub.add_parser("show").add_argument("play_id")
    sub.add_parser("start").add_argument("file", help="session-start JSON, or - for stdin")
    inv = sub.add_parser("inventory")
    inv.add_argument("play_id")
    inv.add_argument("--agent", required=True)
    inv.add_argument("--tool", action="append", default=[], help="a tool it can see")
    inv.add_argument("--server", action="append", default=[], metavar="NAME=STATE",
                     help="a local MCP server and its state: ready, failed or disabled")
    lg = sub.add_parser("logs")
    lg.add_argument("play_id")
    lg.add_argument("--agent", required=True)
    lg.add_argument("--task-id")
    lg.add_argument("file", help="log file, or - for stdin")
    fin = sub.add_parser("finish")
    fin.add_argument("play_id")
    fin.add_argument("--status", choices=["completed", "failed", "cancelled"],
                     default="completed")
    fin.add_argument("--reason", default="")
    args = p.parse_args()
    url = base_url(args.url)

    if args.action == "health":
        emit(call(url, "GET", "/health"))
    elif args.action == "active":
        emit(call(url, "GET", "/api/v1/sessions/active"))
    elif args.action == "list":
        query = f"?status={args.status}" if args.status else ""
        emit(call(url, "GET", f"/api/v1/sessions{query}"))
    elif args.action == "show":
        emit(call(url, "GET", f"/api/v1/session/{quote(args.play_id)}"))
    elif args.action == "start":
        try:
            body = json.loads(read_input(args.file))
        except ValueError as exc:
            fail(f"{args.file}: not JSON: {exc}")
        emit(call(url, "POST", "/api/v1/session/start", body))
    elif args.action == "inventory":
        servers = {}
        for pair in args.server:
            name, sep, state = pair.partition("=")
            if not sep or state not in ("ready", "failed", "disabled"):
                fail(f"--server expects NAME=ready|failed|disabled, got {pair!r}")
            servers[name] = state
        body: dict[str, Any] = {"agent": args.agent, "tools": args.tool}
        if servers:
            body["servers"] = servers
        emit(call(url, "POST", f"/api/v1/session/{quote(args.play_id)}/inventory", body))
    elif args.action == "logs":
        lines = read_input(args.file).splitlines()
        alerts: list[Any] = []
        issues: list[Any] = []
        for start in range(0, max(len(lines), 1), BATCH):
            body = {"agent": args.agent, "lines": lines[start:start + BATCH]}
            if args.task_id:
                body["task_id"] = args.task_id
            data = call(url, "POST", f"/api/v1/session/{quote(args.play_id)}/logs", body)
            alerts += data.get("alerts", [])
            issues += data.get("issues", [])
        emit({"status": "ok", "lines": len(lines), "alerts": alerts, "issues": issues})
    elif args.action == "finish":
        emit(call(url, "POST", f"/api/v1/session/{quote(args.play_id)}/finish",
                  {"status": args.status, **({"reason": args.reason} if args.reason else {})}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
