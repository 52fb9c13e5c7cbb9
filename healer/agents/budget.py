"""What agents may spend: a daily and a monthly budget in US dollars, per kind and overall.

``agents.daily_budget_usd`` and ``agents.monthly_budget_usd`` — e.g. ``{"code": 20, "all":
50}``; empty, or 0 for a key, means no limit there. Days and months are UTC (a month is the
calendar month).

1. **Counted from what runs report.** A Claude run adds up its ``ResultMessage.total_cost_usd``
   (every launch of the run; also a run that failed after the model answered); a command
   agent's result may say ``cost_usd``; playbooks cost nothing and are never held back.
2. **Kept per UTC day** in the state store (``agent-spend/<YYYY-MM-DD>``) and per month
   (``agent-spend-month/<YYYY-MM>``), every change a compare-and-set, so every process on the
   state dir (every node, on a shared JetStream store) adds to the same sums. Days before are
   kept for a week (``KEEP_DAYS``), months for a year (``KEEP_MONTHS``).
3. **Checked where every run starts** (``Executor.run``, before it takes an agent slot): when
   the run's kind, or ``all``, has reached its daily or monthly budget, the run does not
   start; it ends ``deferred`` with ``retry_at`` = the next UTC midnight (a day's budget) or
   the first of the next month (a month's). A code attempt it stopped **waits** (``held``,
   ``healer.agents.limits``) and resumes through the gate when the period rolls over or the
   limit is raised (``Budget.over`` no longer names it); a play remediation sleeps until
   ``retry_at`` and runs again (``healer.play.remediate``); a fleet run or a run started by hand
   ends ``deferred`` and its caller's next pass tries again. Why there and not at the gate: the
   executor is the one place every run passes — code attempts, play evaluations and
   remediations, fleet agents and runs started by hand, most of which hold no gate claim —
   and every caller already reads ``deferred`` as "did not happen, not a failed attempt, try
   after ``retry_at``" (no breaker, no cooldown, no escalation of the attempt). A run that
   already started finishes: the budget stops the next one, so a day may end a little over
   (by at most one run's ``executor.claude.max_budget_usd`` per slot).
4. **A person is told once per period and budget**: the first run held back marks the day's
   (or month's) record (compare-and-set), logs a warning and escalates (a seed file in the
   human inbox, Discord and the forge for ``high``).
5. ``healer status`` (``agent_spend``: today's, and ``month`` for the month), the dashboard
   and ``/metrics`` (``healer_agent_spend_usd``, ``healer_agent_budget_usd``) show the spend
   against each budget.

Kinds: ``code`` (healing-agent, living-context-healer), ``play`` (evaluation-agent,
remediation-agent), ``fleet`` (the fleet's agents), and any other agent under its result kind.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from healer.agents.definitions import result_kind

log = logging.getLogger(__name__)

KIND = "agent-spend"  # store kind; key = the UTC day
MONTHS = "agent-spend-month"  # store kind; key = the UTC month
ALL = "all"
KEEP_DAYS = 7
KEEP_MONTHS = 12
DAY, MONTH = "day", "month"
MAX_RUN_USD = 10_000.0  # what one run may claim it cost (a larger claim is cut to this)
KINDS = {
    "healing-agent": "code", "living-context-healer": "code",
    "evaluation-agent": "play", "remediation-agent": "play",
    **dict.fromkeys(("channel-diagnoser", "daemon-restarter", "tunnel-establisher",
                     "config-updater", "nats-reconnector", "inbox-repairer", "master-healer"),
                    "fleet"),
}


def budget_kind(agent: str) -> str:
    """The budget an agent's runs count against (besides ``all``)."""
    return KINDS.get(agent) or result_kind(agent)


def day_of(now: float) -> str:
    """The UTC day of ``now`` (``YYYY-MM-DD``)."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")


def next_midnight(now: float) -> float:
    """The next 00:00 UTC after ``now``: when a spent budget opens again."""
    day = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return (day + timedelta(days=1)).timestamp()


def month_of(now: float) -> str:
    """The UTC calendar month of ``now`` (``YYYY-MM``)."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m")


def next_month(now: float) -> float:
    """The first 00:00 UTC of the next calendar month: when a monthly budget opens again."""
    t = datetime.fromtimestamp(now, UTC)
    year, month = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
    return datetime(year, month, 1, tzinfo=UTC).timestamp()


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def usd_text(value: float) -> str:
    """Dollars as people read them: cents, or the first digits of a fraction of a cent."""
    return f"${value:,.2f}" if value == 0 or value >= 0.01 else f"${value:.2g}"


