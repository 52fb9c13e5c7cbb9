"""One look at everything: what is broken, what healer is doing, and what needs a person.

``healer status`` (without a fingerprint) prints this above the healing attempts. It only
reads state — records in the store, the loop's status file, the human inbox — so it works
whether or not a loop is running, and on either store backend.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from healer.config import Settings
from healer.core import gate, seeds
from healer.core.about import describe
from healer.core.incidents import Ledger, public_view
from healer.core.store import Store
from healer.errors import UsageError

ACTIVE_SHOWN = 10


def loop_state(settings: Settings) -> dict[str, Any]:
    """The loop's state from the status file it writes (``never run``, ``running``,
    ``stopped``, or dead), with its pid, API address, uptime and bus counters."""
    path = settings.state_path / "loop.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"state": "never run"}
    alive = False
    if data.get("state") == "running":
        try:
            os.kill(int(data["pid"]), 0)
            alive = True
        except (OSError, ValueError, KeyError):
            alive = False
    state = data.get("state", "?")
    if state == "running" and not alive:
        state = "dead (not stopped cleanly)"
    return {"state": state, "pid": data.get("pid"), "api": data.get("api", ""),
            "uptime_s": data.get("uptime_s"), "bus": data.get("bus", {})}


def _play(store: Store) -> dict[str, Any]:
    active = store.members("sessions-active")
    open_issues = []
    for pid in active:
        rec = store.get("sessions", pid)
        for issue in (rec.data.get("issues") or []) if rec else []:
            if not issue.get("resolved"):
                open_issues.append({"play_id": pid, "issue_type": issue["issue_type"],
                                    "agent": issue.get("agent", ""),
                                    "description": issue["description"],
                                    "escalated": bool(issue.get("escalated")),
                                    # a watcher's alert: the pod / CodeRun / PR behind it
                                    **{k: issue[k] for k in ("target", "link")
                                       if issue.get(k)}})
    from healer.play.remediate import KIND, running_keys

    # From the index (built once on a state dir from before it, as attempts' is).
    records = [(k, rec.data) for k in running_keys(store)
               if (rec := store.get(KIND, k)) and rec.data.get("status") == "running"]
    from healer.play.runtime import held

    return {"active_sessions": len(active), "open_issues": open_issues,
            "remediations_running": [k for k, _ in records],
            # who runs each (with replicas: which one), from when, and how far it got
            "remediations": [{"key": k, "play_id": d.get("play_id", ""),
                              "issue_type": d.get("issue_type", ""),
                              "owner": str((d.get("owner") or {}).get("holder") or ""),
                              "started_at": d.get("started_at", ""),
                              "rounds": len(d.get("attempts") or []),
                              "taken_over": bool(d.get("taken_over"))}
                             for k, d in records],
            "agents_held": held(store)}


def _incidents(store: Store) -> dict[str, Any]:
    """Every kind's incidents from the core ledger: counts (one record, kept with every
    write) and the active ones — what is broken and what healer is doing about it."""
    book = Ledger(store)
    stats = book.stats()
    by_kind = {k: {s: n for s, n in v.items() if n} for k, v in stats["status"].items()}
    active = [public_view(i) for i in book.active()[:ACTIVE_SHOWN]]
    escalated = [public_view(i) for i in book.list(status="escalated", limit=ACTIVE_SHOWN).items]
    return {"by_kind": {k: v for k, v in by_kind.items() if v}, "active": active,
            "escalated": escalated, "decisions": stats.get("decisions", {}),
            "dropped": stats.get("dropped", {})}


def _approvals(settings: Settings, store: Store) -> dict[str, Any]:
    """What waits for a person's approval (code agents to start, held fixes to publish)."""
    from healer.selfheal.approvals import waiting

    return waiting(settings, store)


def _gate(store: Store) -> dict[str, Any]:
    """What the one gate holds now, of every kind: the claims of work in progress (each
    kind's novelty key)."""
    claims: dict[str, list[str]] = {}
    for key, entry in sorted(gate.admission(store)["active"].items()):
        claims.setdefault(str(entry.get("kind") or "code"), []).append(key)
    return {"claims": claims}


def _selfheal(store: Store) -> dict[str, Any]:
    """Healing attempts not finished yet (read from their index, not the whole folder)."""
    from healer.selfheal.attempts import Attempts

    counts: dict[str, int] = {}
    for att in Attempts(store).unfinished():
        status = str(att.get("status", "?"))
        counts[status] = counts.get(status, 0) + 1
    return {"attempts": counts}


