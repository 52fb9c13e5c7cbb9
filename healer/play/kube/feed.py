"""Followed pod log lines → the play's log detection, as if the agent had posted them.

The seed's play healer reads the agents' pod logs itself (``kubectl logs -l app=coderun -f``)
and judges them. With ``kube.follow_logs`` and ``kube.detect_logs`` the watcher hands every
line of an agent's pod (its owner labels name the play and agent) to ``AgentLogFeed``, which
batches them per (play, agent) and gives each batch to ``PlayService.ingest_logs`` — the
same detection, per-agent pre-flight window and issues as ``POST /api/v1/session/{id}/logs``.

Only plays with an active session are fed (the per-agent checklist needs the session's
expected tools); other lines are counted as skipped. Each line keeps the timestamp the API
gave it (to the second), as an RFC 3339 prefix the line model strips, so the pre-flight
window counts from the agent's own first line. Pending lines are bounded per agent (the
oldest go first).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from healer.errors import HealerError
from healer.play.sessions import iso

log = logging.getLogger(__name__)

FLUSH_S = 0.5  # lines of one agent that arrive within this are one detection batch
MAX_BATCH = 500  # lines given to one ingest_logs call
MAX_PENDING = 5000  # lines held per agent while a flush is slow


class AgentLogFeed:
    def __init__(self, play: Any, *, flush_s: float = FLUSH_S):
        self.play = play
        self.flush_s = flush_s
        self.fed = 0  # lines given to detection
        self.skipped = 0  # lines of plays with no active session
        self.dropped = 0  # lines over MAX_PENDING
        self._pending: dict[tuple[str, str], list[str]] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, play_id: str, agent: str, ts: float | None, text: str) -> None:
        """One line of ``agent``'s pod in ``play_id`` (called on the event loop)."""
        batch = self._pending.setdefault((play_id, agent), [])
        batch.append(f"{iso(ts)} {text}" if ts else text)
        if len(batch) > MAX_PENDING:
            self.dropped += len(batch) - MAX_PENDING
            del batch[: len(batch) - MAX_PENDING]
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(self.flush_s)
        await self.flush()

    async def flush(self) -> None:
        """Give every pending batch to detection now."""
        while self._pending:
            pending, self._pending = self._pending, {}
            for (play_id, agent), lines in pending.items():
                session = self.play.registry.get(play_id)
                if not session or session.get("status") != "active":
                    self.skipped += len(lines)
                    continue
                for k in range(0, len(lines), MAX_BATCH):
                    batch = lines[k:k + MAX_BATCH]
                    try:
                        await self.play.ingest_logs(play_id, agent, batch)
                    except HealerError as exc:  # the session ended meanwhile
                        log.info("pod log lines of %s in %s not judged: %s", agent, play_id,
                                 exc)
                        break
                    self.fed += len(batch)

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()