def clean_usd(value: Any) -> float:
    """A reported cost as a number healer counts (anything odd is 0; capped)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    usd = float(value)
    return min(usd, MAX_RUN_USD) if math.isfinite(usd) and usd > 0 else 0.0


def _positive(raw: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in (raw or {}).items()
            if isinstance(v, int | float) and not isinstance(v, bool) and v > 0}


_STORES: dict[str, Any] = {}
_STORES_LOCK = threading.Lock()


def _shared_store(settings: Any) -> Any:
    """One store per state (and backend) for every executor of this process: an executor is
    made per run in places (a run with its own environment), a store connection must not be."""
    key = f"{settings.state_path.resolve()}|{settings.store!r}"
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is None:
            from healer.core.store import open_store

            store = _STORES[key] = open_store(settings)
        return store


@dataclass(frozen=True)
class Over:
    """A budget that is spent: ``budget`` (a kind or ``all``), what was ``spent`` of its
    ``limit`` in ``day`` (a ``YYYY-MM-DD`` day, or a ``YYYY-MM`` month: ``period``), and when
    runs of that kind may start again (``retry_at``)."""

    budget: str
    spent: float
    limit: float
    day: str
    retry_at: float
    period: str = DAY

    @property
    def setting(self) -> str:
        return f"agents.{'daily' if self.period == DAY else 'monthly'}_budget_usd.{self.budget}"

    def message(self, kind: str) -> str:
        which = "over all kinds" if self.budget == ALL else f"for {self.budget}"
        span = "daily" if self.period == DAY else "monthly"
        return (f"deferred: the {span} agent budget {which} is spent ({usd_text(self.spent)} "
                f"of {usd_text(self.limit)} in {self.day} UTC); {kind} runs wait until "
                f"{iso(self.retry_at)} — not a failed attempt. Raise "
                f"{self.setting} to run sooner.")


class Budget:
    """Today's spend and the budgets of ``settings`` (the module doc). ``store`` opens
    lazily (``open_store``) the first time it is needed: with no budget set and nothing
    spent, a run never touches it."""

    def __init__(self, settings: Any, store: Any = None, *,
                 clock: Callable[[], float] = time.time):
        self.settings = settings
        self._store = store
        self.clock = clock

    @property
    def limits(self) -> dict[str, float]:
        return _positive(self.settings.agents.daily_budget_usd)

    @property
    def monthly(self) -> dict[str, float]:
        return _positive(getattr(self.settings.agents, "monthly_budget_usd", None))

    @property
    def store(self) -> Any:
        if self._store is None:
            self._store = _shared_store(self.settings)
        return self._store

    def _day(self, day: str, kind: str = KIND) -> dict[str, Any]:
        rec = self.store.get(kind, day)
        return dict(rec.data) if rec is not None else {"day": day, "usd": {}, "runs": {}}

    # -- the check and the count ----------------------------------------------------------

    def over(self, kind: str) -> Over | None:
        """The budget that holds a run of ``kind`` back now (its own first, then ``all``);
        None when it may start."""
        now = self.clock()
        for period, limits, store_kind, key, reset in (
                (DAY, self.limits, KIND, day_of(now), next_midnight(now)),
                (MONTH, self.monthly, MONTHS, month_of(now), next_month(now))):
            if kind not in limits and ALL not in limits:
                continue
            usd = self._day(key, store_kind).get("usd") or {}
            spent = {kind: float(usd.get(kind, 0.0)), ALL: float(sum(usd.values()))}
            for budget in (kind, ALL):
                if budget in limits and spent[budget] >= limits[budget]:
                    return Over(budget, spent[budget], limits[budget], key, reset, period)
        return None

    def spend(self, kind: str, usd: float, *, run_id: str = "") -> dict[str, Any] | None:
        """Add what a run of ``kind`` cost to today's record; returns it (None: nothing to
        add)."""
        usd = clean_usd(usd)
        if not usd:
            return None
        now = self.clock()
        day = day_of(now)

        def fn(cur: dict[str, Any] | None) -> dict[str, Any]:
            data = dict(cur or {"day": day, "usd": {}, "runs": {}})
            spent, runs = dict(data.get("usd") or {}), dict(data.get("runs") or {})
            spent[kind] = round(float(spent.get(kind, 0.0)) + usd, 9)
            runs[kind] = int(runs.get(kind, 0)) + 1
            return {**data, "usd": spent, "runs": runs, "updated_at": iso(now)}

        rec = self.store.update(KIND, day, fn)
        self.store.update(MONTHS, month_of(now), fn)
        self._prune(now)
        log.info("agent run %s (%s) cost $%.4f; today %s $%.4f", run_id or "-", kind, usd,
                 kind, float((rec.data.get("usd") or {}).get(kind, 0.0)) if rec else usd)
        return rec.data if rec is not None else None

    def _prune(self, now: float) -> None:
        keep = {day_of(now - 86400.0 * n) for n in range(KEEP_DAYS)}
        for day in self.store.keys(KIND):
            if day not in keep:
                self.store.delete(KIND, day)
        t = datetime.fromtimestamp(now, UTC)
        months = {f"{(t.year * 12 + t.month - 1 - n) // 12:04d}-"
                  f"{(t.year * 12 + t.month - 1 - n) % 12 + 1:02d}" for n in range(KEEP_MONTHS)}
        for month in self.store.keys(MONTHS):
            if month not in months:
                self.store.delete(MONTHS, month)

    def first_notice(self, over: Over) -> bool:
        """Whether this caller is the first to hold a run back on ``over`` in its period (it
        then tells a person; everyone else only logs)."""
        first = False

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            nonlocal first
            first = False  # the last call is the one that counts (update may retry)
            data = dict(cur or {"day": over.day, "usd": {}, "runs": {}})
            told = dict(data.get("told") or {})
            if over.budget in told:
                return None
            told[over.budget] = iso(self.clock())
            first = True
            return {**data, "told": told}

        self.store.update(KIND if over.period == DAY else MONTHS, over.day, fn)
        return first

    # -- what status and metrics show -----------------------------------------------------

    def today(self) -> dict[str, Any]:
        """Today's spend per kind and ``all``, each daily budget, and which are spent; the
        same for this month under ``month``."""
        now = self.clock()
        out = self._period(KIND, day_of(now), self.limits)
        month = self._period(MONTHS, month_of(now), self.monthly)
        return {"day": day_of(now), "resets_at": iso(next_midnight(now)),
                "budgets": out, "month": {"month": month_of(now),
                                          "resets_at": iso(next_month(now)),
                                          "budgets": month}}

    def _period(self, store_kind: str, key: str, limits: dict[str, float]
                ) -> dict[str, Any]:
        try:
            data = self._day(key, store_kind) if limits or self._store is not None else {}
        except Exception:  # status must show what it can
            log.exception("agent spend unreadable")
            data = {}
        usd = {k: round(float(v), 9) for k, v in (data.get("usd") or {}).items()}
        spent = {**usd, ALL: round(sum(usd.values()), 9)}
        kinds = sorted(set(spent) | set(limits), key=lambda k: (k == ALL, k))
        runs = data.get("runs") or {}
        return {k: {"spent_usd": spent.get(k, 0.0), "limit_usd": limits.get(k),
                    "over": k in limits and spent.get(k, 0.0) >= limits[k],
                    "runs": int(runs.get(k, 0)) if k != ALL
                    else sum(int(n) for n in runs.values())}
                for k in kinds}


async def tell(settings: Any, budget: Budget, over: Over, *, kind: str, run: str) -> None:
    """Log a held-back run; the first of the period and budget also escalates to a person."""
    import asyncio

    message = over.message(kind)
    first = await asyncio.to_thread(budget.first_notice, over)
    log.warning("run %s held back: %s", run, message)
    if not first:
        return
    from healer.core.escalation import Escalation, escalate

    which = "all agent runs" if over.budget == ALL else f"{over.budget} agent runs"
    span = "Daily" if over.period == DAY else "Monthly"
    esc = Escalation(
        title=f"{span} agent budget spent: {which} wait until {iso(over.retry_at)}",
        target=f"budget-{over.budget}", severity="high",
        what_happened=(f"healer's agents spent {usd_text(over.spent)} of the "
                       f"{usd_text(over.limit)} {span.lower()} budget for {which} in "
                       f"{over.day} (UTC). No further {which} start until "
                       f"{iso(over.retry_at)}; they wait (not failed) and run again after "
                       "the reset, or once the budget is raised."),
        next_steps=[f"If the spend is expected, raise `{over.setting}` in healer.yaml (or "
                    "`--set`) and restart healer: waiting code attempts resume by themselves.",
                    "If it is not, look at what started the runs: `healer status` lists the "
                    "incidents, and each run's transcript is in the state dir under "
                    "`agents/runs/`."],
        commands=["healer status"], evidence=[message],
        kind="escalation", labels=["heal", "escalation", "budget"],
        dedup_key=f"agent-budget.{over.period}.{over.budget}.{over.day}", one_open=True)
    try:
        await escalate(settings, budget.store, esc)
    except Exception:  # the runs are held back either way; status shows it
        log.exception("could not escalate the spent agent budget")


def spend_view(settings: Any, store: Any) -> Mapping[str, Any]:
    """``Budget(settings, store).today()``: what ``healer status`` and ``/metrics`` read."""
    return Budget(settings, store).today()
