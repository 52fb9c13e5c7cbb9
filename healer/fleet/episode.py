"""One healing of one peer (an ``Episode``) and its agent runs (``HealAttempt``): what
``healer.fleet.heal`` records and ``healer.fleet.escalation`` reports."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class HealAttempt:
    number: int
    agent: str
    kind: str
    channels: list[str]
    started_at: float
    status: str = "running"
    summary: str = ""
    run_id: str = ""
    result_path: str = ""
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Episode:
    """One healing of one peer, from the first diagnosis to healed or escalated."""

    peer: str
    reason: str
    started_at: float = field(default_factory=time.time)
    # healing | healed | escalated | deferred | transient | stopped | elsewhere (another node
    # holds the lease on this peer and heals it) | held (what is still broken is a problem a
    # person already has: it was escalated and is cooling down) | silenced (a person's
    # silence covers its incident: no repair runs; healer.core.silences)
    state: str = "healing"
    broken: list[str] = field(default_factory=list)
    attempts: list[HealAttempt] = field(default_factory=list)
    ended_at: float = 0.0
    escalation: str = ""
    last_probe: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # what it worked on (diagnosis problems)
    held: list[str] = field(default_factory=list)  # problems left to a person (cooling down)
    escalated: list[str] = field(default_factory=list)  # the problems it handed to a person
    incident: str = ""  # fleet-<peer>-<problem>[.<problem>…]
    respect_cooldowns: bool = False  # automatic episodes leave escalated problems alone
    verified_at: float = 0.0  # when the probe it last acted on started (epoch seconds)

    @property
    def duration_s(self) -> float:
        return (self.ended_at or time.time()) - self.started_at

    @property
    def agents(self) -> list[str]:
        return list(dict.fromkeys(a.agent for a in self.attempts))

    def to_dict(self) -> dict[str, Any]:
        return {"peer": self.peer, "reason": self.reason, "state": self.state,
                "started_at": self.started_at, "ended_at": self.ended_at,
                "duration_s": round(self.duration_s, 3), "broken": self.broken,
                "agents": self.agents, "escalation": self.escalation,
                "attempts": [a.to_dict() for a in self.attempts],
                "last_probe": self.last_probe, "problems": self.problems, "held": self.held,
                "escalated": self.escalated, "incident": self.incident}
