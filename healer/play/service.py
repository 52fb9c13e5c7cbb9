"""The play healer as one object: sessions, pre-flight, and background remediation.

The HTTP routes call it; the loop owns it: background remediations stop with the loop (each
hands its remediation over: ``healer.play.ownership``), the ``play-takeover`` duty resumes
the remediations whose replica stopped, and start-up recovery settles what a crash left from
before remediations had leases.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from healer.agents import failures
from healer.agents.task import AgentTask, RunOutcome
from healer.config import Settings
from healer.core import gate
from healer.core.store import Store
from healer.errors import HostNotAllowedError
from healer.play import alerts, evaluate, preflight
from healer.play.remediate import KIND as REMEDIATIONS
from healer.play.remediate import RUNNING, Remediator, claim_key, running_keys
from healer.play.runtime import AgentRuntime
from healer.play.sessions import (
    SessionRegistry,
    iso,
    tools_server_host,
    tools_server_refusal,
)

log = logging.getLogger(__name__)

MAX_EVIDENCE = 10


class PlayService:
    def __init__(self, settings: Settings, store: Store, *, metrics: Any = None,
                 run_agent: Callable[[AgentTask], Any] | None = None,
                 dispatcher: Any = None, clock: Callable[[], float] = time.time,
                 owner: str = ""):
        self.settings = settings
        self.store = store
        self.dispatcher = dispatcher  # the loop's (bus attached); else made on first use
        self.metrics = metrics
        self.clock = clock
        self.registry = SessionRegistry(store, clock=clock)
        self._engine: Any = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.remediator = Remediator(settings, store, self.registry,
                                     run_agent=run_agent or self._run_agent,
                                     still_broken=self.still_broken, metrics=metrics,
                                     clock=clock, owner=owner)
        self.runtime = AgentRuntime(settings, store, self.registry,
                                    run_agent=self.remediator.run_agent,
                                    ledger=self.remediator.ledger,
                                    issues=self.remediator.issues, track=self.track,
                                    clock=clock, metrics=metrics)
        # The watchers' alert sink (healer.play.alerts), set when a watcher first fires.
        self.alert_sink: alerts.AlertSink | None = None

    # -- agents ----------------------------------------------------------------------------

    async def _run_agent(self, task: AgentTask) -> RunOutcome:
        if self.dispatcher is None:
            from healer.agents import dispatcher

            self.dispatcher = dispatcher(self.settings)
        outcome: RunOutcome = await self.dispatcher.run(task)
        return outcome

    @property
    def engine(self) -> Any:
        if self._engine is None:
            from healer.detect.catalog import Catalog
            from healer.detect.engine import Engine

            d = self.settings.detect
            self._engine = Engine(Catalog.load(d.catalog or None, d.catalog_mode),
                                  max_line_chars=d.max_line_chars,
                                  preflight_window_s=d.preflight_window_s, clock=self.clock)
        return self._engine

    # -- sessions --------------------------------------------------------------------------

    def start_session(self, body: dict[str, Any]) -> dict[str, Any]:
        """Register a play; ``HostNotAllowedError`` when it names a ``tools_server`` host
        outside ``play.tools_server_hosts`` (nothing is recorded then)."""
        url = str(body.get("tools_server") or "")
        refused = url and tools_server_refusal(url, self.settings.play.tools_server_hosts)
        if refused:
            raise HostNotAllowedError(f"session refused: {refused}",
                                      host=tools_server_host(url),
                                      setting="play.tools_server_hosts")
        data = self.registry.start(body)
        self.runtime.forget(data["play_id"])  # a new run: nothing of the last one is held
        if self.metrics is not None:
            self.metrics.sessions_started.inc()
        # DEBUG: orchestrators may start plays by the thousand a second, and this line was a
        # tenth of the API's time per start (the record itself says when each play started).
        log.debug("play %s started: %d agent(s)", data["play_id"], len(data["expected_tools"]))
        return data

    async def check_tools_server(self, play_id: str) -> dict[str, Any] | None:
        """Pre-flight "tools-server reachable": GET the play's tools-server URL (no redirects,
        no proxy, short timeout). Unreachable → an mcp_init_failed issue (A12) for the play.
        The host is checked against ``play.tools_server_hosts`` again here (the session may
        predate the setting): outside it, nothing is connected to."""
        session = self.registry.require(play_id)
        url = session.get("tools_server") or ""
        if not url:
            return None
        import httpx

        refused = tools_server_refusal(url, self.settings.play.tools_server_hosts)
        if refused:
            ok, detail = False, f"not probed: {refused}"
        else:
            try:
                async with httpx.AsyncClient(timeout=5.0, follow_redirects=False,
                                             trust_env=False) as client:
                    resp = await client.get(url)
                ok, detail = resp.status_code < 500, f"HTTP {resp.status_code}"
            except (httpx.HTTPError, ValueError) as exc:
                ok, detail = False, f"{type(exc).__name__}: {exc}"[:300]
        item = {"ok": ok, "detail": f"{url}: {detail}"}

        def fn(d: dict[str, Any]) -> None:
            d["preflight"]["tools_server_reachable"] = item

        self.registry.update(play_id, fn)
        if refused:
            # Nothing was contacted, so nothing is known to be broken: no agent is sent after
            # a host healer may not reach (the session start refuses such hosts anyway).
            log.warning("play %s: tools-server not probed: %s", play_id, refused)
        elif not ok:
            self._record(play_id, [self._issue(
                "mcp_init_failed", "critical", "", f"tools-server unreachable: {url}",
                code="A12", evidence=[detail])])
        return item

    def finish_session(self, play_id: str, status: str, reason: str) -> dict[str, Any]:
        data = self.registry.finish(play_id, status, reason)
        self.runtime.forget(play_id)
        return data

    def _agent_started(self, play_id: str, agent: str, ts: float | None) -> float:
        """When ``agent`` started: first seen (or its own first timestamp), recorded once.
        Also notes the agent's latest activity (for stuck detection)."""
        started: float = 0.0
        now = self.clock()

        def fn(d: dict[str, Any]) -> None:
            nonlocal started
            entry = d["agents"].setdefault(agent, {})
            if "started_epoch" not in entry:
                entry["started_epoch"] = ts if ts is not None else now
                entry["started_at"] = iso(entry["started_epoch"])
            entry["last_activity"] = now
            started = float(entry["started_epoch"])

        self.registry.update(play_id, fn)
        return started

    # -- pre-flight ------------------------------------------------------------------------

    async def record_inventory(self, play_id: str, report: dict[str, Any]) -> dict[str, Any]:
        session = self.registry.require(play_id)
        agent = report["agent"]
        self._agent_started(play_id, agent, None)
        verdict = preflight.check_inventory(session, report)
        now = self.clock()

        def fn(d: dict[str, Any]) -> None:
            entry = d["agents"].setdefault(agent, {})
            entry["inventory"] = sorted(set(report["tools"]))[:2000]
            entry["inventory_at"] = now
            entry["missing_tools"] = verdict.missing_tools
            entry.setdefault("checklist", {}).update(verdict.items)

        self.registry.update(play_id, fn)
        issues = []
        if "agent_type_identified" in verdict.failed:
            issues.append(self._issue("pre_flight_failure", "critical", agent,
                                      verdict.items["agent_type_identified"]["detail"]))
        if verdict.missing_tools:
            issues.append(self._issue(
                "tool_mismatch", "critical", agent,
                f"{agent} is missing declared tools: {', '.join(verdict.missing_tools)}",
                missing_tools=verdict.missing_tools))
        if verdict.failed_servers:
            issues.append(self._issue(
                "mcp_init_failed", "critical", agent,
                f"{agent}: MCP server(s) failed to initialize: "
                f"{', '.join(verdict.failed_servers)}"))
        if "cto_config_loaded" in verdict.failed:
            issues.append(self._issue("config_error", "critical", agent,
                                      f"{agent}: cto-config not loaded"))
        for item, issue_type in (("role_matches_task", "pre_flight_failure"),
                                 ("template_loaded", "pre_flight_failure"),
                                 ("language_context_set", "language_mismatch")):
            if item in verdict.failed:
                issues.append(self._issue(issue_type, "warning", agent,
                                          f"{agent}: {verdict.items[item]['detail']}"))
        recorded = self._record(play_id, issues)
        return {**verdict.as_dict(), "issues": recorded}

    async def ingest_logs(self, play_id: str, agent: str, lines: list[str], *,
                          task_id: Any = None) -> dict[str, Any]:
        self.registry.require(play_id)
        first_ts = None
        for line in lines[:50]:
            first_ts = self.engine.first_line_ts(line.encode("utf-8", "replace"))
            if first_ts is not None:
                break
        start = self._agent_started(play_id, agent, first_ts)
        alerts = await asyncio.to_thread(self.engine.scan_lines, lines,
                                         source=f"{play_id}/{agent}", start_time=start)
        verdict = preflight.check_alerts(agent, alerts)
        issues: list[dict[str, Any]] = []
        by_item: dict[str, list[Any]] = {}
        for a in alerts:
            if a.priority in (1, 3):
                by_item.setdefault(preflight.item_for(a) or "local_servers_initialized",
                                   []).append(a)
        for item, hits in by_item.items():
            first = hits[0]
            issue_type = evaluate.issue_type_for_alert(first.code, 1)
            if issue_type == "tool_mismatch" and verdict.missing_tools:
                desc = f"{agent} is missing declared tools: {', '.join(verdict.missing_tools)}"
            else:
                desc = f"{agent}: {verdict.items.get(item, {}).get('detail', first.line)}"[:300]
            severity = "critical" if first.severity == "critical" else "warning"
            evidence = [a.line for a in hits[:MAX_EVIDENCE]]
            issues.append(self._issue(issue_type, severity, agent, desc, code=first.code,
                                      key=f"{issue_type}:{agent}:{item}",
                                      occurrences=len(hits), evidence=evidence,
                                      missing_tools=verdict.missing_tools
                                      if issue_type == "tool_mismatch" else [],
                                      task_id=task_id))
        classified = [a for a in alerts if a.pattern is not None and a.pattern.failure_class]
        runtime = [a for a in alerts if a.priority == 2 and a not in classified]
        for code in sorted({a.code for a in runtime}):
            hits = [a for a in runtime if a.code == code]
            worst = "critical" if any(a.severity == "critical" for a in hits) else "warning"
            issues.append(self._issue(
                evaluate.issue_type_for_alert(code, 2), worst, agent,
                f"{agent}: {hits[0].meaning or hits[0].id} ({len(hits)} line(s))"[:300],
                code=code, key=f"runtime:{agent}:{code}", occurrences=len(hits),
                evidence=[a.line for a in hits[:MAX_EVIDENCE]], task_id=task_id))
        now = self.clock()

        def fn(d: dict[str, Any]) -> None:
            entry = d["agents"].setdefault(agent, {})
            entry.setdefault("checklist", {}).update(verdict.items)
            seen = entry.setdefault("last_alert_at", {})
            for a in alerts:
                seen[a.code] = now

        if alerts:
            self.registry.update(play_id, fn)
            if self.metrics is not None:
                for a in alerts:
                    if a in classified:
                        continue
                    self.metrics.incidents.labels(code=a.code).inc()
        recorded = self._record(play_id, issues)
        return {"alerts": [a.to_dict() for a in alerts], "issues": recorded,
                "checklist": verdict.items,
                "runtime": self._runtime(play_id, agent, classified, lines)}

    def _runtime(self, play_id: str, agent: str, classified: list[Any], lines: list[str]
                 ) -> dict[str, Any] | None:
        """Runtime failures (rate limits, bad keys, stale sessions …) take their own path
        (healer.play.runtime); logs without one tell a waiting or paused agent works again."""
        if not classified:
            if lines:
                self.runtime.cleared(play_id, agent)
            return None
        first = min(classified, key=lambda a: (failures.PRECEDENCE[a.pattern.failure_class],
                                               a.line_no))
        evidence = [a.line for a in classified if a.code == first.code][:MAX_EVIDENCE]
        if self.metrics is not None:
            self.metrics.incidents.labels(code=first.code).inc()
        # A reset time may sit on a line of its own (a wrapper logging the response headers).
        return self.runtime.report(play_id, agent, first.code, evidence, context=lines[:200])

    def _issue(self, issue_type: str, severity: str, agent: str, description: str,
               **extra: Any) -> dict[str, Any]:
        issue: dict[str, Any] = {"issue_type": issue_type, "severity": severity,
                                 "description": description}
        if agent:
            issue["agent"] = agent
        issue.update({k: v for k, v in extra.items() if v not in (None, [], "")})
        return issue

    def report_issues(self, play_id: str, issues: list[dict[str, Any]], *,
                      start: Callable[[Any], None] | None = None) -> list[dict[str, Any]]:
        """Record issues a watcher found (``healer.play.alerts``) on the play's session, the
        way its own pre-flight and log issues are; ``start`` runs a new issue's remediation
        (default: on this thread's loop)."""
        return self._record(play_id, issues, start=start)

    def mark_issue(self, play_id: str, issue_id: str, **fields: Any) -> None:
        """Set fields of one issue of the session (nothing when the session is gone)."""
        if issue_id and self.registry.get(play_id) is not None:
            self.registry.set_issue_fields(play_id, issue_id, **fields)

    def _record(self, play_id: str, issues: list[dict[str, Any]], *,
                start: Callable[[Any], None] | None = None) -> list[dict[str, Any]]:
        """Record issues on the session at once; start remediation for the new ones."""
        out = []
        for issue in issues:
            stored, new = self.registry.add_issue(play_id, issue)
            out.append(stored)
            # The incident moves with the session's issue: opened, or counted again.
            self.remediator.sighted(play_id, stored, int(issue.get("occurrences", 1)))
            if new:
                log.warning("play %s: %s (%s)", play_id, stored["description"],
                            stored["issue_type"])
                (start or self.track)(self.remediator.handle(play_id, stored))
        return out

    def track(self, coro: Any) -> None:
        """Run ``coro`` in the background, owned by this service (cancelled on stop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            return  # no loop (a synchronous caller): the loop's recovery picks it up
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("remediation task failed: %s", task.exception())

    def still_broken(self, play_id: str, issue: dict[str, Any], since: float) -> bool:
        """Is there evidence, newer than ``since``, that the issue persists? An alert's issue
        persists while its watcher has not cleared it."""
        if issue.get("alert"):
            return alerts.still_firing(self.store, str(issue["alert"]))
        session = self.registry.get(play_id) or {}
        entry = (session.get("agents") or {}).get(issue.get("agent", ""), {})
        if issue["issue_type"] == "tool_mismatch" and entry.get("inventory_at", 0) >= since:
            wanted = set(issue.get("missing_tools") or [])
            return bool(wanted - set(entry.get("inventory") or []))
        code = issue.get("code")
        return bool(code and (entry.get("last_alert_at") or {}).get(code, 0) >= since)

    def evaluate_sessions(self) -> int:
        """The periodic evaluation: an agent of an active play that has gone silent for
        ``play.stuck_after_s`` is stuck (A9) and gets a restart; an escalated issue a person
        handed back (its incident open again: "heal again") is remediated anew. Returns
        issues recorded."""
        now = self.clock()
        found = 0
        for play_id in self.registry.active_ids():
            session = self.registry.get(play_id)
            if not session or session["status"] != "active":
                continue
            self._heal_again(play_id, session)
            for agent, entry in (session.get("agents") or {}).items():
                last = float(entry.get("last_activity") or entry.get("started_epoch") or now)
                silent = now - last
                if silent >= self.settings.play.stuck_after_s:
                    self._record(play_id, [self._issue(
                        "stuck", "warning", agent, f"{agent} stopped making progress",
                        code="A9", evidence=[f"no logs or reports for {int(silent)} s"])])
                    found += 1
        if self.alert_sink is not None:
            self.alert_sink.heal_again()
        return found

    def prune_alerts(self) -> int:
        """Forget watcher alerts cleared a week ago (``alerts.prune_cleared``)."""
        return alerts.prune_cleared(self.store, self.clock(),
                                    active=set(self.registry.active_ids()))

    def _heal_again(self, play_id: str, session: dict[str, Any]) -> None:
        """Remediate again the escalated issues whose incident a person reopened."""
        for issue in session.get("issues") or []:
            if not issue.get("escalated") or issue.get("resolved"):
                continue
            if not self.remediator.handed_back(play_id, issue):
                continue
            log.warning("play %s: %s handed back by a person, remediating again", play_id,
                        issue["issue_type"])
            self.registry.set_issue_fields(play_id, issue["id"], escalated=False)
            self.track(self.remediator.handle(play_id, {**issue, "escalated": False}))

    async def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait for background remediations (tests, --once); whether all ended."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
        return not self._tasks

    async def stop(self) -> None:
        """Stop the background remediations: each gives its lease back and leaves its
        remediation running (its gate claim held) for the ``play-takeover`` duty of a
        replica — another, or this one restarted — to resume within a third of the lease."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)

    async def take_over(self) -> int:
        """The ``play-takeover`` duty: resume here the remediations whose run stopped
        renewing its lease (``Remediator.take_over``). Returns how many. The leases seized
        are this replica's even if the duty moves on meanwhile (the pass is cancelled): their
        runs start all the same, rather than wait for the seized leases to expire."""
        seizing = asyncio.ensure_future(asyncio.to_thread(self.remediator.take_over))
        seizing.add_done_callback(self._resume)
        return len(await asyncio.shield(seizing))

    def _resume(self, seizing: asyncio.Future[list[Any]]) -> None:
        if not seizing.cancelled() and seizing.exception() is None:
            for run in seizing.result():
                self.track(self.remediator.resume(run))

    def recover(self) -> int:
        """Start-up. A remediation left 'running' with an owner is its lease's: its run
        renews it on a live replica, or the ``play-takeover`` duty resumes it once the lease
        expired — never settled here, where it may be another replica's live run. One without
        an owner (recorded before remediations had leases) is marked interrupted so it can
        run again, and its gate claim released (no other kind's reconcile judges play's
        claims, so a dead one would hold a slot of the global cap until its key is claimed
        again)."""
        n = 0
        for key in running_keys(self.store):
            rec = self.store.get(REMEDIATIONS, key)
            if rec is not None and rec.data.get("status") == "running":
                if rec.data.get("owner"):
                    continue  # the lease's to settle (see above)
                self.store.update(REMEDIATIONS, key,
                                  lambda d: {**(d or {}), "status": "interrupted"})
                gate.release(self.store, claim_key(key), str(rec.data.get("run_id", "")))
                n += 1
            self.store.remove_member(RUNNING, key)
        return n


class PlayLoopService:
    name = "play"

    def __init__(self, play: PlayService):
        self.play = play

    async def start(self) -> None:
        n = self.play.recover()
        if n:
            log.info("marked %d interrupted remediation(s) from before leases", n)
        waits = self.play.runtime.recover()
        if waits:
            log.info("resumed %d wait(s) for a rate limit or overload", waits)

    async def stop(self) -> None:
        await self.play.stop()


def create_service(healer: Any) -> PlayLoopService:
    play = PlayService(healer.settings, healer.store, metrics=healer.extras.get("metrics"),
                       dispatcher=healer.dispatcher, owner=healer.duties.owner)
    healer.extras.setdefault("api_services", {})["play"] = play
    healer.once("play-evaluate", healer.settings.play.evaluate_interval_s,
                 play.evaluate_sessions)
    healer.once("play-alerts-prune", 3600.0, play.prune_alerts)
    # A remediation whose replica stopped is resumed within a third of its lease time after
    # the lease expired (at once after a clean stop: the lease was given back).
    healer.once("play-takeover", healer.settings.ha.lease_ttl_s / 3, play.take_over)
    return PlayLoopService(play)

