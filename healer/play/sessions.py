"""The session registry: what each play's agents should have, and what went wrong.

Sessions live in the store (kind ``sessions``, key = play id); the ids of active ones are
also in the member set ``sessions-active`` so listing them never reads finished sessions.
Records are cached by the store's change stamp, so a hot ``/sessions/active`` re-reads only
sessions that changed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from healer.core.names import safe_name
from healer.core.store import Record, Store
from healer.errors import ConflictError, NotFoundError, UsageError

KIND = "sessions"
ACTIVE = "sessions-active"
STATUSES = ("active", "completed", "failed", "cancelled")
ISSUE_TYPES = (
    "pre_flight_failure", "tool_mismatch", "config_error", "mcp_init_failed", "agent_error",
    "stuck", "agent_failure", "build_failure", "test_failure", "language_mismatch", "other",
)
MAX_ISSUES = 500
MAX_PREVIOUS_RUNS = 20  # earlier runs of a restarted play kept in its record


class AlreadyActive(UsageError):
    """The play is already active (HTTP 409)."""


ANY_HOST = "*"


def healer_url(settings: Any) -> str:
    """The API address the play's escalations tell a person to use: ``api.public_url`` when
    set, else ``play.healer_endpoint`` (cto-config's ``healerEndpoint``) when set, else the
    address this healer serves on."""
    from healer.core.address import public_url

    if settings.api.public_url:
        return public_url(settings)
    return str(settings.play.healer_endpoint or public_url(settings)).rstrip("/")


def tools_server_host(url: str) -> str:
    """The host of a tools-server URL, as the probe would connect to it ('' if none)."""
    import httpx

    try:
        return str(httpx.URL(url).host).lower()
    except (httpx.InvalidURL, ValueError):
        return ""


def tools_server_refusal(url: str, allowed: Sequence[str]) -> str:
    """Why healer may not connect to the tools-server ``url`` ('' when it may).

    healer connects only to the hosts in ``play.tools_server_hosts`` (``.example.com``: the
    domain and its subdomains; ``*``: any), so starting a session cannot point it at an
    arbitrary address and read back whether something answers there. The host is read by
    both URL parsers involved (the one the probe connects with and the standard library's);
    they must agree, and a URL with user info is refused outright.
    """
    from urllib.parse import urlsplit

    import httpx

    try:
        parsed = httpx.URL(url)
        host = parsed.host.lower()
        other = (urlsplit(url).hostname or "").lower()
    except (httpx.InvalidURL, ValueError):
        return "the tools_server URL has no valid host"
    if parsed.scheme not in ("http", "https") or not host or host != other:
        return "the tools_server URL has no valid http(s) host"
    if parsed.userinfo:
        return "the tools_server URL must not carry user info (user:password@)"
    for entry in (a.lower() for a in allowed):
        if entry == ANY_HOST or host == entry or (
                entry.startswith(".") and (host.endswith(entry) or host == entry[1:])):
            return ""
    named = ", ".join(allowed) or "none"
    return (f"tools_server host {host} is not in play.tools_server_hosts ({named}): healer "
            "connects only to those; add the host there to use this tools-server")


def iso(ts: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).isoformat(
        timespec="seconds").replace("+00:00", "Z")


def expected_tools(cto_config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per agent: remote tools, local servers with their tools, and the union."""
    out: dict[str, dict[str, Any]] = {}
    for agent, spec in (cto_config.get("agents") or {}).items():
        tools = spec.get("tools") or {}
        remote = list(dict.fromkeys(tools.get("remote") or []))
        local = {srv: list(dict.fromkeys(cfg.get("tools") or []))
                 for srv, cfg in (tools.get("localServers") or {}).items()
                 if cfg.get("enabled", True)}
        union = list(dict.fromkeys([*remote, *(t for ts in local.values() for t in ts)]))
        out[agent] = {"remote": remote, "local": local, "all": union}
    return out


def new_session(payload: dict[str, Any], now: float) -> dict[str, Any]:
    """The record of a play started at ``now`` from a session-start ``payload``."""
    play_id = payload["play_id"]
    return {
        "play_id": play_id,
        "session_id": play_id,
        "repository": payload["repository"],
        "service": payload.get("service", ""),
        "namespace": payload.get("namespace", "cto"),
        "cto_config": payload["cto_config"],
        "tasks": payload.get("tasks") or [],
        "tools_server": payload.get("tools_server", ""),
        "account": payload.get("account", "default"),
        "expected_tools": expected_tools(payload["cto_config"]),
        "started_at": iso(now),
        "started_epoch": now,
        "last_updated": iso(now),
        "status": "active",
        "issues": [],
        "agents": {},
        "preflight": {},
    }


def summary(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "play_id": data["play_id"],
        "repository": data["repository"],
        "status": data["status"],
        "task_count": len(data.get("tasks") or []),
        "issue_count": len(data.get("issues") or []),
        "started_at": data["started_at"],
    }


class SessionRegistry:
    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time):
        self.store = store
        self._clock = clock
        self._cache: dict[str, tuple[object, dict[str, Any]]] = {}
        self._summaries: dict[str, tuple[object, dict[str, Any]]] = {}
        self._active: tuple[tuple[object, ...], list[dict[str, Any]]] = ((), [])
        self._lock = threading.Lock()

    # -- reads -----------------------------------------------------------------------------

    def get(self, play_id: str) -> dict[str, Any] | None:
        safe_name(play_id, "play_id")
        stamp = self.store.stamp(KIND, play_id)
        if stamp is not None:
            with self._lock:
                hit = self._cache.get(play_id)
            if hit and hit[0] == stamp:
                return hit[1]
        rec = self.store.get(KIND, play_id)
        if rec is None:
            return None
        if stamp is not None:
            with self._lock:
                self._cache[play_id] = (stamp, rec.data)
        return rec.data

    def require(self, play_id: str) -> dict[str, Any]:
        data = self.get(play_id)
        if data is None:
            raise NotFoundError(KIND, play_id)
        return data

    def active_ids(self) -> list[str]:
        return self.store.members(ACTIVE)

    def list_active(self) -> list[dict[str, Any]]:
        """Summaries of the active sessions, newest first.

        The hot path of orchestrators polling healer: one listdir and one stat per active
        session; the list is rebuilt only when one of their records changed. Callers may keep
        the returned list's identity as a cache key and must not mutate it.
        """
        ids = self.active_ids()
        stamps = tuple(self.store.stamp(KIND, pid) for pid in ids)
        signature = (*ids, *stamps)
        if None not in stamps and signature == self._active[0]:
            return self._active[1]
        out = []
        for pid, stamp in zip(ids, stamps, strict=True):
            hit = self._summaries.get(pid)
            if hit is not None and stamp is not None and hit[0] == stamp:
                out.append(hit[1])
                continue
            data = self.get(pid)
            if data is not None and data["status"] == "active":
                item = summary(data)
                self._summaries[pid] = (stamp, item)
                out.append(item)
        out.sort(key=lambda s: s["started_at"], reverse=True)
        self._active = (signature, out)
        return out

    def list_all(self, *, limit: int = 100, offset: int = 0,
                 status: str | None = None) -> tuple[int, list[dict[str, Any]]]:
        """(total, one page of summaries) ordered by play id."""
        keys = self.store.keys(KIND)
        if status == "active":
            keys = sorted(set(keys) & set(self.active_ids()))
        page = []
        for pid in keys[offset:]:
            data = self.get(pid)
            if data is None or (status and data["status"] != status):
                continue
            page.append(summary(data))
            if len(page) >= limit:
                break
        return len(keys), page

    # -- writes ----------------------------------------------------------------------------

    def start(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Register a play; ``AlreadyActive`` if it is running. A finished play may restart."""
        play_id = safe_name(payload["play_id"], "play_id")
        data = new_session(payload, self._clock())
        try:
            # A new play is the common case: create first (atomic), read only on a conflict.
            existing = None
            try:
                self.store.create(KIND, play_id, data)
            except ConflictError:
                existing = self.store.get(KIND, play_id)
                if existing is None:
                    raise  # deleted meanwhile: report the race as before
            if existing is not None and existing.data.get("status") == "active":
                raise AlreadyActive(f"play {play_id} is already active")
            if existing is not None:
                # A new run of a finished play: the earlier runs stay readable, and issue ids
                # go on counting, so an id never names two different issues.
                old = existing.data
                data["restarts"] = int(old.get("restarts", 0)) + 1
                data["issue_seq"] = _issue_seq(old)
                data["previous_runs"] = [*old.get("previous_runs", []), _run_of(old)][
                    -MAX_PREVIOUS_RUNS:]
                self.store.put(KIND, play_id, data, expected_revision=existing.revision)
        except ConflictError as exc:
            raise AlreadyActive(f"play {play_id} was started concurrently") from exc
        self.store.add_member(ACTIVE, play_id)
        return data

    def update(self, play_id: str, fn: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Apply ``fn`` to the session (in place) with compare-and-set; returns the new data."""
        safe_name(play_id, "play_id")

        def apply(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is None:
                raise NotFoundError(KIND, play_id)
            fn(current)
            current["last_updated"] = iso(self._clock())
            return current

        rec: Record | None = self.store.update(KIND, play_id, apply)
        assert rec is not None
        return rec.data

    def finish(self, play_id: str, status: str = "completed", reason: str = "") -> dict[str, Any]:
        if status not in STATUSES[1:]:
            raise UsageError(f"status must be one of {', '.join(STATUSES[1:])}")

        def fn(d: dict[str, Any]) -> None:
            d["status"] = status
            d["finished_at"] = iso(self._clock())
            if reason:
                d["finish_reason"] = reason

        data = self.update(play_id, fn)
        self.store.remove_member(ACTIVE, play_id)
        return data

    def add_issue(self, play_id: str, issue: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Record an issue unless one with the same identity is already there; returns (issue
        as stored, whether it is new).

        The identity is ``issue["key"]`` when given (type, agent and alert code or checklist
        item — never text that changes between batches, like a line count), else type, agent
        and description. A repeat adds its ``occurrences`` (default 1) to ``count`` and moves
        ``last_seen``; ids come from a per-play sequence and are never reused."""
        assert issue["issue_type"] in ISSUE_TYPES, issue["issue_type"]
        stored: dict[str, Any] = {}
        new = False
        issue = dict(issue)
        occurrences = max(1, int(issue.pop("occurrences", 1)))
        ident = _identity(issue)

        def fn(d: dict[str, Any]) -> None:
            nonlocal stored, new
            now = iso(self._clock())
            for existing in d["issues"]:
                if _identity(existing) == ident:
                    existing["count"] = int(existing.get("count", 1)) + occurrences
                    existing["last_seen"] = now
                    existing["description"] = issue["description"]
                    if issue.get("evidence"):
                        existing["evidence"] = issue["evidence"]
                    stored, new = existing, False
                    return
            seq = _issue_seq(d) + 1
            d["issue_seq"] = seq
            entry = {"detected_at": now, "last_seen": now, "remediation_spawned": False,
                     "count": occurrences, "id": f"issue-{seq}", **issue}
            d["issues"] = [*d["issues"], entry][-MAX_ISSUES:]
            stored, new = entry, True

        self.update(play_id, fn)
        return stored, new

    def set_issue_fields(self, play_id: str, issue_id: str, **fields: Any) -> None:
        def fn(d: dict[str, Any]) -> None:
            for issue in d["issues"]:
                if issue.get("id") == issue_id:
                    issue.update(fields)

        self.update(play_id, fn)


def _identity(issue: dict[str, Any]) -> tuple[str, ...]:
    if issue.get("key"):
        return ("key", str(issue["key"]))
    return ("text", issue["issue_type"], str(issue.get("agent", "")), issue["description"])


def _issue_seq(d: dict[str, Any]) -> int:
    """The last issue number used by this play (records from before the sequence existed
    are read off their ids)."""
    if "issue_seq" in d:
        return int(d["issue_seq"])
    numbers = [int(i["id"].rpartition("-")[2]) for i in d.get("issues", [])
               if str(i.get("id", "")).rpartition("-")[2].isdigit()]
    return max(numbers, default=0)


def _run_of(d: dict[str, Any]) -> dict[str, Any]:
    """An earlier run as the restarted play keeps it."""
    keep = ("started_at", "finished_at", "status", "finish_reason", "issues", "restarts")
    return {k: d[k] for k in keep if k in d}