def _fleet(store: Store) -> dict[str, Any]:
    rec = store.get("fleet-status", "latest")
    if rec is None:
        return {}
    peers = rec.data.get("peers") or {}
    broken = {}
    for name, p in peers.items():
        probe = p.get("probe") or {}
        bad = [c for c, v in (probe.get("channels") or {}).items()
               if isinstance(v, dict) and v.get("ok") is False]
        if bad:
            broken[name] = bad
    return {"node": rec.data.get("node"), "peers": len(peers), "broken": broken,
            "healing": [n for n, p in peers.items() if p.get("healing")],
            "age_s": round(time.time() - float(rec.data.get("at") or 0), 1)}


def _github(store: Store) -> dict[str, Any]:
    """The GitHub watcher: PRs followed, the alerts raised on them, the last polling pass
    (its rate-limit budget, and until when it waits)."""
    from healer.play.github.poller import STATUS
    from healer.play.github.pulls import KIND, TRACKED

    tracked = store.members(TRACKED)
    if not tracked and store.get(*STATUS) is None:
        return {}
    firing = []
    for key in tracked[:200]:
        rec = store.get(KIND, key)
        for play_id, codes in ((rec.data.get("firing") or {}) if rec else {}).items():
            firing += [{"play_id": play_id, "code": code, "url": rec.data.get("url", "")}
                       for code in codes]  # type: ignore[union-attr]
    last = store.get(*STATUS)
    return {"tracked_prs": len(tracked), "alerts": firing,
            "last_poll": last.data if last else None}


def _human(settings: Settings) -> list[dict[str, str]]:
    out = []
    for path in seeds.inbox(settings.fleet_path, seeds.HUMAN):
        try:
            s = seeds.read(path)
        except Exception:  # a file a person is editing, or foreign: list it anyway
            out.append({"file": str(path), "subject": "(unreadable)", "severity": "?"})
            continue
        out.append({"file": str(path), "subject": s.subject, "severity": s.severity,
                    "from": s.sender, "timestamp": s.timestamp})
    return out


def _agents(settings: Settings) -> dict[str, Any]:
    """The agent runs in progress on this machine (the holders of the shared slots), and the
    sandbox they run in: ``on``, ``off`` (unconfined), or ``unavailable`` (why: then no agent
    with tools starts, and code attempts wait with ``no_sandbox``)."""
    from healer.agents.sandbox import doctor_check
    from healer.core.slots import SlotPool

    pool = SlotPool.agents(settings)
    ok, detail = doctor_check(settings)
    state = "off" if not settings.agents.sandbox else "on" if ok else "unavailable"
    return {"max_concurrent": pool.size, "running": pool.holders(),
            "sandbox": {"state": state, "detail": detail}}


def _spend(settings: Settings, store: Store) -> dict[str, Any]:
    """Today's and this month's agent spend (UTC) against each budget
    (``healer.agents.budget``)."""
    from healer.agents.budget import spend_view

    return dict(spend_view(settings, store))


def _usd(value: float) -> str:
    from healer.agents.budget import usd_text

    return usd_text(value)


def overview(settings: Settings, store: Store) -> dict[str, Any]:
    return {
        "loop": loop_state(settings),
        "agents": _agents(settings),
        "agent_spend": _spend(settings, store),
        "play": _play(store),
        "incidents": _incidents(store),
        "gate": _gate(store),
        "selfheal": _selfheal(store),
        "fleet": _fleet(store),
        "github": _github(store),
        "approvals": _approvals(settings, store),
        "notify": _notify(settings, store),
        "needs_a_person": _human(settings),
    }


def _notify(settings: Settings, store: Store) -> dict[str, Any]:
    """Per notify target: sent, retried, given up, queued; the outbox depth."""
    from healer.core.notify import status_view

    try:
        return status_view(settings, store)
    except Exception as exc:  # a bad notify setting must not hide the rest of the status
        return {"targets": {}, "queue": 0, "failed": [], "error": str(exc)[:200]}


def _render_notify(data: dict[str, Any]) -> list[str]:
    targets = data.get("targets") or {}
    if not targets and not data.get("queue"):
        return []
    line = "notify: " + (", ".join(
        f"{name} {t['sent']} sent" + (f", {t['queued']} queued" if t["queued"] else "")
        + (f", {t['failures']} FAILED" if t["failures"] else "")
        for name, t in targets.items()) or "no target") + f"; queue {data.get('queue', 0)}"
    out = [line]
    for name, t in targets.items():
        err = t.get("last_error") or {}
        if t["failures"] or (t["queued"] and err):
            out.append(f"  {name}: last error {err.get('detail', '?')}")
    return out


