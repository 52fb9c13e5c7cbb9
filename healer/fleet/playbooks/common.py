"""What every fleet playbook shares: the node it works on, and probing one channel."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from healer.agents.playbooks import PlaybookContext
from healer.config import NodeEntry
from healer.errors import UsageError
from healer.fleet.channels import FleetContext, Outcome, probe_peer
from healer.fleet.peers import from_agent_peer


@contextlib.asynccontextmanager
async def open_fleet(ctx: PlaybookContext) -> AsyncIterator[tuple[FleetContext, NodeEntry]]:
    shared = ctx.context.get("fleet")
    fctx = shared if isinstance(shared, FleetContext) else FleetContext.open(ctx.settings)
    try:
        if fctx.view.exists and ctx.task.target in fctx.view.nodes:
            node = fctx.view.nodes[ctx.task.target]
        elif "peer" in ctx.context:
            node = from_agent_peer(ctx.context["peer"])
        else:
            raise UsageError(f"{ctx.task.target!r} is not a node in {fctx.view.path}")
        yield fctx, node
    finally:
        if fctx is not shared:
            await fctx.aclose()


def as_result(out: Outcome) -> dict[str, Any]:
    return out.as_result()


NOT_APPLICABLE = Outcome(False, "channel not applicable", None, "failed")


async def probe_one(fctx: FleetContext, node: NodeEntry, name: str) -> Outcome:
    return (await probe_peer(fctx, node, [name])).channels.get(name, NOT_APPLICABLE)


async def probe_until(fctx: FleetContext, node: NodeEntry, name: str, seconds: float,
                      every: float = 0.25) -> Outcome:
    """Probe ``name`` until it works or ``seconds`` pass; the last outcome."""
    out = await settle(fctx, node, name, seconds, every)
    return out if out is not None else NOT_APPLICABLE


async def settle(fctx: FleetContext, node: NodeEntry, name: str, seconds: float,
                 every: float = 0.25) -> Outcome | None:
    """Probe ``name`` until it works or ``seconds`` pass; the last outcome, None when the
    channel does not apply to ``node`` (not configured)."""
    deadline = time.monotonic() + seconds
    while True:
        out = (await probe_peer(fctx, node, [name])).channels.get(name)
        if out is None or out.ok or time.monotonic() >= deadline:
            return out
        await asyncio.sleep(every)


def last_line(text: str, n: int = 300) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[-n:]
