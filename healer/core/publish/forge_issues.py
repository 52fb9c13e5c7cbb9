"""Issues on the forge, deduplicated: where analyses and escalations are written for people.

The forge itself (``local`` Markdown files under ``<state>/forge/issues/``, or GitHub's REST
API) is ``healer.core.publish.forge``; this adds the dedup rule of the play healer: reports that
share a key within a window are one issue, later ones become comments. The forge validates
every title and body with the publication validator before anything is written or sent.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.core.store import Store
from healer.errors import ConflictError

KEYS = "forge-issue-keys"
_KEY_CLEAN = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class IssueRef:
    number: int
    url: str
    created: bool


def dedup_key(*parts: str) -> str:
    return _KEY_CLEAN.sub("-", ".".join(parts)).strip(".-")[:128] or "issue"


class Issues:
    """Open-or-comment with dedup on top of the configured forge."""

    def __init__(self, settings: Any, store: Store, forge: Any = None):
        # ``settings``: healer's Settings (``selfheal.repo``, and what ``open_forge`` reads);
        # typed loosely so that core does not import the config layer.
        self.settings = settings
        self.store = store
        self._forge = forge

    @property
    def forge(self) -> Any:
        if self._forge is None:
            from healer.core.publish.forge import open_forge

            repo = Path(self.settings.selfheal.repo or ".").resolve()
            self._forge = open_forge(self.settings, repo)
        return self._forge

    async def open(self, *, key: str, title: str, body: str, labels: list[str],
                   window_s: float, own: tuple[str, ...] = ()) -> IssueRef:
        """``own``: identifiers healer minted that the texts name (see ``Forge``)."""
        now = time.time()
        existing = self.store.get(KEYS, key)
        if existing and now - float(existing.data["opened"]) < window_s:
            number = int(existing.data["number"])
            await asyncio.to_thread(functools.partial(self.forge.comment_issue, number, body,
                                                      own=own))
            return IssueRef(number, existing.data["url"], created=False)
        ref = await asyncio.to_thread(functools.partial(self.forge.open_issue, title, body,
                                                        tuple(labels), own=own))
        data: dict[str, Any] = {"number": ref.number, "url": ref.url, "opened": now,
                                "title": title}
        try:
            if existing:
                self.store.put(KEYS, key, data, expected_revision=existing.revision)
            else:
                self.store.create(KEYS, key, data)
        except ConflictError:
            pass  # a concurrent opener won; both issues exist, the record keeps theirs
        return IssueRef(ref.number, ref.url, created=True)
