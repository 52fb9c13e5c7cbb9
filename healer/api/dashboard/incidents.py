"""What the Incidents and Needs-a-person views show: ledger records, audit trails, agent runs
and escalation seed files — read from the same files ``healer status`` reads.

Everything an agent, a log line or a reporter wrote is untrusted: run files are scrubbed of
secrets (``healer.core.publish.sanitizer``) and cut before they reach a template, and the
templates escape every value.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.config import Settings
from healer.core import seeds
from healer.core.audit import Audit
from healer.core.incidents import ACTIVE, KINDS, STATUSES, Ledger, public_view
from healer.core.names import is_safe_name
from healer.core.publish.sanitizer import scrub
from healer.core.store import Store
from healer.errors import RejectedFile, UsageError

PAGE = 50
AUDIT_SHOWN = 200
RUN_FILE_BYTES = 64 * 1024  # the tail of each run file that is shown
RUNS_SHOWN = 10
# Audit events that say what a verifier (or the kind's own check) concluded.
VERDICT_EVENTS = frozenset({"attempt_ended", "verdict", "resolved", "escalated", "watch_passed",
                            "fix_merged", "fix_rejected", "heal_finished", "agent_finished",
                            "pr_opened", "heal_again", "approved", "denied",
                            "publication_held"})
RUN_FILES = ("prompt.md", "transcript.jsonl", "output.log")
# What a reporter said (report_error): shown as sent, escaped and cut like everything else.
REPORT_FIELDS = ("error_type", "error_message", "call_site", "tool_name", "context", "traceback")


@dataclass(frozen=True)
class Filters:
    kind: str | None = None
    status: str | None = None
    offset: int = 0

    @classmethod
    def parse(cls, query: Any) -> Filters:
        """From query parameters; ``UsageError`` with the reason for an unknown value."""
        kind = query.get("kind") or None
        status = query.get("status") or None
        if kind is not None and kind not in KINDS:
            raise UsageError(f"kind must be one of {', '.join(KINDS)}")
        if status is not None and status not in STATUSES:
            raise UsageError(f"status must be one of {', '.join(STATUSES)}")
        raw = query.get("offset") or "0"
        if not raw.isdigit() or int(raw) > 10_000_000:
            raise UsageError("offset must be a whole number up to 10000000")
        return cls(kind, status, int(raw))


def incident_list(store: Store, f: Filters) -> dict[str, Any]:
    book = Ledger(store)
    page = book.list(kind=f.kind, status=f.status, limit=PAGE, offset=f.offset)
    stats = book.stats()
    counts = {k: {s: n for s, n in row.items() if n} for k, row in stats["status"].items()}
    return {"items": [public_view(i) for i in page.items], "total": page.total,
            "offset": page.offset, "next_offset": page.next_offset,
            "prev_offset": max(0, f.offset - PAGE) if f.offset else None,
            "counts": counts, "kinds": KINDS, "statuses": STATUSES, "filters": f,
            "active": sorted(ACTIVE), "hidden_critical": hidden_critical(book)}


def hidden_critical(book: Ledger) -> list[dict[str, Any]]:
    """Critical incidents a silence hides that are escalated, or would be (an attempt
    failed, or one is running): a person must see them whatever the silence says."""
    out = []
    for iid in book.silenced_ids()[:500]:
        data = book.get(iid)
        if not data or data.get("severity") != "critical" or data.get("status") == "resolved":
            continue
        if data.get("status") == "escalated" or int(data.get("attempts") or 0) > 0:
            out.append(public_view(data))
    return out


def incident_detail(settings: Settings, store: Store, iid: str) -> dict[str, Any] | None:
    data = Ledger(store).get(iid)
    if data is None:
        return None
    audit = Audit(settings.state_path).read(iid, limit=AUDIT_SHOWN)
    verdicts = [e for e in audit if e.get("event") in VERDICT_EVENTS]
    report = data.get("report") if isinstance(data.get("report"), dict) else {}
    return {"incident": public_view(data), "history": data.get("history", []),
            "report": {k: report[k] for k in REPORT_FIELDS if report.get(k)},
            "detail": data.get("detail") or {}, "audit": audit, "verdicts": verdicts,
            "runs": agent_runs(settings, data.get("attempt_ids") or []),
            "seed": seed_link(settings, (data.get("escalation") or {}).get("seed_file", "")),
            "approval": approval_state(settings, data)}


def approval_state(settings: Settings, data: dict[str, Any]) -> dict[str, Any]:
    """What waits for a person on this incident (the approve/deny buttons), if anything."""
    from healer.core import approval
    from healer.selfheal.gates import approval_policy

    stage = approval.waiting_stage(data) if data.get("kind") == "code" else ""
    if not stage:
        return {}
    policy = approval_policy(settings)
    rec = approval.records(data).get(stage) or {}
    return {"stage": stage, "eligible": stage == approval.PUBLISH or approval.eligible(
        data, policy), "reasons": list(rec.get("reasons") or []),
        "error": str(rec.get("error") or ""), "min_events": policy.min_events,
        "min_distinct": policy.min_distinct}


def agent_runs(settings: Settings, attempt_ids: list[str]) -> list[dict[str, Any]]:
    """The run folders of an incident's attempts (an attempt's iterations are
    ``<attempt>-i<n>``), newest attempt first, with their files' tails scrubbed."""
    root = settings.state_path / "agents" / "runs"
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    out = []
    for aid in reversed(attempt_ids[-RUNS_SHOWN:]):
        if not is_safe_name(aid):
            continue
        for name in names:
            if name == aid or name.startswith(aid + "-"):
                out.append(_run(root / name))
    return out[:RUNS_SHOWN * 3]


