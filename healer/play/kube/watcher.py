"""The Kubernetes watcher: cluster state → play alerts → the play pipeline.

One reflector per resource (pods, warning events, CodeRuns, Workflows; list + watch, see
``healer.play.kube.reflector``) keeps ``ClusterState``; after every change (coalesced) and
every ``kube.evaluate_interval_s`` the rules (``healer.play.kube.rules``) say which alerts
hold, and the watcher tells the play capability's ``AlertSink``:

- an alert that starts holding, or whose evidence changed (more restarts, another reason),
  **fires** (a new incident and remediation, or a count on the open one);
- an alert that stops holding **clears** (its incident resolves) only on evidence of
  recovery: its pod stayed Ready for ``kube.recovered_after_s``, its CodeRun's phase moved,
  its step ended, its play made progress. A pod that was *deleted* (healer's own restart
  deletes it) is no recovery: its alerts wait for another pod of the same play and agent to
  recover — so a restart that does not help counts as a failed attempt and the remediation
  climbs to a person, instead of "healing" every pod it kills. A play with no object left in
  the cluster clears after ``kube.orphan_ttl_s``.

With ``kube.follow_logs`` the containers' logs are followed too; each line counts as
progress of its play (A3), and with ``kube.detect_logs`` the lines of a play's agent pods go
to the play's log detection (``healer.play.kube.feed``), as if the agent had posted them.

In the loop it is the service ``kube`` (``create_service``), started only with
``kube.enabled``; the cluster may be unreachable at start — the reflectors keep retrying
with back-off, and ``healer doctor`` says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from healer.errors import KubeError
from healer.play import alerts as play_alerts
from healer.play import progress
from healer.play.alerts import AlertSink, PlayAlert
from healer.play.kube.client import CODERUNS, EVENTS, PODS, WORKFLOWS, Kind, KubeClient
from healer.play.kube.feed import AgentLogFeed
from healer.play.kube.logs import LogHub
from healer.play.kube.reflector import Reflector
from healer.play.kube.rules import AlertId, ClusterState, Rules, Tracked

log = logging.getLogger(__name__)

KUBE_TARGETS = ("pod/", "coderun/", "workflow/", "play/")


class KubeWatcher:
    name = "kube"

    def __init__(self, settings: Any, store: Any, sink: AlertSink, *,
                 client: KubeClient | None = None, clock: Callable[[], float] = time.time):
        self.settings = settings  # the whole Settings: kube and the rest
        self.kube = settings.kube
        self.store = store
        self.sink = sink
        self.client = client
        self.clock = clock
        self.state = ClusterState(self.kube, clock, started_at=clock())
        self.rules = Rules(self.kube, link=self.link,
                           progress_last=lambda play: progress.last(store, play))
        self.reflectors: list[Reflector] = []
        self.logs: LogHub | None = None
        self.feed: AgentLogFeed | None = None
        self.firing: dict[AlertId, tuple[Any, ...] | None] = {}
        self.connect_error = ""
        self.evaluations = 0
        self._dirty = asyncio.Event()
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    # -- links ---------------------------------------------------------------------------------

    def link(self, kind: str, namespace: str, name: str) -> str:
        template = self.kube.dashboard_url
        if not template:
            return ""
        try:
            return template.format(kind=kind, namespace=namespace, name=name)
        except (KeyError, IndexError, ValueError):
            return ""

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._stopping.is_set():  # started again: this replica leads the watcher again
            self.client, self.logs, self.feed = None, None, None
            self.state = ClusterState(self.kube, self.clock, started_at=self.clock())
            self.reflectors, self._tasks = [], []
            self._stopping = asyncio.Event()
        self._load_firing()
        self._tasks.append(asyncio.ensure_future(self._run()))

    async def _run(self) -> None:
        delay = 0.5
        while self.client is None and not self._stopping.is_set():
            try:
                self.client = await KubeClient.connect(self.kube)
                self.connect_error = ""
            except KubeError as exc:
                if str(exc) != self.connect_error:
                    log.warning("kube watcher: %s (retrying)", exc)
                self.connect_error = str(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), timeout=delay)
                delay = min(self.kube.backoff_max_s, delay * 2)
        if self.client is None:
            return
        kinds: list[tuple[Kind, str]] = [(PODS, self.kube.pod_selector), (EVENTS, "")]
        if self.kube.watch_coderuns:
            kinds.append((CODERUNS, self.kube.coderun_selector))
        if self.kube.watch_workflows:
            kinds.append((WORKFLOWS, self.kube.workflow_selector))
        if self.kube.follow_logs:
            self.logs = LogHub(self.client, self._line, max_streams=self.kube.max_log_streams,
                               backoff_max_s=self.kube.backoff_max_s)
            if self.kube.detect_logs:
                self.feed = AgentLogFeed(self.sink.play)
        for kind, selector in kinds:
            r = Reflector(self.client, kind, namespace=self.kube.namespace, selector=selector,
                          on_sync=lambda items, p=kind.plural: self._sync(p, items),
                          on_event=lambda t, o, p=kind.plural: self._event(p, t, o),
                          page_size=self.kube.page_size,
                          watch_timeout_s=self.kube.watch_timeout_s,
                          backoff_max_s=self.kube.backoff_max_s,
                          max_objects=self.kube.max_objects)
            self.reflectors.append(r)
            self._tasks.append(asyncio.ensure_future(r.run(self._stopping)))
        log.info("kube watcher: %s namespace %s (%s)", self.client.server, self.kube.namespace,
                 ", ".join(k.plural for k, _ in kinds))
        await self._evaluator()

    async def stop(self) -> None:
        self._stopping.set()
        if self.logs is not None:
            await self.logs.stop()
        if self.feed is not None:
            await self.feed.stop()
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        if self.client is not None:
            await self.client.close()
        progress.flush(self.store)

    async def _evaluator(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), timeout=self.kube.evaluate_interval_s)
            self._dirty.clear()
            if self._stopping.is_set():
                return
            await asyncio.sleep(0.05)  # let a burst of events land before judging them
            try:
                self.evaluate()
            except Exception:
                log.exception("kube watcher: evaluating the rules failed")

    # -- state ----------------------------------------------------------------------------------

    def _sync(self, plural: str, items: list[dict[str, Any]]) -> None:
        self.state.sync(plural, items)
        if plural == "pods" and self.logs is not None:
            self.logs.sync([o for o in items if not self.state.excluded("pods", o)])
        self._dirty.set()

    def _event(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        self.state.apply(plural, kind, obj)
        if plural == "pods" and self.logs is not None and not self.state.excluded("pods", obj):
            self.logs.event(kind, obj)
        if plural != "events":
            self._dirty.set()

    def _line(self, source: str, ts: float, text: str) -> None:
        _, ns, name, _container = source.split("/", 3)
        t = self.state.pods.get((ns, name))
        if t is not None and t.owner is not None:
            progress.note(self.store, t.owner.play_id, f"log:{source}", ts or self.clock())
            if self.feed is not None and t.owner.agent:
                self.feed.add(t.owner.play_id, t.owner.agent, ts, text)

    def _load_firing(self) -> None:
        """Alerts this watcher fired before a restart (the sink's records) are judged again:
        cleared when recovered, counted again when they still hold."""
        for rec in play_alerts.firing(self.store):
            for target in rec.get("targets") or {}:
                if target.startswith(KUBE_TARGETS):
                    self.firing[(rec["code"], rec["play_id"], rec.get("agent", ""),
                                 target)] = None

    # -- judging ----------------------------------------------------------------------------------

    def evaluate(self) -> dict[AlertId, PlayAlert]:
        """Run the rules and tell the sink what started, changed and recovered."""
        now = self.clock()
        self.state.refresh()
        holding = self.rules.alerts(self.state, now)
        self.evaluations += 1
        for aid, alert in holding.items():
            sig = _signature(alert)
            if aid not in self.firing or (self.firing[aid] is not None
                                          and self.firing[aid] != sig):
                self.sink.fire(alert)
            self.firing[aid] = sig
        for aid in [a for a in self.firing if a not in holding]:
            if self._recovered(aid, now):
                code, play, agent, target = aid
                self.sink.clear(code, play, agent, target)
                del self.firing[aid]
        return holding

    def _recovered(self, aid: AlertId, now: float) -> bool:
        _code, play, agent, target = aid
        kind, _, rest = target.partition("/")
        ns, _, name = rest.partition("/")
        if kind == "play":
            return True  # progress resumed, or no work is running any more
        if kind == "coderun" and (ns, name) in self.state.coderuns:
            return True  # its phase moved, or it finished
        if kind == "workflow" and (ns, name.split("/")[0]) in self.state.workflows:
            return True  # the step ended
        if kind == "pod" and (ns, name) in self.state.pods:
            return self._pod_recovered(self.state.pods[(ns, name)], now)
        # The object is gone: only a sibling's recovery (or the play's end) clears it.
        siblings = [t for t in self.state.objects_of(play)
                    if t.owner is not None and t.owner.agent == agent]
        if any(self._pod_recovered(t, now) for t in siblings if "containerStatuses" in
               t.obj["status"]):
            return True
        if any(t.obj["status"].get("phase") == "Succeeded" for t in siblings):
            return True
        gone = self.state.gone.get(play)
        return bool(gone is not None and not self.state.objects_of(play)
                    and now - gone >= self.kube.orphan_ttl_s)

    def _pod_recovered(self, t: Tracked, now: float) -> bool:
        return t.healthy_since is not None and (
            t.obj["status"].get("phase") == "Succeeded"
            or now - t.healthy_since >= self.kube.recovered_after_s)

    def status(self) -> dict[str, Any]:
        return {
            "server": self.client.server if self.client else "",
            "namespace": self.kube.namespace, "connect_error": self.connect_error,
            "tracked": {"pods": len(self.state.pods), "coderuns": len(self.state.coderuns),
                        "workflows": len(self.state.workflows)},
            "firing": len(self.firing), "log_streams": self.logs.streams if self.logs else 0,
            "log_lines_judged": self.feed.fed if self.feed else 0,
            "log_lines_sessionless": self.feed.skipped if self.feed else 0,
            "reflectors": {r.kind.plural: {"synced": r.stats.synced, "lists": r.stats.lists,
                                           "watches": r.stats.watches, "gone": r.stats.gone,
                                           "errors": r.stats.errors,
                                           "last_error": r.stats.last_error}
                           for r in self.reflectors},
        }


def _signature(alert: PlayAlert) -> tuple[Any, ...]:
    """What makes a repeat worth counting: the reason and the restart count, not the times
    in the summary."""
    d = alert.detail
    return alert.severity, d.get("reason", ""), d.get("restarts", 0), d.get("exit_code")


def create_service(healer: Any) -> Any:
    """The loop's ``kube`` service: only with ``kube.enabled`` and the play capability."""
    if not healer.settings.kube.enabled:
        return None
    sink = AlertSink.from_healer(healer)
    if sink is None:
        log.warning("kube.enabled but the play capability is not loaded: not watching")
        return None
    watcher = KubeWatcher(healer.settings, healer.store, sink)
    healer.extras["kube_watcher"] = watcher
    return healer.lead("kube-watcher", watcher)  # started while this replica leads it