def render(data: dict[str, Any]) -> str:
    """Plain text for the terminal (scripts use --json)."""
    lines = []
    loop = data["loop"]
    lines.append(f"loop: {loop['state']}" + (f" (pid {loop['pid']}, API {loop['api']})"
                                            if loop.get("api") else ""))
    agents = data["agents"]
    lines.append(f"agents running: {len(agents['running'])} of {agents['max_concurrent']}")
    box = agents.get("sandbox") or {}
    if box.get("state") == "unavailable":
        lines.append(f"  agents WAIT: no sandbox — {box['detail']}")
    elif box.get("state") == "off":
        lines.append("  agents run UNCONFINED (agents.sandbox: off)")
    for a in agents["running"]:
        lines.append(f"  - {a.get('agent', '?')} ({a.get('kind', '?')}) on "
                     f"{a.get('target', '?')}, run {a.get('run_id', '?')}, "
                     f"for {max(0, int(time.time() - float(a.get('since') or time.time())))} s")
    spend = data.get("agent_spend") or {}
    month = spend.get("month") or {}
    for label, block in ((f"today ({spend.get('day')} UTC)", spend),
                         (f"this month ({month.get('month')} UTC)", month)):
        budgets = block.get("budgets") or {}
        if any(b.get("limit_usd") or b.get("spent_usd") for b in budgets.values()):
            lines.append(f"agent spend {label}: " + ", ".join(
                f"{kind} {_usd(b['spent_usd'])}"
                + (f" of {_usd(b['limit_usd'])}" if b.get("limit_usd") else " (no limit)")
                + (" — SPENT, runs wait" if b.get("over") else "")
                for kind, b in budgets.items())
                + (f"; resets {block['resets_at']}" if any(b.get("over")
                                                            for b in budgets.values()) else ""))
    lines += _render_notify(data.get("notify") or {})
    play = data["play"]
    lines.append(f"plays: {play['active_sessions']} active, {len(play['open_issues'])} open "
                 f"issue(s), {len(play['remediations_running'])} remediation(s) running")
    for i in play["open_issues"][:10]:
        mark = " [escalated]" if i["escalated"] else ""
        where = f" [{i['target']}]" if i.get("target") else ""
        lines.append(f"  - {i['play_id']}: {i['description']}{where}{mark}")
    for r in (play.get("remediations") or [])[:10]:
        on = f" on {r['owner']}" if r["owner"] else ""
        moved = " (taken over)" if r["taken_over"] else ""
        lines.append(f"  remediating {r['play_id']} {r['issue_type']}: {r['rounds']} round(s) "
                     f"done{on}{moved}, since {r['started_at']}")
    held = play.get("agents_held") or []
    if held:
        waiting = [a for a in held if a["status"] == "waiting"]
        lines.append(f"agents held: {len(waiting)} waiting, {len(held) - len(waiting)} paused")
        for a in held[:10]:
            when = f", resumes {a['resume_at']}" if a.get("resume_at") else ""
            lines.append(f"  - {a['agent']} in {a['play_id']}: {a['status']} "
                         f"({a['code']} {a['reason']}{when})")
        if len(held) > 10:
            lines.append(f"  … and {len(held) - 10} more")
    inc = data["incidents"]
    if inc["by_kind"]:
        lines.append("incidents: " + "; ".join(
            f"{kind} " + ", ".join(f"{n} {s}" for s, n in sorted(row.items()))
            for kind, row in sorted(inc["by_kind"].items())))
    for i in inc["active"]:
        doing = i.get("doing") or (i.get("gate") or {}).get("message", "")
        state = i["status"] + (", anonymous" if i.get("trust") == "anonymous" else "")
        lines.append(f"  - {i['id']} [{state}] {i.get('summary', '')[:80]} "
                     f"(×{i.get('count', 1)}, attempts {i.get('attempts', 0)})"
                     + (f": {' '.join(doing.split())[:100]}" if doing else ""))
        lines += [f"      {line[:150]}" for line in describe(i.get("about"))[:1]]
        if i.get("target"):
            link = (i.get("links") or {}).get("dashboard", "")
            lines.append(f"      on {i['target']}" + (f" → {link}" if link else ""))
    for i in inc["escalated"]:
        seed = (i.get("escalation") or {}).get("seed_file", "")
        lines.append(f"  - {i['id']} [escalated] {i.get('summary', '')[:80]}"
                     + (f" → {seed}" if seed else ""))
        lines += [f"      {line[:150]}" for line in describe(i.get("about"))[:1]]
        if i.get("target"):
            lines.append(f"      on {i['target']}")
    claims = data["gate"]["claims"]
    if claims:
        lines.append("at the gate: " + "; ".join(
            f"{kind} {len(keys)} ({', '.join(keys[:3])}{', …' if len(keys) > 3 else ''})"
            for kind, keys in claims.items()))
    fleet = data["fleet"]
    if fleet:
        lines.append(f"fleet ({fleet['node']}): {fleet['peers']} peer(s), "
                     f"{len(fleet['broken'])} with broken channels, healing: "
                     f"{', '.join(fleet['healing']) or 'none'} (as of {fleet['age_s']} s ago)")
        for peer, chans in fleet["broken"].items():
            lines.append(f"  - {peer}: {', '.join(chans)} broken")
    gh = data.get("github") or {}
    if gh:
        last = gh.get("last_poll") or {}
        budget = (f", rate limit {last['rate_remaining']}/{last['rate_limit']} left"
                  if "rate_remaining" in last else "")
        wait = last.get("waiting_until")
        waits = (f", polling waits {max(0, int(float(wait) - time.time()))} s for the limit"
                 if wait and float(wait) > time.time() else "")
        lines.append(f"github: {gh['tracked_prs']} PR(s) watched, {len(gh['alerts'])} "
                     f"alert(s){budget}{waits}")
        for a in gh["alerts"][:10]:
            lines.append(f"  - {a['play_id']}: {a['code']} on {a['url']}")
    dropped = inc.get("dropped") or {}
    if dropped:
        lines.append("dropped by flood limits: " + "; ".join(
            f"{src} " + ", ".join(f"{n} {why}" for why, n in sorted(row.items()))
            for src, row in sorted(dropped.items())))
    appr = data.get("approvals") or {}
    waits = appr.get("waiting") or []
    if waits or appr.get("not_yet_eligible"):
        lines.append(f"waiting for a person's approval: {len(waits)}"
                     + (f" ({appr['not_yet_eligible']} more below the eligibility threshold)"
                        if appr.get("not_yet_eligible") else ""))
        for w in waits[:10]:
            what = "publish the held fix" if w["stage"] == "publish" else "start a code agent"
            lines.append(f"  - {w['id']} [{w['trust']}]: {what} — {w['summary'][:70]} "
                         f"(healer approve {w['id']} / healer deny {w['id']})")
            for r in (w.get("reasons") or [])[:3]:
                lines.append(f"      held: {r[:120]}")
    human = data["needs_a_person"]
    lines.append(f"needs a person: {len(human)} escalation file(s)"
                 + (" in " + str(os.path.dirname(human[0]["file"])) if human else ""))
    for h in human[:10]:
        lines.append(f"  - [{h['severity']}] {h['subject']}")
    return "\n".join(lines)


