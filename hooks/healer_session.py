#!/usr/bin/env python3
"""Claude Code hook: tell healer a session started or ended, and what failed in it. Never
blocks or fails a session.

usage (from hooks/hooks.json; Claude Code passes the hook's JSON on stdin):
  healer_session.py start      SessionStart → POST /api/v1/session/start
  healer_session.py end        SessionEnd   → POST /api/v1/session/{play_id}/finish
  healer_session.py event      Stop, SubagentStop, StopFailure, PostToolUseFailure,
                               Notification → POST /api/v1/session/{play_id}/logs

It does something only when a healer endpoint is configured: $HEALER_URL, else
defaults.play.healerEndpoint in the session folder's cto-config.json. $HEALER_SESSION_HOOK=0
switches it off; $HEALER_TOKEN is sent as a bearer token. The session registers as play
"claude-<session id>" (schemas/session-start.schema.json) with one agent, "claude-code".

`event` sends log lines (agent "claude-code") for healer's detection engine, and only when
there is something to report:
  Stop, SubagentStop   the API error messages that end the transcript (the entries Claude
                       Code writes with "isApiErrorMessage": true and model "<synthetic>"),
                       read from the last 256 KiB of transcript_path (agent_transcript_path
                       for a subagent) — only a regular *.jsonl file of this user's under
                       $CLAUDE_CONFIG_DIR or the home folder; a normal stop sends nothing
  StopFailure          the same, plus the hook's error category and last_assistant_message
                       (the API error text: Claude Code runs StopFailure, not Stop, when an
                       API error ends the turn)
  PostToolUseFailure   the tool's name and its error (not when the user interrupted it)
  Notification         its type, title and message (not idle_prompt or auth_success)
A session healer does not know (healer started after SessionStart: HTTP 404) is registered
first, then the lines are sent again.

Whatever happens — no endpoint, healer down, a slow network, bad input — it prints nothing on
stdout (SessionStart output would land in Claude's context; a Stop hook's JSON or exit code 2
would keep Claude going), gives up after 3 seconds in all ($HEALER_HOOK_DEADLINE_S: 0.5 to 9 s,
for a healer that is slow to answer), and exits 0. `event` does its work in a background
process of its own: when an API error ends a `claude -p` run, the CLI exits and ends its
hooks at once, and the failure would never reach healer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

DEADLINE_S = 3.0  # the whole hook, including DNS (socket timeouts do not cover it)
MAX_DEADLINE_S = 9.0  # stays under the 10 s timeout hooks.json gives every hook
REQUEST_TIMEOUT_S = 2.0
MAX_INPUT = 4 << 20  # a PostToolUseFailure input carries the tool's input (a Write's content)
TRANSCRIPT_TAIL = 256 << 10  # the part of a transcript read: its end
MAX_API_ERRORS = 10  # transcript entries taken, newest first
MAX_LINES = 200
MAX_LINE_CHARS = 4000
MAX_TOTAL_CHARS = 128 << 10
AGENT = "claude-code"
#: Notifications that say nothing went wrong (waiting for input, logged in).
ROUTINE_NOTIFICATIONS = frozenset({"idle_prompt", "auth_success"})
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_STARTED = time.monotonic()


def deadline() -> float:
    """$HEALER_HOOK_DEADLINE_S (0.5 to 9 s) where healer is slow to answer, else 3 s."""
    try:
        value = float(os.environ.get("HEALER_HOOK_DEADLINE_S", "") or DEADLINE_S)
    except ValueError:
        return DEADLINE_S
    return min(max(value, 0.5), MAX_DEADLINE_S) if value == value else DEADLINE_S


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


def post(url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """POST ``body`` as JSON; the HTTP status and the answer's JSON (None if it has none)."""
    left = _STARTED + deadline() - time.monotonic()
    if left < 0.1:
        raise TimeoutError("no time left for another request")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if os.environ.get("HEALER_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['HEALER_TOKEN']}"
    # endpoint() admits only http(s) URLs, so no file: or custom scheme reaches urlopen.
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),  # noqa: S310
                                 headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=min(REQUEST_TIMEOUT_S, left)) as resp:  # noqa: S310
            status, raw = int(resp.status), resp.read(1 << 20)
    except urllib.error.HTTPError as exc:
        return int(exc.code), None  # 409: the play is already active (a resumed session)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None


def start_body(pid: str, cwd: str, data: dict[str, Any]) -> dict[str, Any]:
    """The session-start body of play ``pid``: one agent, claude-code (with its model)."""
    agent: dict[str, Any] = {"cli": AGENT}
    if isinstance(data.get("model"), str) and data["model"]:
        agent["model"] = data["model"][:128]
    return {"play_id": pid, "repository": repository(cwd)[:512], "service": AGENT,
            "cto_config": {"agents": {AGENT: agent}}, "tasks": []}


