"""The GitHub watcher in ``python -m healer.loop``.

Wired when configured: with a token or ``github.repos`` (and ``github.poll``) the poller runs
every ``github.poll_interval_s``; with ``github.webhook_secret`` the webhook route
(``healer.api.routes.github_webhook``) folds deliveries into the same records through the
same watcher (``api_services["github"]``). Alerts go to the play capability's ``AlertSink``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from healer.play.alerts import AlertSink
from healer.play.github.client import GitHubClient
from healer.play.github.poller import Poller
from healer.play.github.watcher import GitHubWatcher

log = logging.getLogger(__name__)
PRUNE_EVERY_S = 3600.0


def polling(gh: Any) -> bool:
    """Whether these settings ask for polling."""
    return bool(gh.poll and (gh.token or gh.repos))


def make_client(gh: Any) -> GitHubClient:
    return GitHubClient(api_url=gh.api_url, token=gh.token, timeout=gh.timeout_s,
                        min_remaining=gh.min_remaining, backoff_s=gh.secondary_backoff_s,
                        backoff_cap_s=gh.secondary_backoff_cap_s)


class GitHubLoopService:
    name = "github"

    def __init__(self, healer: Any, watcher: GitHubWatcher, poller: Poller | None):
        self.healer = healer
        self.watcher = watcher
        self.poller = poller

    async def start(self) -> None:
        # Remediations the watcher starts from the webhook's worker threads run on this loop.
        sink = AlertSink.from_healer(self.healer)
        if sink is not None:
            sink.bind(asyncio.get_running_loop())
        gh = self.watcher.gh
        log.info("GitHub watcher: %s", f"polling every {gh.poll_interval_s:.0f} s"
                 if self.poller else "webhook only")

    async def stop(self) -> None:
        if self.poller is not None:
            await self.poller.client.close()


def create_service(healer: Any) -> GitHubLoopService | None:
    gh = healer.settings.github
    if not (polling(gh) or gh.webhook_secret):
        return None
    watcher = GitHubWatcher(healer.settings, healer.store,
                            sink=lambda: AlertSink.from_healer(healer))
    healer.extras.setdefault("api_services", {})["github"] = watcher
    healer.once("github-deliveries", PRUNE_EVERY_S, watcher.prune_deliveries)
    poller = None
    if polling(gh):
        poller = Poller(watcher, make_client(gh))
        watcher.poller = poller
        healer.once("github-poll", gh.poll_interval_s, poller.poll_once)
    return GitHubLoopService(healer, watcher, poller)
