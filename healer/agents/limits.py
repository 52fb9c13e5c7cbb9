"""What healer's own Claude runs on this node know about the model API account.

Two small file records under ``<state>/agents/``, shared by every healer process here:

- ``limits/claude.json``, the **account-wide limit**: a transient failure (T1 rate limit, T2
  overloaded, T3 server error, T4 unreachable; ``healer.agents.failures``) of any Claude run
  writes ``retry_at`` (when the API said to try again, else a capped exponential back-off over
  ``waits``, the failures in a row: ``executor.claude.defer_base_s`` doubling up to
  ``defer_cap_s``), ``code``, ``since`` and ``waits``. Every Claude run waits until
  ``retry_at`` before it launches the CLI, or ends ``deferred`` when its time limit would pass
  first. A run the model API answered clears it.
- ``claude-disabled.json``, the **stop marker**: a rejected credential (X1 bad key, X2 no
  permission, X3 credit exhausted) writes ``code``, ``reason`` (the CLI's words, scrubbed),
  ``since`` and the credential ``fingerprint`` (a SHA-256 over the values of
  ``ANTHROPIC_API_KEY``, ``ANTHROPIC_AUTH_TOKEN``, ``CLAUDE_CODE_OAUTH_TOKEN`` and the mtime of
  the Claude Code login file; never the secret). Whoever creates it escalates to a person, once.
  While it holds, Claude runs do not start (an agent with a playbook runs that instead); it
  clears itself when the fingerprint changes (a new key, a new login), or when a person deletes
  it (a topped-up account keeps its key).

Both are written atomically; a lost update between two processes failing at once costs at most
one step of the back-off.

Either is a **hold** of healer's own model access, and so is a spent daily or monthly budget
(``healer.agents.budget``): a run it stopped says so in its result (``held_by``: status
``deferred``, or ``failed`` with a rejected credential's ``failure``). A code attempt such a
run ended is ``held`` (``healer.selfheal.attempts``), not failed: no escalation of its own (the
cause was told once, here or by the budget), no breaker, no cooldown; it resumes through the
gate once the hold is over (``resumable``: for a budget, also as soon as it has room again).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from healer.agents.executors.auto import user_claude_dir
from healer.agents.failures import CODES, Failure, backoff_s
from healer.core.files import atomic_create_bytes, atomic_write_json, dumps

log = logging.getLogger(__name__)

CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
DISABLING = frozenset({"X1", "X2", "X3"})  # a person must fix the credential or the account
MIN_WAIT_S = 1.0  # the least wait after a transient failure, even when the API said 0


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s is unreadable (%s); ignoring it", path, exc)
        return None
    return data if isinstance(data, dict) else None


# -- the account-wide limit ----------------------------------------------------------------


def limit_path(settings: Any, provider: str = "claude") -> Path:
    return settings.state_path.resolve() / "agents" / "limits" / f"{provider}.json"


def read_limit(settings: Any) -> dict[str, Any] | None:
    """The limit record (also one whose ``retry_at`` has passed: its ``waits`` still count)."""
    rec = _read(limit_path(settings))
    if rec is None or not isinstance(rec.get("retry_at"), int | float):
        return None
    return rec


def note_transient(settings: Any, failure: Failure, *, now: float,
                   hint_s: float | None = None) -> dict[str, Any]:
    """Record a transient failure; returns the record with the ``retry_at`` to wait for.

    ``retry_at``: the failure's own (from the API), else ``now + hint_s`` (the delay the CLI
    took on the API's ``retry-after``), else the back-off for this many failures in a row; a
    later ``retry_at`` another run recorded stays."""
    claude = settings.executor.claude
    cur = read_limit(settings) or {}
    waits = int(cur.get("waits") or 0) + 1
    if failure.retry_at is not None and failure.retry_at > now:
        retry_at, source = float(failure.retry_at), "api"
    elif hint_s is not None:
        retry_at, source = now + max(MIN_WAIT_S, hint_s), "api"
    else:
        retry_at = now + backoff_s(waits, base_s=claude.defer_base_s, cap_s=claude.defer_cap_s)
        source = "backoff"
    retry_at = max(retry_at, float(cur.get("retry_at") or 0.0))
    since = float(cur.get("since") or now)
    from healer.core.publish.sanitizer import scrub

    rec = {"provider": "claude", "code": failure.code, "title": failure.title,
           "status": failure.status, "detail": scrub(failure.detail)[:500],
           "retry_at": round(retry_at, 3), "retry_at_iso": iso(retry_at), "source": source,
           "since": since, "since_iso": iso(since), "waits": waits, "updated": now,
           "pid": os.getpid()}
    path = limit_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, rec)
    return rec


def clear_limit(settings: Any) -> bool:
    """The model API answered: no more waiting (True when there was a record)."""
    try:
        limit_path(settings).unlink()
    except FileNotFoundError:
        return False
    log.info("model API answers again: the Claude limit record is cleared")
    return True


# -- the stop marker -----------------------------------------------------------------------


def disabled_path(settings: Any) -> Path:
    return settings.state_path.resolve() / "agents" / "claude-disabled.json"


def fingerprint(env: Mapping[str, str]) -> str:
    """Which credential a run uses, without the secret: SHA-256 over the credential variables'
    values and the mtime of Claude Code's login file."""
    h = hashlib.sha256()
    for name in CREDENTIAL_VARS:
        h.update(f"{name}={env.get(name, '')}\n".encode())
    try:
        mtime = (user_claude_dir(env) / ".credentials.json").stat().st_mtime_ns
    except OSError:
        mtime = 0
    h.update(f"credentials-mtime={mtime}\n".encode())
    return "sha256:" + h.hexdigest()