# -- what an event reports ---------------------------------------------------------------------

def _roots() -> list[str]:
    """Where transcripts may be read from: Claude's config dir and the home folder (never /)."""
    roots = []
    for raw in (os.environ.get("CLAUDE_CONFIG_DIR"), os.path.expanduser("~")):
        if raw and os.path.isabs(raw):
            real = os.path.realpath(raw)
            if real != os.path.dirname(real):  # not a filesystem root
                roots.append(real.rstrip(os.sep) + os.sep)
    return roots


def transcript_tail(raw: object) -> bytes:
    """The last ``TRANSCRIPT_TAIL`` bytes of a transcript, from its first whole line on; b""
    unless ``raw`` is a regular ``*.jsonl`` file of this user's whose real path (symlinks
    resolved) lies under ``_roots()``."""
    if not isinstance(raw, str) or not raw or "\0" in raw or not os.path.isabs(raw):
        return b""
    real = os.path.realpath(raw)
    if not real.endswith(".jsonl") or not any(real.startswith(r) for r in _roots()):
        return b""
    # O_NOFOLLOW: the checked path cannot become a link meanwhile; O_NONBLOCK: a FIFO put
    # there cannot hold the open (fstat then refuses it).
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(real, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError:  # not written yet, gone, or not ours to read
        return b""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
            return b""
        start = max(0, st.st_size - TRANSCRIPT_TAIL)
        os.lseek(fd, start, os.SEEK_SET)
        chunks, left = [], TRANSCRIPT_TAIL
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data.split(b"\n", 1)[1] if start > 0 and b"\n" in data else data


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content
                         if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _is_api_error(entry: dict[str, Any]) -> bool:
    message = entry.get("message")
    synthetic = isinstance(message, dict) and message.get("model") == "<synthetic>"
    return entry.get("isApiErrorMessage") is True or (synthetic and bool(entry.get("error")))


def _only_tool_results(entry: dict[str, Any]) -> bool:
    content = entry.get("message", {}).get("content") if isinstance(
        entry.get("message"), dict) else None
    return isinstance(content, list) and bool(content) and all(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def api_errors(tail: bytes) -> list[dict[str, Any]]:
    """The API error messages at the end of a transcript, oldest first: the assistant entries
    after the last real reply or user prompt (so an error a later turn got past is not sent
    again) — ``{"text", "error", "status"}`` each."""
    found: list[dict[str, Any]] = []
    for raw in reversed(tail.splitlines()):
        if b'"assistant"' not in raw and b'"user"' not in raw:
            continue  # attachments, snapshots, bookkeeping: not parsed
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if entry.get("type") == "assistant":
            if not _is_api_error(entry):
                break
            message = entry.get("message") if isinstance(entry.get("message"), dict) else {}
            text = _text(message.get("content")).strip()
            if text:
                found.append({"text": text, "error": entry.get("error"),
                              "status": entry.get("apiErrorStatus")})
            if len(found) >= MAX_API_ERRORS:
                break
        elif entry.get("type") == "user" and not _only_tool_results(entry):
            break
    return found[::-1]


def _clean(value: object, limit: int = MAX_LINE_CHARS) -> str:
    return _CONTROL.sub(" ", str(value)).strip()[:limit]


def _lines(first: str, text: str, *, head: int = 20, tail: int = 60) -> list[str]:
    """``first`` + the first line of ``text``, then its other lines (the first ``head`` and
    the last ``tail`` of a long text), each cut to ``MAX_LINE_CHARS``."""
    rest = [ln for ln in (_clean(x) for x in text.splitlines()) if ln]
    if len(rest) > 1 + head + tail:
        rest = rest[:1 + head] + rest[-tail:]
    return [_clean(f"{first}{rest[0] if rest else ''}"), *rest[1:]]


def _tag(error: object, status: object) -> str:
    parts = [_clean(error, 64)] if isinstance(error, str) and error else []
    if isinstance(status, int) and not isinstance(status, bool):
        parts.append(f"HTTP {status}")
    return f" ({', '.join(parts)})" if parts else ""


def evidence(data: dict[str, Any]) -> list[str]:
    """The log lines an event reports (none: nothing went wrong)."""
    name = data.get("hook_event_name")
    lines: list[str] = []
    if name in ("Stop", "SubagentStop", "StopFailure"):
        who = f"Claude Code {name}"
        if name == "SubagentStop" and isinstance(data.get("agent_type"), str):
            who += f" [{_clean(data['agent_type'], 64)}]"
        path = data.get("agent_transcript_path") if name == "SubagentStop" else None
        errors = api_errors(transcript_tail(path or data.get("transcript_path")))
        for e in errors:
            lines += _lines(f"{who}: API error{_tag(e['error'], e['status'])}: ", e["text"])
        if name == "StopFailure":
            last = data.get("last_assistant_message")
            last = last.strip() if isinstance(last, str) else ""
            if last and all(e["text"] != last for e in errors):
                lines += _lines(f"{who}: API error{_tag(data.get('error'), None)}: ", last)
            details = data.get("error_details")
            if isinstance(details, str) and details.strip():
                lines += _lines(f"{who}: error details: ", details)
            if not lines:
                lines.append(f"{who}: API error{_tag(data.get('error'), None) or ' (unknown)'}")
    elif name == "PostToolUseFailure":
        if data.get("is_interrupt") is True:
            return []  # the user stopped the tool: not a failure
        tool = _clean(data.get("tool_name") or "unknown", 128)
        error = data.get("error")
        lines = _lines(f"Claude Code PostToolUseFailure: tool {tool} failed: ",
                       error if isinstance(error, str) else "")
    elif name == "Notification":
        kind = data.get("notification_type")
        if kind in ROUTINE_NOTIFICATIONS:
            return []
        message = data.get("message")
        if not isinstance(message, str) or not message.strip():
            return []
        title = data.get("title")
        head = "Claude Code Notification"
        if isinstance(kind, str) and kind:
            head += f" ({_clean(kind, 64)})"
        head += ": "
        if isinstance(title, str) and title.strip():
            head += f"{_clean(title, 200)}: "
        lines = _lines(head, message)
    out, total = [], 0
    for line in lines[:MAX_LINES]:
        total += len(line)
        if total > MAX_TOTAL_CHARS:
            break
        out.append(line)
    return out


def report(url: str, pid: str, cwd: str, data: dict[str, Any]) -> str:
    """POST an event's lines to the session's logs; a session healer does not know is
    registered first."""
    name = str(data.get("hook_event_name") or "?")[:64]
    lines = evidence(data)
    if not lines:
        return f"event {name} {pid}: nothing to report"
    body = {"agent": AGENT, "lines": lines}
    status, answer = post(url, f"/api/v1/session/{pid}/logs", body)
    started = ""
    if status == 404:  # healer came up after SessionStart, or lost the session
        began, _ = post(url, "/api/v1/session/start", start_body(pid, cwd, data))
        started = f", session start HTTP {began}"
        status, answer = post(url, f"/api/v1/session/{pid}/logs", body)
    codes = sorted({a.get("code") for a in answer.get("alerts", []) if isinstance(a, dict)}
                   - {None}) if isinstance(answer, dict) else []
    return (f"event {name} {pid}: {len(lines)} line(s){started}, HTTP {status}, "
            f"alerts {' '.join(codes) or 'none'}")


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
        status, _ = post(url, "/api/v1/session/start", start_body(pid, cwd, data))
    elif event == "end":
        reason = str(data.get("reason") or "session ended")[:200]
        status, _ = post(url, f"/api/v1/session/{pid}/finish",
                         {"status": "completed", "reason": f"Claude Code session ended: {reason}"})
    else:
        return report(url, pid, cwd, data)
    return f"{event} {pid}: HTTP {status}"


def detach() -> None:
    """Go on in a background process of its own and let the CLI's hook end at once.

    Claude Code does not wait for a StopFailure hook when the failure ends a ``-p`` run: it
    exits and sends SIGTERM to its hooks within a few hundred ms, before a Python hook has
    even started. hooks.json therefore starts ``event`` with SIGTERM ignored; here the hook
    leaves the CLI's process tree and takes SIGTERM back. The hook's input stays readable by
    the background process; its stdout (and stderr, unless $HEALER_HOOK_DEBUG asks for the
    outcome line) no longer reaches the CLI, so nothing waits for it. Where there is no
    fork, the hook stays in the foreground. Its deadline bounds it either way."""
    if not hasattr(os, "fork"):
        return
    if os.fork():
        os._exit(0)
    os.setsid()  # out of the CLI's process group: its clean-up does not reach here
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    if not os.environ.get("HEALER_HOOK_DEBUG"):
        os.dup2(null, 2)
    os.close(null)


def main(argv: list[str]) -> int:
    event = argv[0] if argv else ""
    if event in ("-h", "--help"):
        print(__doc__)
        return 0
    if event == "event":
        detach()
    outcome: list[str] = []

    def work() -> None:
        try:
            if event not in ("start", "end", "event"):
                raise ValueError(f"unknown event {event!r} (start, end or event)")
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
    worker.join(deadline())
    what = outcome[0] if outcome else f"gave up after {deadline():g} s"
    if os.environ.get("HEALER_HOOK_DEBUG"):
        sys.stderr.write(f"healer session hook: {what}\n")
        sys.stderr.flush()
    os._exit(0)  # do not wait for a stuck worker thread at interpreter shutdown


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
