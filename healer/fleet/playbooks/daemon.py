"""The playbooks that repair the node itself: daemon-restarter (its daemon, over SSH, unless a
person's interactive session is active there) and inbox-repairer (its seed inbox)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from healer.agents.playbooks import PlaybookContext, playbook
from healer.config import NodeEntry
from healer.core import seeds
from healer.fleet.channels import FleetContext
from healer.fleet.playbooks.common import (
    as_result,
    last_line,
    open_fleet,
    probe_one,
    probe_until,
    settle,
)
from healer.fleet.ssh import run_remote, shell_line


def marker_path(fctx: FleetContext, node: NodeEntry) -> str:
    return node.interactive_marker or fctx.fleet.interactive_marker


async def interactive_session(fctx: FleetContext, node: NodeEntry) -> bool | None:
    """Whether a person's interactive session holds the node's marker (None: cannot tell)."""
    res = await run_remote(fctx.fleet, node, ["test", "-e", marker_path(fctx, node)],
                           timeout=fctx.timeout("ssh"))
    if res.returncode in (0, 1):
        return res.returncode == 0
    return None


def leave_notice(fctx: FleetContext, node: NodeEntry, what: str, commands: list[str]) -> Path:
    """A seed file in the node's inbox for the person working there."""
    body = (f"healer wanted to {what} on `{node.node_id}`, but an interactive agent session "
            f"is active here (`{marker_path(fctx, node)}` exists), so it did not.\n\n"
            "When you are done, remove the marker (healer then repairs it on its own), or run:"
            "\n\n```sh\n" + "\n".join(commands) + "\n```\n")
    seed = seeds.Seed(sender=fctx.self_id, to=node.node_id, subject=f"healer: {what} postponed",
                      body=body, type="notice", severity="warning")
    try:
        return seeds.write(fctx.fleet_dir, seed)
    except OSError:  # the inbox itself may be what is broken: the human folder always works
        return seeds.write(fctx.fleet_dir, dataclasses.replace(seed, to=seeds.HUMAN))


@playbook("daemon-restarter")
async def restart_daemon(ctx: PlaybookContext) -> dict[str, Any]:
    """Restart the node's daemon with its configured command over SSH, then verify /health."""
    async with open_fleet(ctx) as (fctx, node):
        actions: list[str] = []
        before = await probe_one(fctx, node, "http")
        actions.append(f"GET /health: {before.detail}")
        if before.ok:
            return {"status": "ok", "summary": f"The daemon on {node.node_id} answers.",
                    "actions_taken": actions, "channels": {"http": as_result(before)}}
        if not node.restart:
            return {"status": "escalated", "actions_taken": actions,
                    "summary": f"No restart command is configured for {node.node_id}; not "
                               "inventing one.",
                    "error": "no `restart` argv in the node's fleet config entry"}
        session = await interactive_session(fctx, node)
        actions.append(f"interactive session marker: {'present' if session else 'absent'}"
                       if session is not None else "interactive session marker: unknown")
        if session is None:
            return {"status": "failed", "actions_taken": actions,
                    "summary": f"SSH to {node.node_id} fails; cannot restart its daemon.",
                    "error": "ssh failed", "channels": {"http": as_result(before),
                                                        "ssh": as_result(await probe_one(fctx, node,
                                                                                "ssh"))}}
        if session:
            path = leave_notice(fctx, node, "restart the fleet daemon",
                                [shell_line(node.restart)])
            actions.append(f"left a notice: {path}")
            return {"status": "escalated", "actions_taken": actions,
                    "summary": f"A person's interactive session is active on {node.node_id}: "
                               "left a notice instead of restarting its daemon.",
                    "data": {"interactive_session": True, "notice": str(path)}}
        res = await run_remote(fctx.fleet, node, list(node.restart), timeout=30)
        actions.append(f"ran {shell_line(node.restart)} over SSH: exit {res.returncode}"
                       + (" (timed out)" if res.timed_out else ""))
        if not res.ok:
            why = last_line(res.stderr) or last_line(res.stdout) or f"exit {res.returncode}"
            return {"status": "failed", "actions_taken": actions, "error": why,
                    "summary": f"The restart command on {node.node_id} failed: {why}"}
        deadline = time.monotonic() + fctx.fleet.restart_verify_s
        after = await probe_until(fctx, node, "http", fctx.fleet.restart_verify_s)
        actions.append(f"GET /health after restart: {after.detail}")
        if not after.ok:
            return {"status": "failed", "actions_taken": actions,
                    "channels": {"http": as_result(after)},
                    "error": f"no /health answer within {fctx.fleet.restart_verify_s:g} s",
                    "summary": f"Restarted {node.node_id}'s daemon but it does not answer."}
        channels = {"http": as_result(after)}
        # The daemon brings its NATS link back too, a moment after /health on a busy node:
        # waited for in what is left of the same time, so it is not taken for a second fault.
        # Still down then, it is reported, and the next round repairs it.
        link = await settle(fctx, node, "nats", max(0.0, deadline - time.monotonic()))
        if link is not None:
            actions.append(f"NATS after restart: {link.detail}")
            channels["nats"] = as_result(link)
        now = ("/health answers again." if link is None else
               "/health and its NATS link answer again." if link.ok else
               "/health answers again, but its NATS link is still down.")
        return {"status": "healed", "actions_taken": actions, "channels": channels,
                "summary": f"Restarted the daemon on {node.node_id}; {now}"}


def _repair_inbox(box: Path) -> list[str]:
    done = []
    if box.is_symlink() or (box.exists() and not box.is_dir()):
        aside = box.with_name(f".{box.name}.blocked-{int(time.time())}")
        os.replace(box, aside)
        done.append(f"moved what blocked the inbox aside: {aside}")
    if not box.exists():
        box.mkdir(parents=True)
        done.append(f"created {box}")
    if not os.access(box, os.W_OK | os.X_OK):
        box.chmod(box.stat().st_mode | 0o700)
        done.append(f"made {box} writable for its owner")
    return done


@playbook("inbox-repairer")
async def repair_inbox(ctx: PlaybookContext) -> dict[str, Any]:
    """Make the node's seed inbox a writable folder again (what blocked it is kept aside)."""
    async with open_fleet(ctx) as (fctx, node):
        box = fctx.fleet_dir / node.node_id
        before = await probe_one(fctx, node, "seed")
        actions = [f"probe {box}: {before.detail}"]
        if before.ok:
            return {"status": "ok", "actions_taken": actions,
                    "channels": {"seed": as_result(before)},
                    "summary": f"The seed inbox of {node.node_id} is writable."}
        try:
            actions += await asyncio.to_thread(_repair_inbox, box)
        except OSError as exc:
            return {"status": "failed", "actions_taken": actions,
                    "error": f"{exc.strerror or exc}",
                    "summary": f"Could not repair {box}: {exc.strerror or exc}"}
        after = await probe_one(fctx, node, "seed")
        actions.append(f"re-probed: {after.detail}")
        return {"status": "healed" if after.ok else "failed", "actions_taken": actions,
                "channels": {"seed": as_result(after)},
                "summary": f"The seed inbox of {node.node_id} is writable again." if after.ok
                else f"The seed inbox of {node.node_id} still fails: {after.detail}"}
