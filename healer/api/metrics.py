"""Prometheus metrics: one registry per healer process (not the global one)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

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
        self.reports = Counter("healer_error_reports", "report_error calls, by decision",
                               ["decision"], registry=r)
        self.webhooks = Counter("healer_webhooks", "Webhook deliveries, by source and result",
                                ["source", "result"], registry=r)
        self.heals = Counter("healer_fleet_heals", "Fleet healing runs, by kind and outcome",
                             ["kind", "outcome"], registry=r)

    def render(self, ctx: Any) -> tuple[bytes, str]:
        try:
            self.sessions_active.set(len(ctx.store.members(ACTIVE_SESSIONS_SET)))
        except Exception:  # a broken store must not break the scrape
            self.sessions_active.set(float("nan"))
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
