"""``send_with_fallback``: deliver one message down the channel ladder within one budget.

- Order ``strict``: the ladder P1 → P7. Order ``reliability``: by each channel's recent score
  for that peer — +2 if it delivered in the last 60 s, + ok/(ok+fail), − min(0.05 × fail, 1) —
  so a message never keeps crawling over the slowest channel when LAN HTTP works (a failure
  users of the original hit).
- Each channel gets its own timeout (``fleet.timeouts``), halved when it failed more than
  half of its tries, and never more than what is left of the whole budget
  (``fleet.send_budget_s``, 30 s).
- Wake-on-LAN delivers nothing: it is tried, reported as ``sent``, and the ladder goes on.
- Repair messages never travel by git (P7).
- Delivering on P3 or later means the faster channels above failed: ``on_degraded`` is called
  with them, so the loop heals them.
- An ``emergency`` message that no channel delivered goes to Discord, if configured.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from healer.config import NodeEntry
from healer.fleet.channels import Channel, FleetContext, Outcome, enabled, reason

log = logging.getLogger(__name__)

RECENT_S = 60.0
DEGRADED_LEVEL = 3  # P3 and later


@dataclass
class ChannelStats:
    ok: int = 0
    fail: int = 0
    last_ok: float = 0.0

    @property
    def failure_rate(self) -> float:
        total = self.ok + self.fail
        return self.fail / total if total else 0.0

    def score(self, now: float) -> float:
        total = self.ok + self.fail
        recent = 2.0 if self.last_ok and now - self.last_ok <= RECENT_S else 0.0
        return recent + (self.ok / total if total else 0.0) - min(0.05 * self.fail, 1.0)


class Reliability:
    """Per peer and channel: how sends went."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self._stats: dict[tuple[str, str], ChannelStats] = {}

    def get(self, peer: str, channel: str) -> ChannelStats:
        return self._stats.setdefault((peer, channel), ChannelStats())

    def record(self, peer: str, channel: str, ok: bool) -> None:
        st = self.get(peer, channel)
        if ok:
            st.ok += 1
            st.last_ok = self.clock()
        else:
            st.fail += 1

    def score(self, peer: str, channel: str) -> float:
        return self.get(peer, channel).score(self.clock())

    def snapshot(self) -> dict[str, dict[str, dict[str, float]]]:
        out: dict[str, dict[str, dict[str, float]]] = {}
        now = self.clock()
        for (peer, ch), st in sorted(self._stats.items()):
            out.setdefault(peer, {})[ch] = {"ok": st.ok, "fail": st.fail,
                                            "score": round(st.score(now), 3)}
        return out


@dataclass
class Attempt:
    channel: str
    level: str
    status: str  # delivered | sent | failed | skipped
    detail: str
    timeout_s: float
    latency_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"channel": self.channel, "level": self.level, "status": self.status,
                "detail": self.detail, "timeout_s": round(self.timeout_s, 2),
                "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 1)}


@dataclass
class Delivery:
    """How one send went: where it landed (if anywhere) and every channel tried."""

    peer: str
    message_id: str
    delivered: bool = False
    channel: str = ""
    level: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    elapsed_s: float = 0.0
    degraded: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"peer": self.peer, "message_id": self.message_id, "delivered": self.delivered,
                "channel": self.channel, "level": self.level, "degraded": self.degraded,
                "elapsed_s": round(self.elapsed_s, 3),
                "attempts": [a.to_dict() for a in self.attempts]}


def level_number(level: str) -> int:
    return int(level[1:]) if level[1:].isdigit() else 99


def order_channels(chans: list[Channel], peer: str, order: str,
                   stats: Reliability) -> list[Channel]:
    """The ladder (``strict``) or the ladder sorted by score, best first (``reliability``)."""
    if order == "strict":
        return list(chans)
    rank = {c.name: i for i, c in enumerate(chans)}
    return sorted(chans, key=lambda c: (-stats.score(peer, c.name), rank[c.name]))


def channel_timeout(ctx: FleetContext, ch: Channel, peer: str, stats: Reliability) -> float:
    base = ctx.timeout(ch.name)
    return base / 2 if stats.get(peer, ch.name).failure_rate > 0.5 else base


Degraded = Callable[[str, list[str]], Awaitable[None] | None]


async def send_with_fallback(ctx: FleetContext, node: NodeEntry, msg: dict[str, Any], *,
                             stats: Reliability, order: str | None = None,
                             budget_s: float | None = None, repair: bool | None = None,
                             on_degraded: Degraded | None = None) -> Delivery:
    """Deliver ``msg`` to ``node`` on the first channel that takes it (see the module doc)."""
    start = time.monotonic()
    budget = budget_s if budget_s is not None else ctx.fleet.send_budget_s
    is_repair = msg.get("type") == "repair" if repair is None else repair
    result = Delivery(peer=node.node_id, message_id=str(msg.get("id", "")))
    chans = []
    for ch in enabled(ctx.settings):
        if is_repair and not ch.carries_repairs:
            continue
        why = await ch.applies(ctx, node)
        if why:
            result.attempts.append(Attempt(ch.name, ch.level, "skipped", why, 0.0))
            continue
        chans.append(ch)
    failed: list[str] = []
    for ch in order_channels(chans, node.node_id, order or ctx.fleet.order, stats):
        left = budget - (time.monotonic() - start)
        timeout = min(channel_timeout(ctx, ch, node.node_id, stats), left)
        if timeout <= 0.05:
            result.attempts.append(Attempt(ch.name, ch.level, "skipped",
                                           f"budget of {budget:g} s used up", 0.0))
            continue
        try:
            out = await asyncio.wait_for(ch.send(ctx, node, msg, timeout),
                                         min(timeout * ch.stages, left) + 0.5)
        except TimeoutError:
            out = Outcome(False, "timed out", None, "failed")
        except Exception as exc:
            out = Outcome(False, reason(exc), None, "failed")
        stats.record(node.node_id, ch.name, out.ok)
        result.attempts.append(Attempt(ch.name, ch.level, out.status or
                                       ("delivered" if out.ok else "failed"), out.detail,
                                       timeout, out.latency_ms))
        if out.ok and out.status != "sent":
            result.delivered, result.channel, result.level = True, ch.name, ch.level
            break
        if not out.ok:
            failed.append(ch.name)
    result.elapsed_s = time.monotonic() - start
    if result.delivered and level_number(result.level) >= DEGRADED_LEVEL and failed:
        result.degraded = True
        log.warning("message to %s needed %s (%s); healing %s", node.node_id, result.level,
                    result.channel, ", ".join(failed))
        if on_degraded is not None:
            pending = on_degraded(node.node_id, failed)
            if asyncio.iscoroutine(pending):
                await pending
    if not result.delivered and msg.get("priority") == "emergency":
        await _discord(ctx, node, msg, result)
    return result


async def _discord(ctx: FleetContext, node: NodeEntry, msg: dict[str, Any],
                   result: Delivery) -> None:
    url = ctx.settings.notify.discord_webhook_url
    if not url:
        return
    from healer.core.notify.discord import post_discord
    from healer.fleet.messages import subject_of

    body = str((msg.get("payload") or {}).get("body", ""))
    ok = await post_discord(url, f"[fleet → {node.node_id}] {subject_of(msg)}", body,
                            severity="critical", timeout=ctx.timeout("discord"))
    result.attempts.append(Attempt("discord", "emergency", "sent" if ok else "failed",
                                   "Discord webhook", ctx.timeout("discord")))