def _run(folder: Path) -> dict[str, Any]:
    files = []
    for name in (*RUN_FILES, *sorted(n for n in _listdir(folder) if n.endswith(".json"))):
        text, cut = _tail(folder / name)
        if text is None:
            continue
        if name.endswith(".jsonl"):
            text = _transcript(text)
        files.append({"name": name, "text": scrub(text), "cut": cut})
    return {"run_id": folder.name, "files": files}


def _listdir(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _tail(path: Path) -> tuple[str | None, int]:
    """The last RUN_FILE_BYTES of a regular file, and how many bytes were left out."""
    try:
        if path.is_symlink() or not path.is_file():
            return None, 0
        size = path.stat().st_size
        with path.open("rb") as fh:
            fh.seek(max(0, size - RUN_FILE_BYTES))
            raw = fh.read(RUN_FILE_BYTES)
    except OSError:
        return None, 0
    return raw.decode("utf-8", "replace"), max(0, size - RUN_FILE_BYTES)


def _transcript(text: str) -> str:
    """A stream-json transcript as readable lines: who said what (tool calls by name)."""
    lines = []
    for raw in text.splitlines():
        try:
            msg = json.loads(raw)
        except ValueError:
            lines.append(raw)
            continue
        if not isinstance(msg, dict):
            continue
        who = str(msg.get("type") or msg.get("role") or "?")
        content = (msg.get("message") or {}).get("content") if isinstance(
            msg.get("message"), dict) else msg.get("content")
        parts = []
        for block in content if isinstance(content, list) else [content]:
            if isinstance(block, dict):
                if block.get("type") == "text":
                    parts.append(str(block.get("text", "")))
                elif block.get("type") == "tool_use":
                    parts.append(f"[tool {block.get('name', '?')}] "
                                 f"{json.dumps(block.get('input'), ensure_ascii=False)[:500]}")
                elif block.get("type") == "tool_result":
                    parts.append(f"[result] {str(block.get('content', ''))[:500]}")
            elif isinstance(block, str):
                parts.append(block)
        if not parts and msg.get("result"):
            parts.append(str(msg["result"]))
        lines.append(f"{who}: {' '.join(parts)}" if parts else f"{who}")
    return "\n".join(lines)


# -- the human inbox ---------------------------------------------------------------------------


def human_folder(settings: Settings) -> Path:
    return settings.fleet_path / seeds.HUMAN


def seed_link(settings: Settings, seed_file: str) -> dict[str, str] | None:
    """Where an incident's escalation file is now: still waiting, or archived."""
    if not seed_file:
        return None
    name = Path(seed_file).name
    if not seeds.NAME_RE.fullmatch(name):
        return None
    folder = human_folder(settings)
    if (folder / name).is_file():
        return {"name": name, "state": "waiting"}
    if (folder / "archive" / name).is_file():
        return {"name": name, "state": "archived"}
    return {"name": name, "state": "gone"}


def inbox(settings: Settings) -> list[dict[str, Any]]:
    """Every unhandled escalation file for a person, oldest first."""
    out = []
    for path in seeds.inbox(settings.fleet_path, seeds.HUMAN):
        out.append(read_seed(path))
    return out


def read_seed(path: Path) -> dict[str, Any]:
    try:
        seed = seeds.read(path)
    except (RejectedFile, OSError) as exc:
        return {"name": path.name, "subject": "(unreadable seed file)", "severity": "?",
                "body": "", "error": str(exc)[:300], "incident": "", "sender": "", "at": ""}
    return {"name": path.name, "subject": seed.subject, "severity": seed.severity,
            "sender": seed.sender, "at": seed.timestamp, "incident": seed.incident,
            "body": seed.body, "error": ""}


def seed_path(settings: Settings, name: str) -> Path:
    """The waiting seed file ``name``; ``UsageError`` unless it is one (no paths, no links)."""
    if not seeds.NAME_RE.fullmatch(name):
        raise UsageError("not a seed file name (<YYYYmmdd-HHMMSS>-from-<node>.md)")
    path = human_folder(settings) / name
    if path.is_symlink() or not path.is_file():
        raise UsageError(f"{name} is not waiting in the inbox (handled already?)")
    return path
