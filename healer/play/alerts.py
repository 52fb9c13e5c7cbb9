"""Play alerts (A1–A9) from the watchers, as issues of the one play pipeline.

A watcher (Kubernetes: ``healer.play.kube``; GitHub: the PR watcher) sees something wrong
with a play and calls ``AlertSink.fire(PlayAlert(...))``; when it sees the thing healthy again
it calls ``AlertSink.clear(code, play_id, agent, target)``. The sink turns that into exactly
what a play session issue is — the same incident (kind ``play``), gate claim, evaluation,
remediation (the strategy follows the alert's ``issue_type``: ``stuck`` → restart,
``build_failure`` → fix code, anything else → retry) and escalation
(``healer.play.remediate``) — never a pipeline of its own.

Identity: one alert is ``(code, play_id, agent)``; ``target`` (``pod/cto/play-task-4-abc``,
``pr/owner/repo#12``) says what it is about, and one alert may have several (two pods of one
agent). It fires while any target fires and clears when the last one clears. Each stretch of
firing is an *episode*: a repeat within an episode counts on the same issue and incident (no
second incident, no second remediation); a fire after a clear is a new episode, whose issue is
new and whose incident reopens.

Where the issue lives:

- **the play has an active session** — the alert is an issue of that session (``GET
  /api/v1/session/{play_id}`` shows it with ``target`` and ``link``), recorded through
  ``PlayService.report_issues`` like a pre-flight or log issue;
- **no active session** (the orchestrator never registered the play, or it finished while
  its pods still run) — the incident is opened all the same and the remediation cycle runs
  with a stand-in session made of what the alert knows (``detail["repository"]``,
  ``detail["namespace"]``); the issue is kept on the alert record (``play-alerts/<key>``).
  A stuck or crash-looping pod is worth a restart whether or not anyone registered the play,
  and the attempts are bounded the same way, so an unknown play ends with a person told.

The verifier of an alert's remediation is the alert itself: it is healed when the watcher
cleared it (``still_firing``). Clearing resolves the incident, which stops a remediation in
progress.

Getting a sink: ``AlertSink.for_play(play_service)`` (one per service), or in a loop service
factory ``AlertSink.from_healer(healer)`` (the play service's, or None without the play
capability). ``fire`` and ``clear`` are synchronous (a few store writes) and may be called
from the asyncio loop's thread or from any other thread: the remediation they start runs on
the loop the sink was bound to (``bind``; ``for_play`` binds the running loop when there is
one). With no loop at all (a one-shot CLI) the issue and incident are recorded and nothing is
started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

from healer.core import incidents as inc
from healer.core.names import safe_name
from healer.core.publish.sanitizer import scrub
from healer.errors import UsageError
from healer.play.sessions import ISSUE_TYPES, iso

# The play capability's service (``healer.play.service.PlayService``): not imported, since it
# imports this module (``still_firing`` is its verifier of an alert's remediation).
PlayService = Any

log = logging.getLogger(__name__)

KIND = "play-alerts"
FIRING_SET = "play-alerts-firing"  # store set: keys of alerts firing now
FIRING, CLEARED = "firing", "cleared"
SEVERITIES = ("info", "warning", "critical")
MAX_TARGETS = 20  # per alert; the oldest goes first
MAX_DETAIL_CHARS = 4000
MAX_TEXT = 300
_CODE = re.compile(r"A[1-9][0-9]?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_EXTRA_KEY = "play_alert_sink"


@dataclass(frozen=True)
class PlayAlert:
    """One observation that a play is in trouble."""

    code: str  # "A1".."A20"
    play_id: str
    agent: str  # the agent it is about; "" for the whole play
    target: str  # what it is about: "pod/cto/play-task-4-abc", "coderun/cto/x", "pr/o/r#12"
    severity: str  # info | warning | critical (the original's severities)
    summary: str  # one line a person understands
    issue_type: str  # the session issue type: agent_failure, stuck, build_failure, ...
    link: str = ""  # where to look (dashboard, PR URL)
    detail: dict[str, Any] = field(default_factory=dict)  # JSON data; repository, namespace …

    def validated(self) -> PlayAlert:
        """The alert with its names checked and its texts bounded and scrubbed."""
        if not _CODE.fullmatch(self.code):
            raise UsageError(f"alert code must be A1..A99, got {self.code!r}")
        safe_name(self.play_id, "play_id")
        if self.agent:
            safe_name(self.agent, "agent")
        if self.severity not in SEVERITIES:
            raise UsageError(f"alert severity must be one of {', '.join(SEVERITIES)}")
        if self.issue_type not in ISSUE_TYPES:
            raise UsageError(f"unknown issue type {self.issue_type!r}")
        target = _CONTROL.sub(" ", self.target)[:MAX_TEXT].strip()
        if not target:
            raise UsageError("an alert needs a target")
        detail = json.loads(json.dumps(self.detail, default=str))
        if len(json.dumps(detail)) > MAX_DETAIL_CHARS:
            detail = {k: v for k, v in detail.items() if isinstance(v, str | int | float | bool)}
            detail = {k: (v[:200] if isinstance(v, str) else v) for k, v in detail.items()}
        return PlayAlert(self.code, self.play_id, self.agent, target, self.severity,
                         scrub(_CONTROL.sub(" ", self.summary))[:MAX_TEXT],
                         self.issue_type, _CONTROL.sub("", self.link)[:500], detail)


def alert_key(code: str, play_id: str, agent: str) -> str:
    return inc.digest(f"{play_id}.{agent or 'play'}.{code}")


CLEARED_TTL_S = 7 * 86400.0  # a cleared alert's record is kept this long (its episodes)


def prune_cleared(store: Any, now: float, *, active: Container[str] = frozenset(),
                  ttl_s: float = CLEARED_TTL_S) -> int:
    """Delete the records of alerts cleared more than ``ttl_s`` ago, except those of plays in
    ``active`` (a play still running keeps counting its alerts' episodes). Returns how many."""
    n = 0
    for rec in list(store.list(KIND)):
        data = rec.data
        if data.get("status") != CLEARED or data.get("play_id") in active:
            continue
        if now - float(data.get("cleared_at") or data.get("last_seen") or now) > ttl_s:
            store.delete(KIND, rec.key)
            n += 1
    return n


def still_firing(store: Any, key: str) -> bool:
    """Whether the alert ``key`` (an issue's ``alert``) is firing now: the verifier of its
    remediation."""
    rec = store.get(KIND, key)
    return bool(rec and rec.data.get("status") == FIRING)


def firing(store: Any, play_id: str | None = None) -> list[dict[str, Any]]:
    """The alerts firing now (of one play), most recently seen first."""
    out = []
    for key in store.members(FIRING_SET):
        rec = store.get(KIND, key)
        if rec and rec.data.get("status") == FIRING and (
                play_id is None or rec.data.get("play_id") == play_id):
            out.append(rec.data)
    return sorted(out, key=lambda d: d.get("last_seen", 0), reverse=True)


class AlertSink:
    """Where watchers send play alerts; see the module docstring."""

    def __init__(self, play: PlayService, *, loop: asyncio.AbstractEventLoop | None = None):
        self.play = play
        self.store = play.store
        self._loop = loop
        self._lock = threading.Lock()

    @classmethod
    def for_play(cls, play: PlayService) -> AlertSink:
        sink: AlertSink | None = play.alert_sink
        if sink is None:
            sink = cls(play)
            play.alert_sink = sink
        with contextlib.suppress(RuntimeError):  # no loop running: bind one later
            sink.bind(asyncio.get_running_loop())
        return sink

    @classmethod
    def from_healer(cls, healer: Any) -> AlertSink | None:
        """The play capability's sink in a running loop (None without it)."""
        sink = healer.extras.get(_EXTRA_KEY)
        if sink is None:
            play = (healer.extras.get("api_services") or {}).get("play")
            if play is None:
                return None
            sink = cls.for_play(play)
            healer.extras[_EXTRA_KEY] = sink
        return sink  # type: ignore[no-any-return]

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the remediations this sink starts on ``loop``."""
        self._loop = loop

    # -- the interface -------------------------------------------------------------------------

    def fire(self, alert: PlayAlert) -> None:
        """``alert`` is firing: open its issue and incident (a new episode starts a
        remediation through the gate), or count it again."""
        alert = alert.validated()
        key = alert_key(alert.code, alert.play_id, alert.agent)
        now = self.play.clock()
        out: dict[str, Any] = {}

        def fn(cur: dict[str, Any] | None) -> dict[str, Any]:
            rec = cur or {"key": key, "code": alert.code, "play_id": alert.play_id,
                          "agent": alert.agent, "episode": 0, "status": CLEARED,
                          "targets": {}}
            out["new"] = rec.get("status") != FIRING
            if out["new"]:
                rec.update(episode=int(rec.get("episode", 0)) + 1, status=FIRING,
                           first_seen=now, count=0, targets={}, cleared_at=None)
            targets = dict(rec.get("targets") or {})
            targets[alert.target] = {"link": alert.link, "summary": alert.summary,
                                     "detail": alert.detail, "last_seen": now,
                                     "first_seen": (targets.get(alert.target) or {}).get(
                                         "first_seen", now)}
            if len(targets) > MAX_TARGETS:
                targets = dict(sorted(targets.items(),
                                      key=lambda kv: kv[1]["last_seen"])[-MAX_TARGETS:])
            rec.update(targets=targets, last_seen=now, count=int(rec.get("count", 0)) + 1,
                       severity=alert.severity, summary=alert.summary,
                       issue_type=alert.issue_type, target=alert.target, link=alert.link)
            return rec

        with self._lock:
            rec = self.store.update(KIND, key, fn)
        assert rec is not None
        self.store.add_member(FIRING_SET, key)
        data = rec.data
        issue = self._issue(alert, key, int(data["episode"]))
        new_target = out["new"] or data["targets"][alert.target]["first_seen"] == now
        session = self._session(alert.play_id)
        if session is not None:
            # The remediation is scheduled here but runs after this call returns (on this
            # loop, or handed to the bound one), so the incident shows its target first.
            stored = self.play.report_issues(alert.play_id, [issue], start=self._start)
            if stored:
                self._note(key, issue_id=stored[0]["id"], session=True)
                issue["id"] = stored[0]["id"]
            self._show(alert, issue, new_target)
            return
        issue["id"] = inc.digest(f"alert-{key}-{data['episode']}")
        issue["sessionless"] = True
        if out["new"]:
            self._note(key, issue_id=issue["id"], session=False, issue=issue)
            log.warning("play %s (no active session): %s", alert.play_id, alert.summary)
        self.play.remediator.sighted(alert.play_id, issue)
        self._show(alert, issue, new_target)
        if out["new"]:
            self._start(self.play.remediator.handle(alert.play_id, issue))

    def heal_again(self) -> int:
        """Remediate anew the firing sessionless alerts a person handed back
        (``Remediator.handed_back``). An alert on a session's play is an issue of it: the play
        evaluation re-runs those. Returns how many were started."""
        rem = self.play.remediator
        started = 0
        for data in firing(self.store):
            if data.get("session") or not data.get("issue"):
                continue
            issue, play_id = dict(data["issue"]), str(data.get("play_id", ""))
            if not rem.handed_back(play_id, issue):
                continue
            log.warning("play %s: %s handed back by a person, remediating again", play_id,
                        data.get("code", ""))
            self._start(rem.handle(play_id, issue))
            started += 1
        return started

    def _show(self, alert: PlayAlert, issue: dict[str, Any], new_target: bool) -> None:
        """Put the object behind the alert on its incident (``target``, ``links``)."""
        if new_target:
            iid = self.play.remediator.incident_id(alert.play_id, issue)
            links = {"dashboard": alert.link} if alert.link else {}
            self.play.remediator.ledger.update(iid, "target", target=alert.target,
                                               **({"links": links} if links else {}))

    def clear(self, code: str, play_id: str, agent: str, target: str) -> None:
        """``target`` is healthy again; the alert clears (its incident resolves, a remediation
        in progress stops) when it was its last firing target."""
        key = alert_key(code, play_id, agent)
        now = self.play.clock()
        out: dict[str, Any] = {}

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None or cur.get("status") != FIRING:
                return None
            targets = dict(cur.get("targets") or {})
            if target not in targets and targets:
                return None
            targets.pop(target, None)
            cur["targets"] = targets
            if not targets:
                cur.update(status=CLEARED, cleared_at=now)
                out["cleared"] = True
            return cur

        with self._lock:
            rec = self.store.update(KIND, key, fn)
        if not out.get("cleared") or rec is None:
            return
        self.store.remove_member(FIRING_SET, key)
        data = rec.data
        issue = self._issue_of(data)
        if issue is None:
            return
        iid = self.play.remediator.incident_id(play_id, issue)
        self.play.remediator.ledger.resolve(iid, f"{code} cleared: {target} recovered")
        if data.get("session"):
            self.play.mark_issue(play_id, str(data.get("issue_id", "")), resolved=True,
                                 resolved_at=iso(now))
        log.info("play %s: %s cleared (%s)", play_id, code, target)

    # -- helpers --------------------------------------------------------------------------------

    def _issue(self, alert: PlayAlert, key: str, episode: int) -> dict[str, Any]:
        issue: dict[str, Any] = {
            "issue_type": alert.issue_type, "severity": alert.severity,
            "description": alert.summary or f"{alert.code} on {alert.target}",
            "code": alert.code, "key": f"alert.{alert.code}.{alert.agent or 'play'}.{episode}",
            "alert": key, "target": alert.target, "evidence": [alert.summary],
        }
        if alert.agent:
            issue["agent"] = alert.agent
        if alert.link:
            issue["link"] = alert.link
        for name in ("task_id", "repository", "namespace"):
            if alert.detail.get(name) not in (None, ""):
                issue[name] = alert.detail[name]
        return issue

    def _issue_of(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """The issue an alert record's episode became (to find its incident)."""
        if data.get("issue"):
            return dict(data["issue"])
        if not data.get("issue_type"):
            return None
        return {"issue_type": data["issue_type"], "agent": data.get("agent", ""),
                "code": data.get("code", ""), "alert": data.get("key", "")}

    def _note(self, key: str, **fields: Any) -> None:
        self.store.update(KIND, key, lambda cur: {**cur, **fields} if cur else None)

    def _session(self, play_id: str) -> dict[str, Any] | None:
        session = self.play.registry.get(play_id)
        return session if session and session.get("status") == "active" else None

    def _start(self, coro: Any) -> None:
        """Run a remediation on the bound loop, from whichever thread fires."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and (self._loop is None or running is self._loop):
            self.play.track(coro)
            return
        loop = self._loop
        if loop is not None and loop.is_running() and not loop.is_closed():
            loop.call_soon_threadsafe(self.play.track, coro)
            return
        coro.close()  # no loop anywhere: recorded only (see the module docstring)
