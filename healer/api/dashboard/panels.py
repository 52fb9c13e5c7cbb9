"""What the Fleet, Plays and Healer views show.

The fleet picture is the loop's live one when the fleet service runs in this process (the
same dictionary ``GET /api/v1/fleet`` answers), else the last one it recorded. Plays and the
gate are read from the store; the loop's own numbers from the running loop, else from the
status file it writes every few seconds (``<state>/loop.json``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from healer.config import Settings
from healer.core import gate
from healer.core.incidents import KINDS
from healer.core.store import Store
from healer.overview import loop_state
from healer.resources import optional

REJECTED_SHOWN = 20
REASON_BYTES = 2000


# -- fleet -------------------------------------------------------------------------------------


def fleet_status(services: dict[str, Any], store: Store) -> dict[str, Any]:
    svc = services.get("fleet")
    if svc is not None:
        return {"source": "live", **svc.status()}
    rec = store.get("fleet-status", "latest")
    if rec is None:
        return {"source": "none", "peers": {}}
    return {"source": "recorded", **rec.data}


def fleet_matrix(settings: Settings, status: dict[str, Any]) -> dict[str, Any]:
    """Nodes × channels (ladder order, with their P-level), one cell per probe result."""
    known = optional("healer.fleet.channels:CHANNELS") or {}
    channels = [{"name": n, "level": getattr(known.get(n), "level", "")}
                for n in settings.fleet.channels]
    rows = []
    for name, peer in sorted((status.get("peers") or {}).items()):
        probe = peer.get("probe") or {}
        results = probe.get("channels") or {}
        skipped = probe.get("skipped") or {}
        cells = []
        for ch in channels:
            r = results.get(ch["name"])
            if isinstance(r, dict):
                state = "ok" if r.get("ok") else "failed"
                cells.append({"state": state, "latency_ms": r.get("latency_ms"),
                              "detail": str(r.get("detail", ""))})
            elif ch["name"] in skipped:
                cells.append({"state": "skipped", "latency_ms": None,
                              "detail": str(skipped[ch["name"]])})
            else:
                cells.append({"state": "unknown", "latency_ms": None, "detail": "not probed"})
        episode = peer.get("episode") or {}
        rows.append({"name": name, "host": peer.get("host", ""), "port": peer.get("port", ""),
                     "heartbeat_age_s": peer.get("heartbeat_age_s"),
                     "watchdog": peer.get("watchdog", "unknown"),
                     "healing": bool(peer.get("healing")),
                     "cooldown_s": peer.get("cooldown_s") or 0,
                     "probed_at": probe.get("at"), "broken": probe.get("broken") or [],
                     "episode": episode, "cells": cells})
    return {"channels": channels, "rows": rows, "node": status.get("node", ""),
            "source": status.get("source", "none"), "at": status.get("at"),
            "nats": status.get("nats") or {}, "deliveries": list(
                reversed(status.get("deliveries") or []))[:20],
            "reliability": status.get("reliability") or {},
            "events": list(reversed(status.get("events") or []))[:30]}


# -- plays -------------------------------------------------------------------------------------


def plays(store: Store) -> dict[str, Any]:
    from healer.play.remediate import KIND as REMEDIATIONS
    from healer.play.remediate import running_keys
    from healer.play.runtime import held
    from healer.play.sessions import SessionRegistry

    registry = SessionRegistry(store)
    sessions = []
    for summary in registry.list_active():
        data = registry.get(summary["play_id"]) or {}
        agents = []
        for agent, entry in sorted((data.get("agents") or {}).items()):
            checklist = [{"item": k, "ok": v.get("ok"), "detail": str(v.get("detail", ""))}
                         for k, v in sorted((entry.get("checklist") or {}).items())
                         if isinstance(v, dict)]
            agents.append({"name": agent, "checklist": checklist,
                           "missing_tools": entry.get("missing_tools") or []})
        sessions.append({**summary, "agents": agents, "issues": list(
            reversed(data.get("issues") or []))[:50]})
    remediations = []
    for key in running_keys(store):
        rec = store.get(REMEDIATIONS, key)
        if rec is not None and rec.data.get("status") == "running":
            remediations.append({"key": key, **{k: rec.data.get(k, "") for k in (
                "play_id", "issue_type", "agent", "started_at", "run_id", "strategy")}})
    return {"sessions": sessions, "remediations": remediations, "held": held(store)}


# -- healer itself -----------------------------------------------------------------------------


def healer_health(settings: Settings, services: dict[str, Any], store: Store
                  ) -> dict[str, Any]:
    loop = services.get("loop")
    state = {"state": "running", **loop.status()} if loop is not None else loop_state(settings)
    adm = gate.admission(store)
    now = time.time()
    from healer.core.slots import SlotPool

    pool = SlotPool.agents(settings)
    return {"loop": state, "bus": state.get("bus") or {},
            "gate": {"claims": sorted(adm["active"].items()),
                     "open_prs": sorted(adm["open_prs"].items()),
                     "cap": {"used": sum(1 for e in adm["active"].values()
                                         if e.get("slot", True)),
                             "max": settings.executor.max_concurrent},
                     "breakers": breakers(settings, adm, now)},
            "agents": {"max": pool.size, "running": pool.holders()},
            "spend": spend(settings, store),
            "rejected": rejected_files(settings.results_path / "rejected")}


def spend(settings: Settings, store: Store) -> list[dict[str, Any]]:
    """Agent spend against each budget, per kind: today's and this month's (UTC) rows."""
    from healer.agents.budget import spend_view, usd_text

    view = spend_view(settings, store)
    rows = []
    for period, block in (("today", view), ("this month", view.get("month") or {})):
        for kind, b in (block.get("budgets") or {}).items():
            if not (b.get("limit_usd") or b.get("spent_usd")):
                continue
            rows.append({"period": period, "kind": kind, "spent": usd_text(b["spent_usd"]),
                         "limit": usd_text(b["limit_usd"]) if b.get("limit_usd") else "",
                         "over": bool(b.get("over")), "runs": b.get("runs", 0),
                         "resets_at": block.get("resets_at", "")})
    return rows


def breakers(settings: Settings, adm: dict[str, Any], now: float) -> list[dict[str, Any]]:
    """Per kind: its latest finished attempts, and whether they tripped the breaker (the
    window is the self-healing one; a kind without a breaker shows only its streak)."""
    window = settings.selfheal.breaker_window
    out = []
    for kind in KINDS:
        mine = [o for o in adm["outcomes"] if str(o.get("kind") or "code") == kind]
        streak = 0
        for o in reversed(mine):
            if not o.get("breaker"):
                break
            streak += 1
        tripped = kind == "code" and len(mine) >= window and streak >= window
        if tripped and now - float(mine[-1].get("at") or 0) >= settings.selfheal.breaker_reset_s:
            state = "half-open"
        else:
            state = "open" if tripped else "closed"
        out.append({"kind": kind, "state": state, "failing_streak": streak,
                    "recent": [str(o.get("status", "?")) for o in mine[-10:]]})
    return out


def rejected_files(folder: Path) -> list[dict[str, Any]]:
    """The newest files the bus set aside, with the reason it wrote beside each."""
    try:
        entries = [e for e in os.scandir(folder)
                   if e.is_file(follow_symlinks=False) and not e.name.endswith(".reason")]
    except OSError:
        return []
    entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
    out = []
    for e in entries[:REJECTED_SHOWN]:
        try:
            with open(os.path.join(folder, e.name + ".reason"), "rb") as fh:
                reason = fh.read(REASON_BYTES).decode("utf-8", "replace").strip()
        except OSError:
            reason = "(no reason recorded)"
        out.append({"name": e.name, "reason": reason,
                    "at": e.stat(follow_symlinks=False).st_mtime})
    return out