def read_disabled(settings: Any) -> dict[str, Any] | None:
    """The marker as it is, without judging it (``healer doctor``)."""
    return _read(disabled_path(settings))


def holds(settings: Any, env: Mapping[str, str]) -> dict[str, Any] | None:
    """The marker when it holds for the credential in ``env`` (nothing changes: for checks
    such as the gate's "can it run here")."""
    marker = read_disabled(settings)
    if marker is None or marker.get("fingerprint") != fingerprint(env):
        return None
    return marker


def disabled(settings: Any, env: Mapping[str, str]) -> dict[str, Any] | None:
    """The marker when it holds for the credential in ``env``, which a run is about to use;
    a marker for another credential is removed (the key was rotated, or Claude Code logged
    in again)."""
    marker = read_disabled(settings)
    if marker is None:
        return None
    if marker.get("fingerprint") != fingerprint(env):
        with contextlib.suppress(FileNotFoundError):
            disabled_path(settings).unlink()
        log.warning("the credential changed since Claude runs were disabled (%s); they are "
                    "enabled again", marker.get("code"))
        return None
    return marker


def disable(settings: Any, failure: Failure, env: Mapping[str, str], *,
            now: float | None = None) -> tuple[dict[str, Any], bool]:
    """Write the marker for ``failure``; returns it and whether this call created it (only
    the creator escalates: a second run failing the same way adds nothing)."""
    from healer.core.publish.sanitizer import scrub

    now = time.time() if now is None else now
    held = disabled(settings, env)  # also drops a marker for another credential
    if held is not None:
        return held, False
    marker = {"code": failure.code, "title": failure.title, "status": failure.status,
              "reason": scrub(failure.detail or failure.title)[:500],
              "remedy": CODES[failure.code].remedy, "since": now, "since_iso": iso(now),
              "fingerprint": fingerprint(env), "path": str(disabled_path(settings))}
    path = disabled_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    if atomic_create_bytes(path, dumps(marker)):
        return marker, True
    return read_disabled(settings) or marker, False  # another process was first


def refusal(marker: Mapping[str, Any]) -> str:
    """Why a Claude run does not start, and what a person does about it."""
    path = marker.get("path") or "the marker"
    if marker.get("code") == "X3":
        then = (f"top up the account's credit (or raise its quota), then delete {path} "
                "(the key stays the same, so it does not clear by itself)")
    else:
        then = ("run again: healer notices a new key or login by itself (or delete "
                f"{path})")
    return (f"Claude runs are disabled since {marker.get('since_iso', '?')}: "
            f"{marker.get('reason') or marker.get('title')} ({marker.get('code')}, "
            f"{marker.get('title')}); fix the key, then {then}")


def next_steps(marker: Mapping[str, Any]) -> list[str]:
    steps = [str(marker.get("remedy") or "Fix the model API credential.")]
    if marker.get("code") == "X3":
        steps.append(f"Then delete `{marker.get('path')}` on this node: the key is unchanged, "
                     "so healer cannot tell the account was topped up.")
    else:
        steps.append("healer notices the new key or login by itself on the next run (the "
                     f"marker `{marker.get('path')}` clears when the credential changes).")
    steps.append("Until then, agents with a deterministic playbook run it instead; the "
                 "others fail at once without calling the model API. `healer doctor` shows "
                 "the state.")
    return steps


