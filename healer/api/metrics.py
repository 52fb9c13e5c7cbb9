"""Prometheus metrics: one registry per healer process (not the global one).

What every process shares — incidents, gate decisions, attempts, escalations, report_error
calls — is read from the core ledger's counters at scrape time, so work done by ``healer mcp``
or another process on the same state shows up here. Counters of this process's own work
(webhook deliveries, remediation runs, fleet heals) live in memory.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from healer.core.incidents import Ledger

log = logging.getLogger(__name__)

ACTIVE_SESSIONS_SET = "sessions-active"


class Metrics:
    """The counters healer keeps; gauges that reflect state are computed at scrape time."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions_active = Gauge("healer_sessions_active", "Play sessions active now",
                                     registry=r)
        self.sessions_started = Counter("healer_sessions_started", "Play sessions started",
                                        registry=r)
        self.incidents = Counter("healer_incidents", "Incidents opened, by alert code",
                                 ["code"], registry=r)
        self.remediations = Counter("healer_remediations", "Remediation runs, by outcome",
                                    ["outcome"], registry=r)
        self.escalations = Counter("healer_escalations", "Escalations to humans, by channel",
                                   ["channel"], registry=r)
        self.webhooks = Counter("healer_webhooks", "Webhook deliveries, by source and result",
                                ["source", "result"], registry=r)
        self.heals = Counter("healer_fleet_heals", "Fleet healing runs, by kind and outcome",
                             ["kind", "outcome"], registry=r)
        self.fleet_refused = Counter(
            "healer_fleet_refused", "Heartbeats and fleet messages refused for their signature "
            "(unsigned, bad_signature, stale, replayed, …)", ["kind", "reason"], registry=r)

        self._shared = _SharedState()
        r.register(self._shared)

    def render(self, ctx: Any) -> tuple[bytes, str]:
        self._shared.store = ctx.store
        self._shared.settings = ctx.settings
        try:
            self.sessions_active.set(len(ctx.store.members(ACTIVE_SESSIONS_SET)))
        except Exception:  # a broken store must not break the scrape
            self.sessions_active.set(float("nan"))
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _SharedState(Collector):
    """The ledger's counters (``incident-stats/all``) as metrics, read at each scrape."""

    def __init__(self) -> None:
        self.store: Any = None
        self.settings: Any = None

    def collect(self) -> Iterator[Metric]:
        if self.store is None:
            return
        yield from self._spend()
        yield from self._notify()
        try:
            stats = Ledger(self.store).stats()
        except Exception:  # a broken store must not break the scrape
            log.exception("incident counters unreadable")
            return
        by_status = GaugeMetricFamily("healer_incidents_by_status",
                                      "Incidents now, by kind and status (every process)",
                                      labels=["kind", "status"])
        for kind, row in sorted(stats.get("status", {}).items()):
            for status, n in sorted(row.items()):
                by_status.add_metric([kind, status], n)
        yield by_status
        yield _per_kind("healer_incidents_opened", "Incidents opened, by kind",
                        stats.get("opened", {}))
        yield _per_kind("healer_incident_attempts", "Healing attempts started, by kind",
                        stats.get("attempts", {}))
        yield _per_kind("healer_incident_escalations", "Incidents escalated to a person, by kind",
                        stats.get("escalations", {}))
        decisions = CounterMetricFamily("healer_gate_decisions",
                                        "Gate decisions, by kind and reason (every process)",
                                        labels=["kind", "reason"])
        for kind, row in sorted(stats.get("decisions", {}).items()):
            for reason, n in sorted(row.items()):
                decisions.add_metric([kind, reason], n)
        yield decisions
        reports = CounterMetricFamily("healer_error_reports",
                                      "report_error calls, by decision (every process)",
                                      labels=["decision"])
        for reason, n in sorted((stats.get("sources", {}).get("report_error") or {}).items()):
            reports.add_metric([reason], n)
        yield reports
        dropped = CounterMetricFamily("healer_incidents_dropped",
                                      "New incidents a flood limit refused to open, by source "
                                      "and limit (every process)", labels=["source", "reason"])
        for source, row in sorted(stats.get("dropped", {}).items()):
            for reason, n in sorted(row.items()):
                dropped.add_metric([source, reason], n)
        yield dropped


    def _notify(self) -> Iterator[Metric]:
        """Notifications per target (every process) and the outbox depth."""
        if self.settings is None:
            return
        from healer.core.notify import status_view

        try:
            view = status_view(self.settings, self.store)
        except Exception:  # a broken store or setting must not break the scrape
            log.exception("notify state unreadable")
            return
        sent = CounterMetricFamily("healer_notify_sent", "Notifications delivered, by target",
                                   labels=["target"])
        failures = CounterMetricFamily("healer_notify_failures", "Notifications given up "
                                       "after their retries (or refused for good), by target",
                                       labels=["target"])
        retries = CounterMetricFamily("healer_notify_retries", "Failed notification tries "
                                      "that will be retried, by target", labels=["target"])
        for name, t in view["targets"].items():
            sent.add_metric([name], t["sent"])
            failures.add_metric([name], t["failures"])
            retries.add_metric([name], t["retries"])
        depth = GaugeMetricFamily("healer_notify_queue_depth", "Notifications waiting in the "
                                  "outbox (including those backing off)")
        depth.add_metric([], view["queue"])
        yield from (sent, failures, retries, depth)

    def _spend(self) -> Iterator[Metric]:
        """Today's agent spend (UTC) per kind and ``all``, and each daily budget."""
        if self.settings is None:
            return
        from healer.agents.budget import spend_view

        try:
            budgets = spend_view(self.settings, self.store)["budgets"]
        except Exception:  # a broken store must not break the scrape
            log.exception("agent spend unreadable")
            return
        spent = GaugeMetricFamily("healer_agent_spend_usd", "What agents spent today (UTC), "
                                  "by kind and all (every process)", labels=["kind"])
        limit = GaugeMetricFamily("healer_agent_budget_usd", "The daily agent budget "
                                  "(agents.daily_budget_usd), by kind and all",
                                  labels=["kind"])
        for kind, b in budgets.items():
            spent.add_metric([kind], float(b["spent_usd"]))
            if b.get("limit_usd"):
                limit.add_metric([kind], float(b["limit_usd"]))
        yield spent
        yield limit


def _per_kind(name: str, doc: str, row: dict[str, Any]) -> CounterMetricFamily:
    out = CounterMetricFamily(name, doc, labels=["kind"])
    for kind, n in sorted(row.items()):
        out.add_metric([kind], n)
    return out
