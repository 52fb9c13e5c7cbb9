"""Where a play agent works — never in healer's own checkout.

============================  ===========================================================
run                           working directory
============================  ===========================================================
evaluation                    an empty scratch folder; the run is ``read_only`` (its prompt
                              says so and the sandbox mounts the folder read-only): it writes
                              nothing but its result file
remediation that changes      its own checkout of the play's repository, made for the
code (``fix_code``,           attempt by ``healer.selfheal.worktree.create`` from the local
``fix_config``), repository   checkout ``play.checkouts`` names for the session's
in ``play.checkouts``         ``repository`` (branch ``healing/<key>-<suffix>``)
any other remediation         an empty scratch folder (restart, retry, resume, a fresh
(or no checkout configured)   session — or code the agent then cannot change: it escalates)
============================  ===========================================================

Scratch folders are ``<state>/play/workspaces/<id>`` (mode 0700), removed after the run. A
checkout whose branch got commits is kept for a person to review (its path and branch go on
the remediation's record); one without commits is removed with its branch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.core import incidents as inc
from healer.errors import HealerError

log = logging.getLogger(__name__)

CODE_STRATEGIES = frozenset({"fix_code", "fix_config"})


@dataclass
class Workspace:
    """Where one play agent run works: ``cwd``; with a checkout, its ``branch`` and
    ``repo`` (the local checkout it was made from), and — once the ``async with`` block is
    left — whether it was ``kept`` for a person."""

    cwd: Path
    branch: str = ""
    repo: str = ""
    kept: bool = False  # a checkout left for a person (its branch has commits)


def _new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


@contextlib.asynccontextmanager
async def scratch(settings: Any) -> AsyncIterator[Workspace]:
    """An empty private folder for one run, removed afterwards."""
    root = settings.state_path.resolve() / "play" / "workspaces"
    await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True, mode=0o700)
    path = root / _new_id("ws")
    await asyncio.to_thread(path.mkdir, mode=0o700)
    try:
        yield Workspace(cwd=path)
    finally:
        await asyncio.to_thread(shutil.rmtree, path, True)


def checkout_for(settings: Any, repository: str, strategy: str) -> str:
    """The local checkout a remediation with ``strategy`` on ``repository`` works from
    ('' when it gets a scratch folder)."""
    if strategy not in CODE_STRATEGIES:
        return ""
    return str((settings.play.checkouts or {}).get(repository) or "")


@contextlib.asynccontextmanager
async def for_remediation(settings: Any, repository: str, strategy: str,
                          key: str) -> AsyncIterator[Workspace]:
    """The remediation's working directory (the module's table). ``key`` names the
    remediation (its branch starts with a digest of it)."""
    source = checkout_for(settings, repository, strategy)
    if not source:
        async with scratch(settings) as ws:
            yield ws
        return
    from healer.selfheal import worktree as wt

    attempt = _new_id("play")
    try:
        tree = await asyncio.to_thread(wt.create, Path(source).expanduser(),
                                       settings.state_path, attempt, inc.digest(key))
    except (HealerError, OSError) as exc:
        raise HealerError(f"play.checkouts[{repository!r}]: cannot make a checkout for the "
                          f"remediation from {source}: {exc}") from exc
    ws = Workspace(cwd=tree.path, branch=tree.branch, repo=str(tree.repo))
    try:
        yield ws
        ws.kept = bool(await asyncio.to_thread(tree.commits))
    finally:
        if ws.kept:
            log.info("remediation checkout %s (branch %s) kept for review", tree.path,
                     tree.branch)
        else:
            await asyncio.to_thread(wt.remove, tree.repo, tree.path, branch=tree.branch,
                                    delete_branch=True)