async def escalate_disabled(settings: Any, marker: Mapping[str, Any], *,
                            run: str = "") -> Path | None:
    """Tell a person, once per marker (the caller created it); returns the seed file.
    ``run`` names the run that hit it ("agent run-id")."""
    import asyncio

    from healer.core.escalation import Attempt, Escalation, escalate
    from healer.core.store import open_store

    node = settings.node
    tried = [Attempt(1, f"Claude Code run {run}".strip(), str(marker.get("code")),
                     str(marker.get("reason") or ""), str(marker.get("since_iso") or ""))]
    esc = Escalation(
        title=f"Claude runs stopped on {node}: {marker.get('title')} ({marker.get('code')})",
        target="claude", severity="high",
        what_happened=(
            f"healer's own Claude Code runs on node `{node}` failed with {marker.get('code')} "
            f"({marker.get('title')}): the model API answered "
            f"{marker.get('status') or 'an error'} — \"{marker.get('reason')}\". healer "
            "stopped starting Claude runs on this node until the credential changes."),
        attempts=tried, next_steps=next_steps(marker),
        commands=["healer doctor"] + ([f"rm {marker.get('path')}"]
                                      if marker.get("code") == "X3" else []),
        evidence=[f"code: {marker.get('code')} ({marker.get('title')})",
                  f"API status: {marker.get('status')}", f"CLI said: {marker.get('reason')}",
                  f"since: {marker.get('since_iso')}"],
        kind="escalation", labels=["heal", "escalation", "claude-credentials"],
        dedup_key=f"claude-disabled.{node}", one_open=True)
    store = await asyncio.to_thread(open_store, settings)
    try:
        record = await escalate(settings, store, esc)
    finally:
        with contextlib.suppress(Exception):
            store.close()
    return record.seed_file


# -- holds: what a code attempt waits for -----------------------------------------------------


def held_by(result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The hold of healer's model access that ended a run, from its result document (None
    when the run ended for any other reason): ``code``, ``class``, ``title`` and ``until``
    (Unix seconds; None for a rejected credential, which holds until it changes)."""
    if not isinstance(result, Mapping):
        return None
    failure = result.get("failure") if isinstance(result.get("failure"), Mapping) else {}
    code = str(failure.get("code") or "")
    if result.get("status") == "deferred":
        until = result.get("retry_at")
        return {"code": code or "budget", "class": str(failure.get("class") or "transient"),
                "title": str(failure.get("title") or "the agent budget is spent"),
                "until": float(until) if isinstance(until, int | float) else None}
    if result.get("status") == "failed" and code in DISABLING:
        return {"code": code, "class": CODES[code].cls, "title": CODES[code].title,
                "until": None}
    return None


def resumable(hold: Mapping[str, Any], *, now: float,
              budget_open: Callable[[], bool] | None = None) -> bool:
    """Whether a run ``hold`` stopped may be tried again by now: its ``until`` has passed (a
    rejected credential has none: the gate's model check says whether it still holds). A
    spent budget's hold also ends as soon as ``budget_open()`` says the budget has room
    again (it was raised, or its period rolled over)."""
    until = hold.get("until")
    if not isinstance(until, int | float) or until <= now:
        return True
    return hold.get("code") == "budget" and budget_open is not None and budget_open()


def refusal_failure(marker: Mapping[str, Any]) -> dict[str, Any]:
    """The failure a run refused by the stop marker carries (its result names the hold)."""
    code = str(marker.get("code") or "X1")
    return {"code": code, "class": CODES[code].cls if code in CODES else "terminal",
            "title": str(marker.get("title") or ""), "detail": str(marker.get("reason") or ""),
            "status": marker.get("status"), "provider": "anthropic"}


def doctor_check(settings: Any) -> tuple[bool, str]:
    """``healer doctor``: (ok, detail) of healer's own Claude runs on this node."""
    marker = read_disabled(settings)
    if marker is not None:
        same = marker.get("fingerprint") == fingerprint(os.environ)
        note = "" if same else (" (this shell's credential differs: a run with it clears "
                                "the marker)")
        return False, refusal(marker) + note
    rec = read_limit(settings)
    if rec is not None and float(rec["retry_at"]) > time.time():
        return True, (f"waiting out {rec.get('code')} ({rec.get('title')}) until "
                      f"{rec.get('retry_at_iso')}: {rec.get('waits')} in a row since "
                      f"{rec.get('since_iso')}")
    return True, "enabled (no rate limit or rejected key recorded)"
