"""The self-healing service: ``report_error`` and ``get_healing_status`` behind every surface.

The MCP server, the HTTP routes and the CLI all call one ``SelfHealService``:

* ``report(..., trust=)`` — sanitise, fingerprint, run the gates, and on acceptance create the
  attempt and start the healing run in the background; returns at once with the seed's
  response shape (``{"accepted", "fingerprint", "attempt_id"?, "reason"?, "message"}``).
  A report from an anonymous caller (the HTTP API without a token) opens a new incident only
  within the flood limits (``new_incident_limit``, ``anonymous_cap``: counted as dropped, not
  recorded) and waits for a person's approval (``awaiting_approval``) before an agent starts;
* ``start_approved(incident_id)`` — after a person approved: the gate again, and the start;
* ``status(fingerprint=None, limit=20)`` — the attempts of one fingerprint, or the latest;
* ``refresh()`` — ask the forge about open PRs (``pr_open`` → ``pr_merged`` / ``failed``);
* after the merge — a report of a fix merged within ``context.watch_s`` reopens the same
  incident and answers ``fix_regressed``: no new run; a draft revert PR is prepared in the
  background and a person told once (``healer.code.aftermerge``; the loop's
  ``code-aftermerge`` job prepares what is left due);
* ``resume_held()`` — attempts ``held`` by healer's own model access (a rejected key, a rate
  limit, the day's budget) go through the gate again once the hold is over, and run;
* ``recover()`` / ``reap()`` — for start-up and the loop's periodic housekeeping; recovery
  also writes the escalations still due (``healer.selfheal.escalate``), including those of the
  attempts it settled;
* ``take_over()`` — with replicas sharing a store: attempts whose lease expired (their
  replica stopped renewing, ``healer.selfheal.ownership``), and attempts no worker took up
  within that time (their replica died right after admitting them), get the agent's verdict
  applied once if it already reached the store, or end with the reason and run again under
  a new id through the gate (``selfheal.max_takeovers`` times, then a person is told).

Background runs are detached worker processes by default (``selfheal.worker: process``), so
an MCP server that exits (the Claude Code session ended) does not take the run with it; with
``task`` they are asyncio tasks in the calling server. Either way a run whose process died is
settled by ``recover()`` (its pid, on the same host) or ``take_over()`` (its lease, on any).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.code.aftermerge import DUE, FIX_REGRESSED, REGRESSION, AfterMerge
from healer.core import approval, gate
from healer.core import thresholds as th
from healer.core import trust as tr
from healer.core.audit import Audit
from healer.core.identity import identify
from healer.core.incidents import OPEN, Ledger, Signal, trust_of
from healer.core.publish.sanitizer import Sanitizer
from healer.core.silences import Silences
from healer.core.store import Store
from healer.errors import ConflictError, UsageError
from healer.selfheal import attempts as st
from healer.selfheal import gates, ownership
from healer.selfheal.attempts import Attempts, new_attempt_id, public_view
from healer.selfheal.runner import HEALING_ENV, AgentRunner, runner_for

log = logging.getLogger(__name__)

# Input bounds: a report is a few KB; anything bigger is cut, not refused (the tail of a
# traceback is where the error is, so tracebacks keep their end).
MAX_TYPE = 300
MAX_MESSAGE = 10_000
MAX_TRACEBACK = 100_000
MAX_CONTEXT = 20_000
MAX_NAME = 200
MODEL_CHECK_TTL_S = 30.0
# What a retry after a takeover takes over from the attempt it retries (its report).
RETRY_FIELDS = ("fingerprint", "error_type", "call_site", "error_message", "traceback",
                "context", "tool_name", "severity", "normalised", "incident_id", "lane")
AGENT_VERDICTS = frozenset({"unfixable", "escalated"})  # need no clone to be applied
_RUN_ID = re.compile(r"^(?P<aid>.+?)(?:-r\d+)?-i\d+$")  # healer.code.attempt's run ids


def _cut_head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " […]"


def _cut_tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "[…]\n" + text[-limit:]


def _find_repo_root(start: Path) -> str:
    """The enclosing git work tree, found without running git (this is the hot path)."""
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return str(folder)
    return str(start)


def in_healing_worktree(cwd: Path | None = None) -> bool:
    """Whether this process runs inside a healing worktree (``…/worktrees/heal-<id>``)."""
    parts = (cwd or Path.cwd()).parts
    return any(parts[i] == "worktrees" and parts[i + 1].startswith("heal-")
               for i in range(len(parts) - 1))


def settings_snapshot(settings: Any) -> dict[str, Any]:
    """The settings as a plain mapping a worker process can load again."""
    data = dataclasses.asdict(settings)
    data.pop("sources", None)
    return data


@dataclass(frozen=True)
class ReportInput:
    """One ``report_error`` call, as received (before sanitising)."""

    error_type: str
    error_message: str
    traceback: str = ""
    call_site: str = ""
    context: str = ""
    tool_name: str = ""
    severity_hint: str = ""
    healing_run: bool = False  # the caller says it is a healing agent

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ReportInput:
        """Build from a JSON body / tool arguments; ``UsageError`` naming the bad field."""
        if not isinstance(data, Mapping):
            raise UsageError("the report must be a JSON object")
        if not data.keys() <= _REPORT_FIELDS:
            raise UsageError(f"unknown field {sorted(set(data) - _REPORT_FIELDS)[0]!r}")
        values: dict[str, Any] = {}
        for name, value in data.items():
            if value is None:
                continue
            if name == "healing_run":
                if not isinstance(value, bool):
                    raise UsageError("healing_run must be true or false")
            elif not isinstance(value, str):
                raise UsageError(f"{name} must be a string")
            elif not _encodable(value):
                raise UsageError(f"{name} is not valid Unicode (a lone surrogate)")
            values[name] = value
        for required in ("error_type", "error_message"):
            if required not in values:
                raise UsageError(f"{required} is required")
        if not values["error_type"].strip():
            raise UsageError("error_type must not be empty")
        hint = values.get("severity_hint", "").strip().lower()
        if hint and hint not in gates.SEVERITIES:
            raise UsageError("severity_hint must be one of " + ", ".join(gates.SEVERITIES))
        return cls(**values)


def _encodable(text: str) -> bool:
    """False for text with lone surrogates, which no file or prompt can hold."""
    if text.isascii():  # a flag of the string object: no pass over the text
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_REPORT_FIELDS = frozenset(f.name for f in dataclasses.fields(ReportInput))
Launcher = Callable[[str], None]


@dataclass
class SelfHealService:
    """report_error / get_healing_status over one store. Thread-safe and process-safe."""

    settings: Any
    store: Store
    runner: AgentRunner | None = None
    clock: Callable[[], float] = time.time
    launcher: Launcher | None = None  # default: per selfheal.worker
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    cwd: Path = field(default_factory=Path.cwd)
    attempts: Attempts = field(init=False)
    sanitizer: Sanitizer = field(init=False)
    _model: tuple[float, bool | str] = field(init=False, default=(0.0, False))
    _tasks: set[asyncio.Task[Any]] = field(init=False, default_factory=set)
    _lanes: dict[str, tuple[gate.Policy, gate.Policy]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        sh = self.settings.selfheal
        self.attempts = Attempts(self.store, self.clock)
        root = Path(sh.repo).expanduser().resolve() if sh.repo else Path(
            _find_repo_root(self.cwd.resolve()))
        self.root = str(root)
        self.sanitizer = Sanitizer(root=root, allowed_hosts=sh.allowed_hosts)
        self.policy = gates.policy(self.settings)
        self.approvals = gates.approval_policy(self.settings)
        self.floods = gates.flood_policy(self.settings)
        self._admission = gate.AdmissionReader(self.store)
        self.ledger = Ledger(self.store, clock=self.clock,
                             audit=Audit(self.settings.state_path, self.clock),
                             thresholds=th.parse(self.settings.gate.thresholds))
        self._recursive_process = self.env.get(HEALING_ENV, "") not in ("", "0") or \
            in_healing_worktree(self.cwd)
        self.aftermerge = AfterMerge(self.settings, self.store, clock=self.clock)
        self.silences = Silences(self.store, clock=self.clock)

    # --- report_error -------------------------------------------------------------------------

    def report(self, data: ReportInput | Mapping[str, Any], *, trust: str = tr.TRUSTED,
               origin: str = "") -> dict[str, Any]:
        """Gate a report and start a healing run if it passes; never blocks on the run.

        ``trust``: how the caller was authenticated (``healer.core.trust``). In-process
        callers — the MCP server over stdio, the CLI — are the local operator's: trusted. The
        HTTP route passes ``anonymous`` when no token was configured or presented, with its
        flood-limit bucket as ``origin``."""
        tr.check(trust)
        r = data if isinstance(data, ReportInput) else ReportInput.from_mapping(data)
        scrub = self.sanitizer.scrub
        # One call: the pre-filter passes run back to back (``Sanitizer.scrub_many``).
        error_type, message, traceback, call_site, tool_name = self.sanitizer.scrub_many((
            _cut_head(r.error_type.strip(), MAX_TYPE), _cut_head(r.error_message, MAX_MESSAGE),
            _cut_tail(r.traceback, MAX_TRACEBACK), _cut_head(r.call_site, MAX_NAME),
            _cut_head(r.tool_name, MAX_NAME)))
        ident = identify(error_type, message, traceback=traceback, call_site=call_site,
                         root=self.root)
        fp = ident.fingerprint

        severity = gates.severity_verdict(error_type, message, r.severity_hint or None)
        signal = Signal(kind="code", key=fp, source="report_error",
                        severity=gates.SEVERITIES[severity],
                        summary=f"{error_type} in {ident.call_site or 'unknown site'}",
                        detail={"fingerprint": fp, "error_type": error_type,
                                "call_site": ident.call_site, "tool_name": tool_name},
                        trust=trust, about={"culprit": ident.call_site,
                                            "error_type": ident.error_type})

        # Anonymous input opens new incidents only within the flood limits (refusals of the
        # gates below are incidents too, so this comes first).
        existing = None
        if trust == tr.ANONYMOUS or self.approvals.mode == "always":
            existing = self.ledger.get(signal.id)
        if trust == tr.ANONYMOUS and existing is None:
            why = tr.admit_new(self.store, tr.origin_name("report_error", origin), self.floods,
                               self.clock())
            if why:
                self.ledger.dropped(f"report_error:{origin}" if origin else "report_error", why)
                return {"accepted": False, "fingerprint": fp, "reason": why,
                        "message": tr.drop_message(why, self.floods)}

        def reject(reason: str, text: str) -> dict[str, Any]:
            # Turned down is still an incident: recorded, counted, visible with the reason.
            self.ledger.receive(signal, decision=gate.Decision(reason, text))
            return {"accepted": False, "fingerprint": fp, "reason": reason, "message": text}

        # 1–3: no recursion, enabled, severity — no store access needed.
        if r.healing_run or self._recursive_process:
            return reject(gate.RECURSION, "Reports from a healing agent are not healed (no "
                          "recursion). Describe the problem in your result instead.")
        sh = self.settings.selfheal
        if not sh.enabled:
            return reject(gate.DISABLED, "Self-healing is disabled here. Continue normally.")
        if severity > sh.severity_threshold:
            return reject(gate.BELOW_THRESHOLD, f"Severity {gates.SEVERITIES[severity]} is "
                          "below the investigation threshold. Continue normally.")

        # A person's silence: recorded and counted, no agent, no notification.
        # The signal's fields as they are (read only): asdict's deep copy cost more than the
        # rest of the gates together.
        hush = self.silences.decision(vars(signal))
        if hush is not None:
            step, sid = hush
            self.ledger.receive(signal, decision=step, fields={"silenced_by": sid},
                                merge=lambda cur: cur.update(silenced_by=sid))
            return {"accepted": False, "fingerprint": fp, "reason": step.reason,
                    "message": step.message}

        now = self.clock()
        regressed = self._regressed(signal, now)
        if regressed is not None:
            return regressed
        # The source's threshold (gate.thresholds): recorded and counted, no agent yet.
        below = self.ledger.below(signal, existing)
        if below is not None:
            return reject(below.reason, below.message)
        level = tr.combine(trust, trust_of(existing) if existing else None)
        lane = tr.lane(level)
        made: list[dict[str, Any]] = []

        def report() -> dict[str, Any]:
            # Made (and the context scrubbed) only when it is stored: most reports are
            # repeats the gate refuses, which only count.
            if not made:
                made.append({
                    "fingerprint": fp, "error_type": error_type, "call_site": ident.call_site,
                    "error_message": message, "traceback": traceback,
                    "context": scrub(_cut_head(r.context, MAX_CONTEXT)),
                    "tool_name": tool_name,
                    "severity": gates.SEVERITIES[severity], "normalised": ident.normalised,
                    "incident_id": signal.id, "lane": lane,
                })
            return made[0]

        # The approval step: an incident its trust says needs a person waits for one, its
        # report kept (sanitised) for the start that follows the approval.
        step = approval.run_step(existing, level, self.approvals)
        if step is not None:
            self.ledger.receive(signal, decision=step, fields=lambda: {"report": report()},
                                merge=lambda cur: cur.setdefault("report", report()))
            return {"accepted": False, "fingerprint": fp, "reason": step.reason,
                    "message": step.message}

        # 4–8, the claim and the attempt record: one step (a failed write frees the slot).
        decision = gate.admit(self.store, fp, lambda: new_attempt_id(now), now,
                              self._policy_for(lane),
                              self.model_available, self._admission,
                              record=lambda aid: self.attempts.create(
                                  aid, {**report(), **self._by()}))
        if decision.reason == gate.ALREADY_INVESTIGATING:
            self.ledger.receive(signal, decision=decision)
            return {"accepted": False, "fingerprint": fp, "reason": decision.reason,
                    "attempt_id": decision.attempt_id, "message": decision.message}
        if not decision.accepted:
            # Held for a while (cap, cooldown, breaker, no model): kept, sanitised, so the
            # loop's retry can start it once the gate allows (``retry_held``).
            self.ledger.receive(signal, decision=decision, fields=lambda: {"report": report()})
            return {"accepted": False, "fingerprint": fp, "reason": decision.reason,
                    "message": decision.message}

        attempt_id = decision.attempt_id
        self.ledger.receive(signal, decision=decision)
        self.ledger.started(signal.id, attempt_id, "a healing agent is being dispatched")
        self._launch(attempt_id)
        return {"accepted": True, "fingerprint": fp, "attempt_id": attempt_id,
                "message": "Healing agent dispatched"}

    def _by(self) -> dict[str, str]:
        """Written as an attempt is dispatched: the replica whose worker should take it up
        (named by a takeover when none did: ``take_over``)."""
        return {"dispatched_by": self.settings.node}

    def _policy_for(self, lane: str) -> gate.Policy:
        """``policy`` in ``lane``, made once per lane (a dataclass copy on every report cost
        more than the gate's read); made afresh if ``policy`` was replaced."""
        made = self._lanes.get(lane)
        if made is None or made[0] is not self.policy:
            made = self._lanes[lane] = (self.policy, dataclasses.replace(self.policy, lane=lane))
        return made[1]

    # --- after the merge (healer.code.aftermerge) -----------------------------------------

    def _regressed(self, signal: Signal, now: float) -> dict[str, Any] | None:
        """A report of a fix merged and still watched: the same incident reopens, the draft
        revert is prepared in the background, and no new healing run starts."""
        att = self.aftermerge.recurrence(signal.key, at=now)
        if att is None:
            return None
        self.ledger.receive(signal, refire=lambda cur, at: REGRESSION)
        aid = att["attempt_id"]
        revert = att.get("revert") or {}
        if revert.get("state") == DUE:
            self._propose_soon(aid)
        return {"accepted": False, "fingerprint": signal.key, "reason": FIX_REGRESSED,
                "attempt_id": aid, "message": "The fix merged for this error did not hold: "
                "healer proposes reverting it (a draft PR) and a person was told. Continue "
                "normally."}

    def _propose_soon(self, attempt_id: str) -> None:
        """Prepare the revert without blocking the report: a task in a running event loop,
        else a thread (what a crash leaves, the loop's ``code-aftermerge`` job picks up)."""
        make = lambda: self.aftermerge.propose(attempt_id)  # noqa: E731
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            threading.Thread(target=lambda: asyncio.run(make()), daemon=True,
                             name=f"revert-{attempt_id}").start()
            return
        task = loop.create_task(make(), name=f"revert-{attempt_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def retry_held(self, *, launch: bool = True) -> list[str]:
        """Ask the gate again for the open report_error incidents it held back (the cap,
        a cooldown, the breaker, no model) and start those it now admits. Returns their new
        attempt ids (``launch=False``: the caller starts them). The loop runs this
        periodically, so a report held by the cap is healed when a slot frees."""
        out = []
        silences = self.silences.all()
        for inc in self.ledger.active("code"):
            report = inc.get("report")
            held = (inc.get("gate") or {}).get("reason")
            if inc.get("source") != "report_error" or inc.get("status") != "open" or \
                    held not in gate.RETRYABLE or not isinstance(report, dict):
                continue
            if held == gate.AWAITING_APPROVAL and not approval.ready(inc):
                continue  # a person has not approved it (yet): nothing new to ask the gate
            if self.silences.covering(inc, silences) is not None:
                continue  # a person silenced it since: it waits for the silence to end
            decision = self._readmit(inc)
            if not decision.accepted and decision.reason == held:
                continue  # still held for the same reason: nothing new to record
            self.ledger.decided(inc["id"], decision)
            if decision.accepted:
                self.ledger.started(inc["id"], decision.attempt_id,
                                    "a healing agent is being dispatched (held before)")
                out.append(decision.attempt_id)
                if launch:
                    self._launch(decision.attempt_id)
        return out

    def _budget_open(self) -> bool:
        """Whether the code kind's agent budgets have room now (``healer.agents.budget``)."""
        from healer.agents.budget import Budget

        return Budget(self.settings, self.store, clock=self.clock).over("code") is None

    def resume_held(self, *, launch: bool = True) -> list[str]:
        """Resume the report_error attempts on hold (healer's own model access was held)
        whose hold is over: the hold's time passed, and the gate — its model check taken
        afresh, so a rotated key counts at once — admits them again. Each goes back to
        ``dispatch_pending`` under its own id; returns those ids (``launch=False``: the
        caller starts them). The loop runs this with ``retry_held``."""
        from healer.agents.limits import resumable

        held = [a for a in self.attempts.on_hold() if not a.get("incident")]
        if not held:
            return []
        self._model = (0.0, False)  # ask again: the hold may have cleared a moment ago
        out = []
        for att in held:
            if not resumable(att.get("hold") or {}, now=self.clock(),
                                              budget_open=self._budget_open):
                continue
            aid = att["attempt_id"]
            decision = gate.resume(
                self.store, att["fingerprint"], aid, self.clock(),
                dataclasses.replace(self.policy, lane=str(att.get("lane") or "")),
                self.model_available, record=lambda a: self.attempts.transition(
                    a, st.DISPATCH_PENDING, expect=st.HELD, hold=None, reason=None,
                    **self._by()))
            if not decision.accepted:
                continue  # still held (no model yet), or the cap: the next pass asks again
            out.append(aid)
            if launch:
                self._launch(aid)
        return out

    def _readmit(self, inc: dict[str, Any]) -> gate.Decision:
        """The approval step and gates 4–8 again for an open incident's kept report."""
        level = trust_of(inc)
        step = approval.run_step(inc, level, self.approvals)
        if step is not None:
            return step
        report = {**inc["report"], "lane": tr.lane(level)}
        now = self.clock()
        return gate.admit(self.store, report["fingerprint"], lambda: new_attempt_id(now), now,
                          dataclasses.replace(self.policy, lane=report["lane"]),
                          self.model_available, self._admission,
                          record=lambda aid: self.attempts.create(
                              aid, {**report, **self._by()}))

    def start_approved(self, iid: str, *, launch: bool = True) -> gate.Decision:
        """A person approved the run of ``iid`` (``Ledger.judge``): ask the one gate again
        (cooldown, cap, breaker and model still apply) and start the attempt it admits. A
        refusal is recorded (retryable): the retry pass starts it later, the approval kept."""
        inc = self.ledger.require(iid)
        if inc.get("status") != OPEN or not isinstance(inc.get("report"), dict):
            raise UsageError(f"incident {iid} is not an open report_error incident with a "
                             "report to heal")
        decision = self._readmit(inc)
        self.ledger.decided(iid, decision)
        if decision.accepted:
            self.ledger.started(iid, decision.attempt_id,
                                "a healing agent is being dispatched (approved by a person)")
            if launch:
                self._launch(decision.attempt_id)
        return decision

    def model_available(self) -> bool | str:
        """Gate 8, cached briefly: can a healing agent run here (True), or why not?"""
        at, ok = self._model
        now = time.monotonic()
        if now - at > MODEL_CHECK_TTL_S or at == 0.0:
            ok = self._runner().available()
            self._model = (now, ok)
        return ok

    def _runner(self) -> AgentRunner:
        if self.runner is None:
            self.runner = runner_for(self.settings)
        return self.runner

    # --- background runs ----------------------------------------------------------------------

    def _launch(self, attempt_id: str) -> None:
        try:
            if self.launcher is not None:
                self.launcher(attempt_id)
            elif self.settings.selfheal.worker == "task":
                self._start_task(attempt_id)
            else:
                self._spawn_worker(attempt_id)
        except Exception as exc:
            log.exception("could not start the healing run of %s", attempt_id)
            self.attempts.transition(attempt_id, st.FAILED, expect=st.DISPATCH_PENDING,
                                     reason=f"the healing worker did not start: "
                                            f"{type(exc).__name__}")
            self._escalate_soon(attempt_id)

    def _escalate_soon(self, attempt_id: str) -> None:
        """Escalate without blocking a running event loop (a task there; else right now)."""
        from healer.selfheal.escalate import escalate_attempt

        def make() -> Any:
            return escalate_attempt(self.settings, self.store, attempt_id, clock=self.clock)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(make())  # never raises: failures are logged and left for recover()
            return
        task = loop.create_task(make(), name=f"escalate-{attempt_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_task(self, attempt_id: str) -> None:
        from healer.selfheal.dispatch import Dispatcher

        loop = asyncio.get_running_loop()  # RuntimeError without a loop: caught by _launch
        d = Dispatcher(self.settings, self.store, runner=self._runner(), clock=self.clock)
        task = loop.create_task(d.run(attempt_id), name=f"healing-{attempt_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn_worker(self, attempt_id: str) -> None:
        spawn_worker(self.settings, "healer.code.worker", attempt_id,
                     log_name=attempt_id, cwd=self.cwd)

    async def drain(self, timeout: float | None = None) -> None:
        """Wait for in-process healing tasks (``worker: task``) to finish."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    # --- get_healing_status -------------------------------------------------------------------

    def status(self, fingerprint: str | None = None, limit: int = 20) -> dict[str, Any]:
        """``{"fingerprint"?, "count", "attempts": [...]}``, newest first."""
        if fingerprint:
            fingerprint = fingerprint.strip().lower()
            if not (4 <= len(fingerprint) <= 64) or any(
                    c not in "0123456789abcdef" for c in fingerprint):
                raise UsageError("fingerprint must be 4-64 hex digits (from report_error)")
            found = self._by_prefix(fingerprint)
            atts = [public_view(a) for a in found[:limit]]
            return {"fingerprint": fingerprint, "count": len(atts), "attempts": atts}
        atts = [public_view(a) for a in self.attempts.latest(limit)]
        return {"count": len(atts), "attempts": atts}

    def _by_prefix(self, fp: str) -> list[dict[str, Any]]:
        if len(fp) == 64:
            return self.attempts.for_fingerprint(fp)
        keys = [k for k in self.store.keys(st.FINGERPRINTS) if k.startswith(fp)]
        out: list[dict[str, Any]] = []
        for key in keys:
            out.extend(self.attempts.for_fingerprint(key))
        return sorted(out, key=lambda a: a["created_at"], reverse=True)

    # --- housekeeping -------------------------------------------------------------------------

    def refresh(self) -> list[dict[str, Any]]:
        """Poll the forge for every open PR; settle merged/closed ones. Returns the changed."""
        from healer.core.publish import forge as fg

        changed = []
        for aid in sorted(set(self.attempts.admission()["open_prs"].values())):
            att = self.attempts.get(aid)
            if att is None or att.get("status") != st.PR_OPEN or not att.get("pr_number"):
                continue
            try:
                forge = fg.open_forge(self.settings, att.get("repo") or self.root,
                                      self.sanitizer)
                state = forge.pr_state(int(att["pr_number"]))
            except (fg.ForgeError, UsageError) as exc:
                log.warning("could not check PR of %s: %s", att["attempt_id"], exc)
                continue
            if state == fg.MERGED:
                changed.append(self.attempts.transition(att["attempt_id"], st.PR_MERGED,
                                                        expect=st.PR_OPEN))
            elif state == fg.CLOSED:
                changed.append(self.attempts.transition(
                    att["attempt_id"], st.FAILED, expect=st.PR_OPEN,
                    reason="the PR was closed without merging"))
        return changed

    def recover(self) -> list[dict[str, Any]]:
        """Settle attempts left behind by processes that died (call at start-up), then write
        the escalations still due — theirs, and any a dead worker did not get to."""
        from healer.selfheal.escalate import escalate_due, run_blocking

        # Replicas on one store (several may share a host) settle leased runs by the lease.
        changed = self.attempts.recover(timeout_s=self.settings.selfheal.timeout_s,
                                        leases_decide=self.settings.store.backend != "file")
        try:
            run_blocking(lambda: escalate_due(self.settings, self.store, clock=self.clock))
        except Exception:  # recovery must finish; what is left stays due for the next one
            log.exception("escalations after recovery failed")
        return [self.attempts.get(a["attempt_id"]) or a for a in changed]

    def take_over(self, *, launch: bool = True) -> list[dict[str, Any]]:
        """Settle the ``investigating`` attempts whose lease expired, wherever they ran,
        and the ``dispatch_pending`` ones no worker took up within two
        ``selfheal.lease_ttl_s`` (their replica died between admitting them and its worker
        starting).

        For each, the lease is taken first (so the old run, if it comes back, finds it
        gone), then the attempt is written only if it still names the owner found expired:
        the agent's own ``unfixable`` verdict, if it reached the store (``on_result``), is
        applied; anything else ends ``failed`` with the reason and — unless
        ``selfheal.max_takeovers`` retries were spent — runs again under a new id through
        the gate (``retried_as``). ``launch=False``: the caller starts those. Returns the
        attempts taken over."""
        out = []
        now = self.clock()
        sh = self.settings.selfheal
        for att in self.attempts.unfinished():
            if att.get("status") == st.INVESTIGATING:
                seen = ownership.expired(self.store, att, now)
            elif att.get("status") == st.DISPATCH_PENDING:
                seen = ownership.unstarted(self.store, att, now, sh.lease_ttl_s)
            else:
                continue
            if seen is None:
                continue
            aid = att["attempt_id"]
            lease = ownership.seize(self.store, aid, self.settings.node, sh.lease_ttl_s, seen,
                                    now)
            if lease is None:
                continue  # renewed meanwhile, or another replica is taking it over
            try:
                ended = self._take(att, seen, lease, now)
            except (st.TransitionError, ConflictError):
                continue  # its run ended it meanwhile: that end stands
            finally:
                lease.release()
            log.warning("attempt %s taken over: %s", aid, ended.get("reason"))
            if ended.get("status") == st.FAILED and not ended.get("retry"):
                self._escalate_soon(aid)
            elif ended.get("retry"):
                ended = self._retry(ended, launch=launch)
            out.append(ended)
        return out

    def _take(self, att: dict[str, Any], seen: dict[str, Any], lease: Any,
              now: float) -> dict[str, Any]:
        owner = att.get("owner") or {}
        ttl = self.settings.selfheal.lease_ttl_s
        if att.get("status") == st.DISPATCH_PENDING:
            node = str(att.get("dispatched_by") or "?")
            renewed = ownership.pending_since(att)
            why = (f"its replica {node} stopped before a worker took it up "
                   f"({ownership.PENDING_LEASES * ttl:g} s)")
        else:
            node = str(owner.get("node") or "?")
            until = seen.get("expires_at")
            renewed = float(until) - ttl if until else None
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(renewed)) if renewed \
                else "an unknown time"
            why = f"its replica {node} stopped renewing at {when}"
        common = {"expect": att["status"], "owned_by": owner.get("revision"),
                  "owner": {"lease": lease.name, "revision": lease.revision,
                            "node": self.settings.node, "holder": lease.owner},
                  "taken_over": {"node": node, "renewed_at": renewed, "at": now,
                                 "by": self.settings.node}}
        agent = att.get("agent_result") or {}
        if agent.get("status") in AGENT_VERDICTS:
            said = self.sanitizer.scrub(str(agent.get("summary") or "no reason given"))
            return self.attempts.transition(
                att["attempt_id"], st.UNFIXABLE, unfixable_reason=said[:2000],
                reason=f"the agent reported {agent['status']} ({why}): "
                       f"{' '.join(said.split())[:300]}", **common)
        retry = not att.get("incident") and \
            int(att.get("takeovers") or 0) < self.settings.selfheal.max_takeovers
        return self.attempts.transition(
            att["attempt_id"], st.FAILED, retry=retry,
            reason=f"{why}; run again as a new attempt" if retry else
            f"{why}; retried {int(att.get('takeovers') or 0)} time(s) already", **common)

    def _retry(self, old: dict[str, Any], *, launch: bool) -> dict[str, Any]:
        """Run a taken-over attempt's report again, through the gate like any report."""
        report = {k: old[k] for k in RETRY_FIELDS if k in old}
        report.update(retry_of=old["attempt_id"], takeovers=int(old.get("takeovers") or 0) + 1)
        now = self.clock()
        decision = gate.admit(self.store, old["fingerprint"], lambda: new_attempt_id(now), now,
                              dataclasses.replace(self.policy, lane=str(old.get("lane") or "")),
                              self.model_available, self._admission,
                              record=lambda aid: self.attempts.create(
                                  aid, {**report, **self._by()}))
        iid = str(old.get("incident_id") or "")
        if iid:
            self.ledger.decided(iid, decision)
        if not decision.accepted:
            if iid and decision.reason in gate.RETRYABLE:
                self.ledger.update(iid, report=report)  # the retry pass starts it later
            elif decision.reason == gate.ALREADY_INVESTIGATING and decision.attempt_id:
                # A new report of the same error was admitted between the takeover and this
                # retry: that attempt does the retry's work (it is launched already).
                return self.attempts.update(old["attempt_id"],
                                            superseded_by=decision.attempt_id)
            return old
        if iid:
            self.ledger.started(iid, decision.attempt_id, "a healing agent is being "
                                "dispatched again (the replica running it stopped)")
        old = self.attempts.update(old["attempt_id"], retried_as=decision.attempt_id)
        if launch:
            self._launch(decision.attempt_id)
        return old

    def reap(self) -> list[str]:
        """Remove worktrees past ``selfheal.worktree_ttl_s`` (call periodically)."""
        from healer.selfheal.dispatch import reap_worktrees

        return reap_worktrees(self.settings, self.store, now=self.clock())

    def on_result(self, result: Any) -> None:
        """Bus subscriber: note a healing agent's own result on its attempt (run id = the
        attempt id, or one iteration's ``<attempt>-i<n>``). The attempt's outcome is still
        decided by the worktree, not by this claim — except after a takeover, which applies
        an ``unfixable`` verdict noted here. A run taken over gets no late notes."""
        if getattr(result, "kind", "") != "healing":
            return
        run_id = str(result.data.get("run_id", ""))
        m = _RUN_ID.match(run_id)
        if m and self.attempts.get(run_id) is None:
            run_id = m.group("aid")  # one iteration's run: its attempt
        att = self.attempts.get(run_id) if run_id else None
        if att is None or att.get("taken_over"):
            return
        summary = self.sanitizer.scrub(str(result.data.get("summary", "")))[:2000]
        self.attempts.update(run_id, agent_result={"status": result.data.get("status"),
                                                   "summary": summary})


def spawn_worker(settings: Any, module: str, arg: str, *, log_name: str,
                 cwd: Path | None = None) -> None:
    """Start ``python -m <module> <arg>`` detached (its own session, so it outlives the
    process that started it), the settings as JSON on its stdin, its output in
    ``<state>/selfheal/logs/<log_name>.log``; reaped in the background."""
    logs = settings.state_path / "selfheal" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{log_name}.log", "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, arg],
            stdin=subprocess.PIPE, stdout=out, stderr=out, cwd=cwd,
            start_new_session=True,  # survives the server; its own process group
            env={k: v for k, v in os.environ.items() if k != HEALING_ENV},
        )
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps(settings_snapshot(settings)).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    # Reap the child when it ends so a long-lived server collects no zombies.
    threading.Thread(target=proc.wait, daemon=True, name=f"reap-{log_name}").start()


def create_loop_service(healer: Any) -> None:
    """Loop factory: recovery at start-up, forge polling, worktree reaping, the API service.

    Registers the service for the HTTP routes (``api_services["selfheal"]``); it has nothing
    to start or stop itself (healing runs are detached workers).
    """
    svc = SelfHealService(healer.settings, healer.store)
    healer.extras.setdefault("api_services", {})["selfheal"] = svc
    healer.recovery.append(lambda: asyncio.to_thread(svc.recover))
    sh = healer.settings.selfheal
    healer.once("selfheal-refresh", sh.refresh_interval_s, lambda: asyncio.to_thread(svc.refresh))
    # Recovery also runs periodically: it settles runs whose worker died after start-up.
    healer.once("selfheal-recover", 300.0, lambda: asyncio.to_thread(svc.recover))
    healer.every("selfheal-reap", 3600.0, lambda: asyncio.to_thread(svc.reap))
    # Reverts a crash (or a report without an event loop) left to prepare.
    healer.once("code-aftermerge", sh.refresh_interval_s, svc.aftermerge.propose_due)

    async def retry() -> None:
        # Decide off the event loop; start in it (``selfheal.worker: task`` needs the loop).
        for attempt_id in await asyncio.to_thread(svc.resume_held, launch=False):
            svc._launch(attempt_id)
        for attempt_id in await asyncio.to_thread(svc.retry_held, launch=False):
            svc._launch(attempt_id)

    healer.once("selfheal-retry", 60.0, retry)
    if healer.settings.store.backend != "file":
        # Replicas share the store: a replica that dies leaves attempts only a lease can
        # tell are dead. (On the file store one replica settles them by pid: recover.)
        async def take_over() -> None:
            for att in await asyncio.to_thread(svc.take_over, launch=False):
                if att.get("retried_as"):
                    svc._launch(att["retried_as"])

        # One replica sweeps (a duty); the lease is seized by compare-and-set anyway, so a
        # sweep by a replica that just lost the duty still settles each attempt once.
        healer.once("attempt-takeover", sh.takeover_interval_s, take_over)
    healer.bus.subscribe(svc.on_result)


def open_service(settings: Any, **kw: Any) -> SelfHealService:
    """A service over the store the settings name."""
    from healer.core.store import open_store

    return SelfHealService(settings, open_store(settings), **kw)
