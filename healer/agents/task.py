"""The contract between healer and its executors: an ``AgentTask`` in, a ``RunOutcome`` out."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from healer.agents.results import SUCCESS
from healer.agents.sandbox.policy import parse_endpoint
from healer.core.names import safe_name
from healer.errors import ExecutorError, UnsafeNameError, UsageError

_RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_KIND = re.compile(r"[a-z0-9_]{1,32}")
_INCIDENT = re.compile(r"[A-Za-z0-9._-]{1,128}")


def new_run_id() -> str:
    return "run-" + secrets.token_hex(6)


@dataclass(frozen=True)
class AgentTask:
    """One piece of work for one agent.

    ``agent`` names a definition in ``agents/``; ``target`` is what it works on (a peer, a play
    id, a fingerprint) and ends up in the result file name, so it must be a safe name. The
    prompt is ``prompt`` if given, else ``template`` (default ``prompts/<agent>.md.j2``)
    rendered with ``context`` over what ``vars`` provide. Empty ``kind``, ``run_id`` and
    ``timeout_s`` take the agent's result kind, a fresh id and ``settings.executor.timeout_s``.

    In the sandbox (``healer.agents.sandbox``), ``cwd`` is the run's checkout: writable unless
    ``read_only``; a task without one works in an empty folder of its run (unconfined: the
    current directory). ``network`` adds ``host:port`` endpoints the run may reach (the fleet's
    peers, set by the capability that knows them).

    ``read_only``: the run may write nothing but its result file — its prompt says so, it gets
    ``HEALER_READ_ONLY=1``, and the sandbox mounts its ``cwd`` read-only (the play's
    evaluation agent runs so).
    """

    agent: str
    target: str
    kind: str = ""
    prompt: str | None = None
    template: str | None = None
    context: Mapping[str, Any] = field(default_factory=dict)
    vars: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_s: float | None = None
    incident: str = ""
    run_id: str = ""
    mcp_servers: Mapping[str, Any] = field(default_factory=dict)
    read_only: bool = False
    network: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        try:
            safe_name(self.agent, "agent name")
            safe_name(self.target, "target")
        except UnsafeNameError as exc:
            raise UsageError(str(exc)) from exc
        if self.kind and not _KIND.fullmatch(self.kind):
            raise UsageError(f"kind {self.kind!r}: use 1-32 lowercase letters, digits or _")
        if self.run_id and not _RUN_ID.fullmatch(self.run_id):
            raise UsageError(f"run_id {self.run_id!r}: use 1-64 letters, digits, '.', '_', '-'")
        if self.incident and not _INCIDENT.fullmatch(self.incident):
            raise UsageError(f"incident {self.incident!r}: use letters, digits, '.', '_', '-'")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise UsageError("timeout_s must be positive")
        if self.cwd is not None and any(c in self.cwd for c in "\n\r\0`"):
            raise UsageError("cwd must not contain newlines, NUL or backticks")
        for key in self.vars:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", key):
                raise UsageError(f"var name {key!r}: use letters, digits and _")
        for item in self.network:
            try:
                parse_endpoint(item)
            except ValueError as exc:
                raise UsageError(f"network: {exc}") from None


@dataclass
class RunOutcome:
    """How a run ended. ``status`` is the result's status (or ``failed``/``timeout``).

    ``result`` is the result document on the bus (the agent's, or the failed one healer wrote);
    ``error`` says what went wrong, and ``exception`` keeps the typed ``ExecutorError``.
    """

    run_id: str
    agent: str
    executor: str
    status: str
    result_path: str
    result: dict[str, Any] | None
    error: str
    duration_s: float
    kind: str = ""
    target: str = ""
    incident: str = ""
    exception: ExecutorError | None = field(default=None, repr=False, compare=False)
    cost_usd: float = 0.0  # what the run cost, as reported (healer.agents.budget)

    @property
    def ok(self) -> bool:
        """Whether the result's status means done (ok, diagnosed, healed, fixed)."""
        return self.status in SUCCESS

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "agent": self.agent, "executor": self.executor,
            "status": self.status, "ok": self.ok, "result_path": self.result_path,
            "result": self.result, "error": self.error, "duration_s": round(self.duration_s, 3),
            "kind": self.kind, "target": self.target, "incident": self.incident,
            "error_type": type(self.exception).__name__ if self.exception else "",
            "cost_usd": round(self.cost_usd, 6),
        }