INCIDENT_ID = re.compile(r"(?:play|code|fleet)-[A-Za-z0-9._-]{1,120}")


def incident(store: Store, iid: str) -> dict[str, Any]:
    """One incident as the API shows it (``GET /api/v1/incidents/{id}``, without the audit):
    ``UsageError`` naming the id when there is none."""
    data = Ledger(store).get(iid) if INCIDENT_ID.fullmatch(iid) else None
    if data is None:
        raise UsageError(f"no incident {iid!r} (ids are listed by `healer status`)")
    return {**public_view(data), "history": data.get("history", [])}


def render_incident(view: dict[str, Any]) -> str:
    """One incident for the terminal: what it is, what it is about, where it stands."""
    state = view["status"] + (", anonymous" if view.get("trust") == "anonymous" else "")
    lines = [f"{view['id']} [{state}] {view.get('summary', '')}",
             f"  kind {view['kind']}, severity {view.get('severity', '?')}, "
             f"seen ×{view.get('count', 1)}, attempts {view.get('attempts', 0)}"]
    lines += [f"  about: {line}" for line in describe(view.get("about"))]
    if view.get("target"):
        lines.append(f"  on {view['target']}")
    doing = view.get("doing") or (view.get("gate") or {}).get("message", "")
    if doing:
        lines.append(f"  {' '.join(str(doing).split())[:200]}")
    seed = (view.get("escalation") or {}).get("seed_file", "")
    if seed:
        lines.append(f"  escalated → {seed}")
    return "\n".join(lines)
