"""The living-context service: intake, background heals, the post-fix watch, the Loki rules.

One ``ContextService`` per process. The webhook routes hand it signals (``ingest``): intake and
the gate run at once (a few store writes), healing runs start as background tasks, and the
route answers. The loop adds two periodic jobs (``create_service``):

* ``context-watch`` (``context.watch_interval_s``): asks the forge about fix PRs — a merged fix
  starts its watch, a fix that holds for ``context.watch_s`` resolves the incident, a closed PR
  reopens it — resumes attempts ``held`` by healer's own model access once the hold is over,
  and admits again incidents the concurrency cap held back;
* ``context-loki`` (``context.loki_interval_s``, when ``context.loki_url`` is set): the LogQL
  rule runner.

A regression (the same alert after a merged fix, within the watch, once the fix's release is
seen) reopens the incident; ``healer.code.aftermerge`` prepares a draft revert PR and tells a
person.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from healer.code.aftermerge import AfterMerge
from healer.context.heal import ContextHealer
from healer.context.incidents import (
    FIX_REJECTED,
    FIXED,
    HEALING,
    OPEN,
    RESOLVED,
    IncidentBook,
    Receipt,
)
from healer.context.ingest import Signal
from healer.context.layers import LayerError
from healer.core.store import Store
from healer.selfheal import attempts as st

log = logging.getLogger(__name__)

MODEL_CHECK_TTL_S = 30.0
PRUNE_EVERY_S = 3600.0


def find_root(settings: Any) -> Path:
    """The repository being healed: ``selfheal.repo`` or the git work tree around the cwd."""
    if settings.selfheal.repo:
        return Path(settings.selfheal.repo).expanduser().resolve()
    start = Path.cwd().resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


class ContextService:
    name = "context"

    def __init__(self, settings: Any, store: Store, *, metrics: Any = None, executor: Any = None,
                 forge: Any = None, clock: Any = time.time, root: Path | None = None,
                 dispatcher: Any = None):
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.root = root or find_root(settings)
        self.book = IncidentBook(settings, store, root=self.root, clock=clock,
                                 model_available=self._model_available)
        self.healer = ContextHealer(settings, store, self.book, executor=executor, forge=forge,
                                    metrics=metrics, dispatcher=dispatcher, clock=clock)
        self.aftermerge = AfterMerge(settings, store, clock=clock, forge=forge, metrics=metrics)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._model: tuple[float, bool | str] = (0.0, False)
        self._pruned = 0.0

    def _model_available(self) -> bool | str:
        at, ok = self._model
        if at == 0.0 or time.monotonic() - at > MODEL_CHECK_TTL_S:
            ok = self.healer.available()
            self._model = (time.monotonic(), ok)
        return ok

    # --- intake -------------------------------------------------------------------------------

    def submit(self, signals: list[Signal]) -> list[Receipt]:
        """Record ``signals`` and run the gate (blocking: a few store writes each)."""
        out = []
        for sig in signals:
            r = self.book.receive(sig)
            out.append(r)
            if self.metrics is not None and r.action in ("opened", "reopened", "regression"):
                self.metrics.incidents.labels(code=f"context-{sig.source}").inc()
        return out

    async def ingest(self, signals: list[Signal]) -> list[Receipt]:
        """``submit`` off the event loop, then start what it admitted in the background."""
        receipts = await asyncio.to_thread(self.submit, signals)
        self.dispatch(receipts)
        return receipts

    def dispatch(self, receipts: list[Receipt]) -> None:
        for r in receipts:
            if r.heal:
                self._start(self.healer.heal(r.key), f"context-heal-{r.key}")
            elif r.action == "regression":
                self._start(self._regression(r.key), f"context-regression-{r.key}")

    def _start(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    async def drain(self, timeout: float | None = None) -> None:
        """Wait for background heals (tests, ``--once``)."""
        while self._tasks:
            done, _ = await asyncio.wait(set(self._tasks), timeout=timeout)
            if not done:
                return

    async def _regression(self, key: str) -> None:
        """The fix of ``key`` did not hold: the after-merge watch (``healer.code.aftermerge``)
        notes it on the attempt, prepares the draft revert PR and tells a person, once."""
        inc = self.book.get(key)
        aid = ((inc or {}).get("fix") or {}).get("attempt_id")
        if inc is None or not aid:
            return
        reg = (inc.get("regressions") or [{}])[-1]
        await asyncio.to_thread(self.aftermerge.note, aid, release=reg.get("release", ""),
                                at=reg.get("at"))
        await self.aftermerge.propose(aid)

    # --- periodic jobs ------------------------------------------------------------------------

    async def watch(self) -> None:
        """Follow fix PRs, end watches, retry held incidents, forget old deliveries."""
        await asyncio.to_thread(self._watch_fixes)
        self.dispatch(await asyncio.to_thread(self.resume_held))
        receipts = await asyncio.to_thread(self.book.retry_held)
        self.dispatch(receipts)
        if self.clock() - self._pruned > PRUNE_EVERY_S:
            self._pruned = self.clock()
            await asyncio.to_thread(self.book.prune_deliveries)

    def resume_held(self) -> list[Receipt]:
        """The attempts held by healer's own model access whose hold is over, admitted again
        (the model check taken afresh: a rotated key counts at once); ``dispatch`` starts
        them."""
        if not self.book.attempts.on_hold():
            return []
        self._model = (0.0, False)
        return self.book.resume_held()

    def _watch_fixes(self) -> None:
        from healer.core.publish import forge as fg

        now = self.clock()
        for inc in self.book.all(FIXED):
            fix = inc.get("fix") or {}
            key = inc["key"]
            if fix.get("merged_at"):
                if now - fix["merged_at"] > self.settings.context.watch_s:
                    self.book.update(key, event="watch_passed", status=RESOLVED, resolved_at=now,
                                     resolved_by="post-fix watch")
                    self.book.audit.write("watch_passed", key, pr_url=fix.get("pr_url", ""))
                continue
            att = self.book.attempts.get(fix.get("attempt_id", "")) or {}
            state = fg.MERGED if att.get("status") == st.PR_MERGED else ""
            if not state and fix.get("pr_number"):
                try:
                    forge = fg.open_forge(self.settings, att.get("repo") or self.root)
                    state = forge.pr_state(int(fix["pr_number"]))
                except Exception as exc:  # the forge being down must not stop the watch
                    log.warning("could not check the fix PR of %s: %s", key, exc)
                    continue
            if state == fg.MERGED:
                self._settle_attempt(att, st.PR_MERGED)
                self.book.update(key, event="fix_merged", fix={**fix, "merged_at": now})
                self.book.audit.write("fix_merged", key, pr_url=fix.get("pr_url", ""),
                                      watch_until=now + self.settings.context.watch_s)
            elif state == fg.CLOSED:
                self._settle_attempt(att, st.FAILED, reason="the fix PR was closed unmerged")
                self.book.update(key, event="fix_rejected", status=OPEN,
                                 decision={"reason": FIX_REJECTED, "message": "the fix PR was "
                                           "closed without merging; a person decides next"})
                self.book.audit.write("fix_rejected", key, pr_url=fix.get("pr_url", ""))

    def _settle_attempt(self, att: dict[str, Any], to: str, **fields: Any) -> None:
        if att.get("status") != st.PR_OPEN:
            return
        with contextlib.suppress(st.TransitionError):  # selfheal's refresh settled it first
            self.book.attempts.transition(att["attempt_id"], to, expect=st.PR_OPEN, **fields)

    async def run_loki_rules(self) -> list[dict[str, Any]]:
        """Evaluate every LogQL rule once; fire or resolve their incidents."""
        from healer.context import loki

        url = self.settings.context.loki_url
        if not url:
            return []
        try:
            rules = await asyncio.to_thread(loki.load_rules, loki.rules_path(self.settings))
        except LayerError as exc:
            log.error("LogQL rules not evaluated: %s", exc)  # a person fixes the file
            return []
        out = []
        for rule in rules:
            try:
                ev = await asyncio.to_thread(loki.evaluate, url, rule, now=self.clock())
            except Exception as exc:
                log.warning("LogQL rule %s could not be evaluated: %s", rule.name, exc)
                continue
            sig = loki.signal_for(ev, self.root)
            current = self.book.get(sig.key)
            if sig.status == "resolved" and (current is None or current["status"] == RESOLVED):
                out.append(ev.as_dict())
                continue  # nothing of ours to close
            receipts = await self.ingest([sig])
            out.append({**ev.as_dict(), "incident": receipts[0].as_dict()})
        return out

    # --- lifecycle ----------------------------------------------------------------------------

    def recover(self) -> int:
        """Incidents a dead process left ``healing`` follow their attempt (call at start-up)."""
        self.book.attempts.recover(timeout_s=self.settings.selfheal.timeout_s)
        n = 0
        for inc in self.book.all(HEALING):
            att = self.book.attempts.get(inc.get("attempt_id", "")) or {}
            if att.get("status") in st.ACTIVE or att.get("status") == st.HELD:
                continue  # still running, or waiting for healer's model access
            if att.get("status") == st.PR_OPEN:
                self.book.update(inc["key"], event="recovered", status=FIXED, fix={
                    "pr_url": att.get("pr_url", ""), "pr_number": att.get("pr_number"),
                    "attempt_id": att.get("attempt_id"), "at": self.clock()})
            else:
                self.book.update(inc["key"], event="interrupted", status=OPEN, decision={
                    "reason": "interrupted", "message": "healer stopped during the healing "
                    "run; it is retried on the next alert"})
            n += 1
        return n

    async def start(self) -> None:
        n = await asyncio.to_thread(self.recover)
        if n:
            log.info("settled %d living-context incident(s) left healing", n)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)


def service_for(ctx: Any) -> ContextService:
    """The API context's service, made on first use (``healer serve`` has no loop)."""
    svc = ctx.services.get("context")
    if svc is None:
        svc = ctx.services["context"] = ContextService(ctx.settings, ctx.store,
                                                       metrics=ctx.metrics)
        svc.recover()
    return svc  # type: ignore[no-any-return]


def create_service(healer: Any) -> ContextService:
    """Loop factory: the service, its API handle and its periodic jobs."""
    s = healer.settings
    svc = ContextService(s, healer.store, metrics=healer.extras.get("metrics"),
                         dispatcher=healer.dispatcher)
    healer.extras.setdefault("api_services", {})["context"] = svc
    healer.once("context-watch", s.context.watch_interval_s, svc.watch)
    if s.context.loki_url:
        healer.once("context-loki", s.context.loki_interval_s, svc.run_loki_rules)
    return svc
